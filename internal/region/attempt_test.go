package region

import (
	"fmt"
	"skywalker/internal/request"
	"testing"
	"time"

	"skywalker/internal/apierr"
	"skywalker/internal/policy"
)

// last is the newest attempt delivered.
func last(t *testing.T, got *[]*Attempt) *Attempt {
	t.Helper()
	if len(*got) == 0 {
		t.Fatal("nothing was delivered")
	}
	return (*got)[len(*got)-1]
}

// A dispatch that fails before its first token is routed again until the
// region's Retries are spent; each failure counts against the replica;
// then the client is told nobody could serve it.
func TestAFailedAttemptIsRetriedWithinTheBound(t *testing.T) {
	r, got := newTestRegion(t, 3)
	r.Submit(t0, req("a", 1, 2))
	for n := 1; n <= 3; n++ {
		a := last(t, got)
		if !a.Dispatched() || a.Number != n {
			t.Fatalf("attempt %d: %+v, want a dispatch numbered %d", n, a, n)
		}
		next := a.End(t0.Add(time.Duration(n)*time.Second), ReplicaFailed)
		if wantRetry := n <= 2; next.Retry != wantRetry || (next.Err != nil) == wantRetry {
			t.Fatalf("attempt %d ended failed: %+v, want retry %v (else an error)", n, next, wantRetry)
		}
		inFlight := 0
		for _, rp := range r.Replicas() {
			inFlight += rp.InFlight()
		}
		if want := min(3-n, 1); inFlight != want {
			t.Errorf("after attempt %d: %d in flight, want %d (only the retry)", n, inFlight, want)
		}
	}
	if next := last(t, got).End(t0, ReplicaFailed); next.Retry || next.Err != nil {
		t.Errorf("a second End did something: %+v", next)
	}
	if len(*got) != 3 {
		t.Errorf("%d attempts delivered, want 3 (one and two retries)", len(*got))
	}
}

// The last attempt's failure gives the exhausted error; a rejection has
// nothing to end.
func TestTheLastFailureTellsTheClient(t *testing.T) {
	r, got := newTestRegion(t, 1)
	r.cfg.Retries = 0
	r.Submit(t0, req("a", 1))
	next := last(t, got).End(t0, ReplicaFailed)
	if next.Retry || next.Err == nil || next.Err.Code != apierr.Upstream || next.Err.RetryAfter <= 0 {
		t.Fatalf("got %+v, want the upstream error with a Retry-After", next)
	}
	rej := &Attempt{r: r}
	rej.Err = &apierr.Error{Code: apierr.QueueFull}
	if n := rej.End(t0, ReplicaFailed); n != (Next{}) {
		t.Errorf("ending a rejection gave %+v", n)
	}
}

// A forward that fails is routed again with the serve-here mark: it is
// held here (the local replica is busy), not forwarded again, and when
// it is dispatched its reason is the local rule's, not forwarded-in.
func TestAFailedForwardIsServedHere(t *testing.T) {
	r, got := newTestRegion(t, 1)
	rp := r.Replicas()[0]
	r.Scraped(rp, Metrics{Known: true, Waiting: 5, Running: 4}) // busy: a forward wins
	r.SetPeers([]Peer{{Region: "eu-west", Jurisdiction: "eu", Healthy: true, GateOpen: true, RTT: 70 * time.Millisecond,
		Load: Load{Replicas: 4, Slots: 256, Outstanding: 10}}})
	rq := req("a", 1)
	r.Submit(t0, rq)
	fwd := last(t, got)
	if !fwd.Forwarded() || r.forwardingTo("eu-west") != 1 {
		t.Fatalf("got %+v, want a forward to eu-west", fwd)
	}
	if next := fwd.End(t0.Add(time.Second), ReplicaFailed); !next.Retry {
		t.Fatalf("failed forward: %+v, want a retry", next)
	}
	if r.forwardingTo("eu-west") != 0 || !rq.ServeHere || rq.Forwarded {
		t.Fatalf("after the failed forward: forwarding %d, serve-here %v, forwarded %v; want 0, true, false",
			r.forwardingTo("eu-west"), rq.ServeHere, rq.Forwarded)
	}
	if len(*got) != 1 || r.Queued() != 1 {
		t.Fatalf("%d attempts, %d held: want the retry held here, not forwarded again", len(*got), r.Queued())
	}
	r.Scraped(rp, Metrics{Known: true})
	r.Pump(t0.Add(2 * time.Second))
	a := last(t, got)
	if !a.Dispatched() || a.Number != 2 || a.Decision.Reason == policy.ReasonForwarded {
		t.Errorf("the retry: %+v (reason %s), want dispatched here as attempt 2 with the local rule's reason", a, a.Decision.Reason)
	}
}

// End frees the slot and pumps the queue into it; a request whose stream
// broke midway is not retried by End (the client is told) but is by
// Continue; a held retry withdrawn by Cancel starts again from one.
func TestEndPumpsAndMidStreamBreaks(t *testing.T) {
	r, got := newTestRegion(t, 1)
	r.cfg.MaxInFlight = 1
	first := req("a", 1)
	r.Submit(t0, first)
	r.Submit(t0, req("b", 2))
	if len(*got) != 1 || r.Queued() != 1 {
		t.Fatalf("%d delivered, %d held: want a dispatched and b held behind it", len(*got), r.Queued())
	}
	a := last(t, got)
	a.FirstToken(t0.Add(100 * time.Millisecond))
	if next := a.End(t0.Add(time.Second), BrokeMidStream); next.Retry || next.Err == nil {
		t.Fatalf("a broke midway: %+v, want the client told, no retry", next)
	}
	if len(*got) != 2 || r.Queued() != 0 || last(t, got).Request.ID != "b" {
		t.Fatalf("after a ended: %d delivered, %d held; want b dispatched into the freed slot", len(*got), r.Queued())
	}
	b := last(t, got)
	b.FirstToken(t0.Add(1100 * time.Millisecond))
	if next := b.Continue(t0.Add(2 * time.Second)); !next.Retry {
		t.Fatalf("continuing b: %+v, want it routed again", next)
	}
	if c := last(t, got); c.Request.ID != "b" || c.Number != 2 {
		t.Fatalf("after Continue: %+v, want b's second attempt", c)
	}
	// b's second attempt holds the slot; fail it and withdraw its retry.
	// (b asked to wait: with its only replica ejected and no peer, it
	// would otherwise be answered 503 at once.)
	b.Request.Wait = true
	r.Submit(t0.Add(3*time.Second), req("c", 3))
	if next := last(t, got).End(t0.Add(4*time.Second), ReplicaFailed); !next.Retry {
		t.Fatalf("b's second attempt failing: %+v, want a retry", next)
	}
	// (three failures in a row have ejected the replica: both are held)
	if _, ok := r.retries[b.Request]; !ok || !r.Cancel(b.Request) {
		t.Fatalf("b's retry should be held (held %d) and cancellable", r.Queued())
	}
	if _, ok := r.retries[b.Request]; ok {
		t.Error("a cancelled retry is still counted")
	}
}

// A retry goes to another replica than the one that failed it, though
// prefix affinity prefers that one (it holds the prompt) and one failure
// has not ejected it; with no other healthy replica it may go back.
func TestARetryAvoidsTheReplicaThatFailedIt(t *testing.T) {
	r, got := newTestRegion(t, 2)
	warm := req("warm", 1, 2, 3, 4)
	r.Submit(t0, warm)
	home := last(t, got).rp
	last(t, got).End(t0.Add(time.Second), Served)

	again := req("again", 1, 2, 3, 4)
	r.Submit(t0.Add(2*time.Second), again)
	if a := last(t, got); a.rp != home {
		t.Fatalf("the second request went to %s, want %s, which holds its prompt", a.Replica, home.Name())
	}
	if next := last(t, got).End(t0.Add(3*time.Second), ReplicaFailed); !next.Retry {
		t.Fatalf("the failure: %+v, want a retry", next)
	}
	if !home.Healthy() {
		t.Fatal("one failure ejected the replica; the test needs it still in service")
	}
	if a := last(t, got); a.Number != 2 || a.rp == home {
		t.Fatalf("the retry (attempt %d) went to %s, the replica that just failed it", a.Number, a.Replica)
	}
	// Alone, a replica gets the retry of what it failed.
	solo, soloGot := newTestRegion(t, 1)
	solo.Submit(t0, req("a", 1))
	last(t, soloGot).End(t0, ReplicaFailed)
	if a := last(t, soloGot); a.Number != 2 || !a.Dispatched() {
		t.Fatalf("a lone replica's retry: %+v, want it dispatched there again", a)
	}
}

// A replica re-admitted after an ejection is on probation: it takes one
// request at a time until it serves one, so a replica that still hangs
// draws one request into its timeout, not a burst.
func TestAReplicaOnProbationTakesOneRequestAtATime(t *testing.T) {
	r, got := newTestRegion(t, 1)
	rp := r.Replicas()[0]
	for range r.cfg.EjectAfter {
		r.HealthChecked(rp, false)
	}
	if rp.Healthy() {
		t.Fatal("failed health checks did not eject the replica")
	}
	for range r.cfg.ReadmitAfter {
		r.HealthChecked(rp, true)
	}
	if !rp.Healthy() || !rp.probation {
		t.Fatalf("healthy %v, probation %v: want re-admitted on probation", rp.Healthy(), rp.probation)
	}
	for i := range 4 {
		rq := req(fmt.Sprint("p", i), uint64(i+1))
		rq.Wait = true
		r.Submit(t0, rq)
	}
	if len(*got) != 1 || rp.InFlight() != 1 || r.Queued() != 3 {
		t.Fatalf("%d dispatched, %d in flight, %d held: want one on probation, the rest held", len(*got), rp.InFlight(), r.Queued())
	}
	last(t, got).End(t0.Add(time.Second), Served)
	if rp.probation || rp.InFlight() < 2 {
		t.Errorf("after serving one: probation %v, %d in flight; want probation over and the held requests dispatched at its full cap", rp.probation, rp.InFlight())
	}
}

// Answered is the one rule for what a target's status means, the same for
// both drivers: a replica's 4xx goes to the client, a peer's 4xx is its
// refusal (the forward failed: served here) unless the peer is the chain's
// home, a 5xx fails, and a home engine's 404 starts a chain over once,
// when it may.
func TestAnsweredDecidesWhatAStatusMeans(t *testing.T) {
	home := request.Home{Region: "us-east", Replica: "r0"}
	for _, tc := range []struct {
		name    string
		forward bool // to a peer region (else a local replica)
		chain   request.Home
		mayOver bool   // request.StartOver
		status  int    // negative: the peer's engine answered it
		want    string // pass, start-over, retry
	}{
		{"a replica's 200", false, request.Home{}, false, 200, "pass"},
		{"a replica's 400: the engine's word on the request", false, request.Home{}, false, 400, "pass"},
		{"a replica's 503", false, request.Home{}, false, 503, "retry"},
		{"a home engine's 404, may start over", false, home, true, 404, "start-over"},
		{"a home engine's 404, may not", false, home, false, 404, "pass"},
		{"a peer's 200", true, request.Home{}, false, 200, "pass"},
		{"a peer's 429: its refusal, served here", true, request.Home{}, false, 429, "retry"},
		{"a peer's 404: its model set", true, request.Home{}, false, 404, "retry"},
		{"a peer's engine's 404: the engine's word on the request", true, request.Home{}, false, -404, "pass"},
		{"a peer's engine's 503", true, request.Home{}, false, -503, "retry"},
		{"a peer's 502", true, request.Home{}, false, 502, "retry"},
		{"the chain's home region's 404", true, request.Home{Region: "eu-west", Replica: "x"}, false, 404, "pass"},
		{"the chain's home region's 503", true, request.Home{Region: "eu-west", Replica: "x"}, false, 503, "retry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, got := newTestRegion(t, 1)
			rq := req("a", 1)
			rq.Home, rq.StartOver = tc.chain, tc.mayOver
			if tc.forward {
				r.Scraped(r.Replicas()[0], Metrics{Known: true, Waiting: 5, Running: 4}) // busy: a forward wins
				r.SetPeers([]Peer{{Region: "eu-west", Jurisdiction: "eu", Healthy: true, GateOpen: true, RTT: 70 * time.Millisecond,
					Load: Load{Replicas: 4, Slots: 256, Outstanding: 10}}})
			}
			r.Submit(t0, rq)
			a := last(t, got)
			if a.Forwarded() != tc.forward {
				t.Fatalf("attempt %+v: forwarded %v, want %v", a, a.Forwarded(), tc.forward)
			}
			status, byEngine := tc.status, false
			if status < 0 { // the answer of the engine that served the forward
				status, byEngine = -status, true
			}
			next := a.Answered(t0.Add(time.Second), status, byEngine)
			var verdict string
			switch {
			case next.StartOver:
				verdict = "start-over"
			case next.Retry || next.Err != nil:
				verdict = "retry"
			case next == (Next{}):
				verdict = "pass"
			}
			if verdict != tc.want {
				t.Fatalf("status %d: %+v (%s), want %s", tc.status, next, verdict, tc.want)
			}
			if verdict == "start-over" {
				if !rq.StartedOver {
					t.Error("a chain that started over is not marked so")
				}
				if again := a.Answered(t0.Add(2*time.Second), 404, true); again.StartOver {
					t.Error("a chain started over twice")
				}
			}
			if verdict == "retry" && tc.forward && !rq.ServeHere {
				t.Error("a failed forward is not served here")
			}
		})
	}
}
