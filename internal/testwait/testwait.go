// Package testwait is the one way tests wait for something to happen:
// poll generously, and when patience runs out, fail saying what did not
// happen. A deadline here bounds patience on a busy machine; it is never a
// measurement of speed.
package testwait

import (
	"testing"
	"time"
)

// Eventually polls cond every 20 ms until it reports true and returns how
// long that took, or fails the test after within with what cond last said
// was missing.
func Eventually(tb testing.TB, within time.Duration, what string, cond func() (ok bool, missing string)) time.Duration {
	tb.Helper()
	start := time.Now()
	for {
		ok, missing := cond()
		if ok {
			return time.Since(start)
		}
		if time.Since(start) > within {
			tb.Fatalf("%s: not within %v: %s", what, within, missing)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Holds polls cond every 20 ms for the whole of during and fails the test
// the moment it reports false, with what it said went wrong: for what must
// NOT happen (a node that must not join, members that must not be lost),
// which no wait can confirm early.
func Holds(tb testing.TB, during time.Duration, what string, cond func() (ok bool, wrong string)) {
	tb.Helper()
	start := time.Now()
	for {
		if ok, wrong := cond(); !ok {
			tb.Fatalf("%s: broken after %v: %s", what, time.Since(start).Round(time.Millisecond), wrong)
		}
		if time.Since(start) > during {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}
