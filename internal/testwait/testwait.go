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
