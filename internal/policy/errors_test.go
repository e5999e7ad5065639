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
	// Ratios 0.5, 1.0, ... over a window: quantiles of exactly those.
	e = EstimateError{}
	for i := 1; i <= 100; i++ {
		e.Observe(time.Duration(i)*ms, 10*ms) // ratios 0.1 … 10.0; the window keeps 3.7 … 10.0
	}
	s := e.Summary()
	want := func(p float64) float64 { // nearest rank over 37..100, /10
		n := ErrorWindow
		k := int(p*float64(n)+0.999999) - 1
		return float64(37+k) / 10
	}
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"p10", s.P10, want(0.1)}, {"p50", s.P50, want(0.5)}, {"p90", s.P90, want(0.9)}} {
		if d := c.got - c.want; d > 1e-9 || d < -1e-9 {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if !slices.IsSorted(e.sorted) || len(e.sorted) != ErrorWindow {
		t.Errorf("sorted window broken: %d values", len(e.sorted))
	}
}

func TestEstimateErrorSkipsWhatSaysNothingAndBoundsWildSamples(t *testing.T) {
	var e EstimateError
	e.Observe(time.Second, 0)
	e.Observe(-time.Second, time.Second)
	if e.n != 0 {
		t.Fatalf("kept %d samples of no estimate or a negative time", e.n)
	}
	for range MinErrorSamples {
		e.Observe(time.Hour, time.Millisecond)
	}
	if s := e.Summary(); s.P90 != 16 {
		t.Errorf("a wild ratio is kept at %v, want it bounded at 16", s.P90)
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
	s := ErrorSummary{Known: true, P10: 0.8, P50: 1.2, P90: 2}
	if s.Pessimistic(est, 0.1) != 2*time.Second || s.Central(est) != 1200*time.Millisecond {
		t.Errorf("learned: pessimistic %v central %v", s.Pessimistic(est, 0.1), s.Central(est))
	}
	if sp := s.Spread(0.1); sp < 0.999 || sp > 1.001 {
		t.Errorf("spread %v, want 1", sp)
	}
}
