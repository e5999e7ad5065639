package lograte

import (
	"fmt"
	"testing"
	"time"
)

func TestOneLinePerKeyPerIntervalWithTheCountHeldBack(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := New(30*time.Second, func() time.Time { return now })
	steps := []struct {
		after          time.Duration
		key            string
		ok             bool
		wantSuppressed int
	}{
		{0, "a", true, 0},
		{time.Second, "a", false, 0},
		{time.Second, "b", true, 0}, // keys are independent
		{time.Second, "a", false, 0},
		{30 * time.Second, "a", true, 2},
		{time.Second, "a", false, 0},
	}
	for i, s := range steps {
		now = now.Add(s.after)
		ok, n := l.Allow(s.key)
		if ok != s.ok || n != s.wantSuppressed {
			t.Errorf("step %d (%s): Allow = %v, %d; want %v, %d", i, s.key, ok, n, s.ok, s.wantSuppressed)
		}
	}
}

func TestAFloodOfDistinctKeysStaysBounded(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := New(time.Second, func() time.Time { return now })
	for i := range 3 * maxKeys {
		l.Allow(fmt.Sprint(i))
	}
	if len(l.keys) > maxKeys {
		t.Errorf("%d keys remembered, want at most %d", len(l.keys), maxKeys)
	}
}
