package policy

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestEstimateErrorIsTheQuantilesOfTheLastWindow(t *testing.T) {
	var e EstimateError
	ms := time.Millisecond
	for i := range MinErrorSamples - 1 {
		e.Observe(time.Duration(100+i)*ms, 100*ms)
	}
	if s := e.Summary(); s.Known {
		t.Fatalf("known after %d samples: %+v", MinErrorSamples-1, s)
	}
	// Differences of 1 … 100 ms: the window keeps the last 64, 37 … 100.
	e = EstimateError{}
	for i := 1; i <= 100; i++ {
		e.Observe(time.Duration(200+i)*ms, 200*ms)
	}
	s := e.Summary()
	want := func(p float64) time.Duration { // nearest rank over 37..100
		k := int(p*float64(ErrorWindow)+0.999999) - 1
		return time.Duration(37+k) * ms
	}
	for _, c := range []struct {
		name      string
		got, want time.Duration
	}{{"p10", s.P10, want(0.1)}, {"p50", s.P50, want(0.5)}, {"p90", s.P90, want(0.9)}} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestEstimateErrorSkipsWhatSaysNothing(t *testing.T) {
	var e EstimateError
	e.Observe(time.Second, 0)
	e.Observe(-time.Second, time.Second)
	if e.n != 0 {
		t.Fatalf("kept %d samples of no estimate or a negative time", e.n)
	}
	for range MinErrorSamples {
		e.Observe(100*time.Millisecond, time.Second) // 900 ms early
	}
	if s := e.Summary(); s.P90 != -900*time.Millisecond || s.Pessimistic(500*time.Millisecond, 0.1) != 0 {
		t.Errorf("early by 900 ms: %+v; pessimistic of 500 ms %v, want never below zero", s, s.Pessimistic(500*time.Millisecond, 0.1))
	}
}

func TestTheSortedWindowMatchesTheRing(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var e EstimateError
	for range 1000 {
		e.Observe(time.Duration(rng.IntN(5000))*time.Millisecond, time.Duration(1+rng.IntN(3000))*time.Millisecond)
		ring := slices.Clone(e.ring[:e.n])
		slices.Sort(ring)
		if !slices.Equal(ring, e.sorted) {
			t.Fatal("the sorted window drifted from the ring")
		}
	}
}

func TestDecisionsReadTheErrorOrFallBack(t *testing.T) {
	est := time.Second
	unknown := ErrorSummary{}
	if got := unknown.Pessimistic(est, 0.1); got != 1100*time.Millisecond {
		t.Errorf("unknown pessimistic %v, want the 10%% fallback", got)
	}
	if got := unknown.Central(est); got != est {
		t.Errorf("unknown central %v", got)
	}
	s := ErrorSummary{Known: true, P10: -200 * time.Millisecond, P50: 200 * time.Millisecond, P90: time.Second}
	if s.Pessimistic(est, 0.1) != 2*time.Second || s.Central(est) != 1200*time.Millisecond {
		t.Errorf("learned: pessimistic %v central %v", s.Pessimistic(est, 0.1), s.Central(est))
	}
}
