package region

import (
	"testing"
	"time"

	"skywalker/internal/policy"
)

// measuredSpeed makes r's learned speed s, as minFirstTokenSamples first
// tokens at idle replicas s times slower than the profile would.
func measuredSpeed(r *pool, s float64) {
	for range minFirstTokenSamples {
		r.idleSpeed.observe(s*float64(time.Second), float64(time.Second))
		r.idleSamples++
	}
}

// twin is a peer whose engines run hardware and that published speed
// (measured or not), its prefill scaled by it as a pool publishes it.
func twin(name, hardware string, speed float64, measured bool, base policy.PrefillProfile) Peer {
	return Peer{Region: name, Healthy: true, GateOpen: true, RTT: 70 * time.Millisecond,
		Load: Load{Replicas: 2, Slots: 8, Hardware: hardware, Speed: speed, SpeedMeasured: measured, Prefill: base.Scaled(speed)}}
}

// TestASlowFleetDoesNotLookFastFromOutside: what a region learns of its
// engines' speed travels in its load summary. A region that has not
// measured its own takes the median of what peers of the same hardware
// measured (for its own estimates, hence admission, and for the summary
// it publishes); a region that has measured its own judges a peer of the
// same hardware that has not at its own speed. Other hardware, and peers
// that have not measured, lend nothing.
func TestASlowFleetDoesNotLookFastFromOutside(t *testing.T) {
	const l4 = "llama3-8b-l4"
	tests := []struct {
		name      string
		hardware  string
		peers     []Peer
		wantSpeed float64
	}{
		{"a measured twin lends its speed", l4, []Peer{twin("eu-west", l4, 8, true, policy.PrefillProfile{})}, 8},
		{"the median of three twins", l4, []Peer{twin("a", l4, 2, true, policy.PrefillProfile{}), twin("b", l4, 50, true, policy.PrefillProfile{}), twin("c", l4, 8, true, policy.PrefillProfile{})}, 8},
		{"a twin that has not measured lends nothing", l4, []Peer{twin("eu-west", l4, 8, false, policy.PrefillProfile{})}, 1},
		{"other hardware lends nothing", l4, []Peer{twin("eu-west", "llama3-8b-h100", 8, true, policy.PrefillProfile{})}, 1},
		{"a region that names no hardware borrows nothing", "", []Peer{twin("eu-west", "", 8, true, policy.PrefillProfile{})}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := newTestRegion(t, 2)
			r.cfg.Hardware = tc.hardware
			r.SetPeers(tc.peers)
			l := r.Load()
			if l.Speed != tc.wantSpeed || l.SpeedMeasured || l.Hardware != tc.hardware {
				t.Errorf("published speed %v (measured %v, hardware %q), want %v, unmeasured, %q", l.Speed, l.SpeedMeasured, l.Hardware, tc.wantSpeed, tc.hardware)
			}
			if want := r.cfg.Prefill.Scaled(tc.wantSpeed); l.Prefill != want {
				t.Errorf("published prefill %+v, want the profile at speed %v: %+v", l.Prefill, tc.wantSpeed, want)
			}
			if got := r.View(req("probe", 1)).Local.Prefill; got != r.cfg.Prefill.Scaled(tc.wantSpeed) {
				t.Errorf("its own estimates use prefill %+v, want the profile at speed %v", got, tc.wantSpeed)
			}
		})
	}

	t.Run("its own measurement wins", func(t *testing.T) {
		r, _ := newTestRegion(t, 2)
		r.cfg.Hardware = l4
		measuredSpeed(r, 3)
		r.SetPeers([]Peer{twin("eu-west", l4, 8, true, policy.PrefillProfile{})})
		if l := r.Load(); l.Speed != 3 || !l.SpeedMeasured {
			t.Errorf("published speed %v (measured %v), want its own 3, measured", l.Speed, l.SpeedMeasured)
		}
	})

	t.Run("an unmeasured twin is judged at this region's speed", func(t *testing.T) {
		for _, measured := range []bool{false, true} {
			r, _ := newTestRegion(t, 2)
			r.cfg.Hardware = l4
			measuredSpeed(r, 6)
			base := r.cfg.Prefill
			r.SetPeers([]Peer{twin("eu-west", l4, 1, measured, base)})
			got := r.View(req("probe", 1)).Peers[0].Prefill
			want := base.Scaled(6)
			if measured {
				want = base // its own measurement: it knows its engines
			}
			if got != want {
				t.Errorf("twin measured=%v: viewed with prefill %+v, want %+v", measured, got, want)
			}
		}
	})
}

// TestAForwardIsWaitedForAsLongAsItsPeerHasShownItTakes: a forward's
// first-byte deadline is FirstTokenFactor × its estimate made as late as
// this node's forwards to that peer have run (the learned error), never
// below MinFirstTokenTimeout; a forward cut at its deadline is a sample of
// that error (its wait, a lower bound), so the next is waited for longer.
func TestAForwardIsWaitedForAsLongAsItsPeerHasShownItTakes(t *testing.T) {
	r, got, _ := trustRegion(t)
	a := offer(t, r, got, "first", t0)
	if a == nil {
		t.Fatal("not forwarded")
	}
	est := a.Decision.Estimate
	if want := max(MinFirstTokenTimeout, FirstTokenFactor*est); a.FirstTokenTimeout() != want {
		t.Fatalf("before anything is learned: deadline %v, want max(%v, %d × the estimate %v)", a.FirstTokenTimeout(), MinFirstTokenTimeout, FirstTokenFactor, est)
	}
	late := 10 * time.Second // each first token came this much after its estimate
	trust := r.trustOf("eu-west")
	for range policy.MinErrorSamples {
		trust.estimate.Observe(est+late, est)
	}
	if want := FirstTokenFactor * (est + late); a.FirstTokenTimeout() != want {
		t.Errorf("after %d first tokens %v late: deadline %v, want %d × (estimate + %v) = %v, read again while it waits",
			policy.MinErrorSamples, late, a.FirstTokenTimeout(), FirstTokenFactor, late, want)
	}

	// Seven forwards on time, then one cut at its deadline: its wait is the
	// eighth sample, and the next forward is waited for FirstTokenFactor
	// times that wait.
	r2, got2, _ := trustRegion(t)
	b := offer(t, r2, got2, "cut", t0)
	if b == nil {
		t.Fatal("not forwarded")
	}
	est = b.Decision.Estimate
	for range policy.MinErrorSamples - 1 {
		r2.trustOf("eu-west").estimate.Observe(est, est)
	}
	waited := MinFirstTokenTimeout
	b.End(t0.Add(waited), TimedOut)
	next := offer(t, r2, got2, "next", t0.Add(waited))
	if next == nil {
		t.Fatal("the next request was not forwarded")
	}
	if want := FirstTokenFactor * (next.Decision.Estimate + waited - est); next.FirstTokenTimeout() != want {
		t.Errorf("after a forward cut at %v: the next deadline %v, want %d × (its estimate + what the cut one ran over) = %v",
			waited, next.FirstTokenTimeout(), FirstTokenFactor, want)
	}
}
