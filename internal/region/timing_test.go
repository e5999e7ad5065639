package region

import (
	"fmt"
	"testing"
	"time"

	"skywalker/internal/apierr"
	"skywalker/internal/request"
)

// longReq is a request of 40 blocks (5,120 tokens): 512 ms of prefill on
// the test region's profile (100 µs a token).
func longReq(id string, first uint64) *request.Request {
	blocks := make([]uint64, 40)
	for i := range blocks {
		blocks[i] = first + uint64(i)
	}
	return req(id, blocks...)
}

// serveAt submits q at at, gives its first token ttft later and ends it
// served; it returns the attempt.
func serveAt(t *testing.T, r *pool, got *[]*Attempt, q *request.Request, at time.Time, ttft time.Duration) *Attempt {
	t.Helper()
	r.Submit(at, q)
	a := last(t, got)
	if !a.Dispatched() || a.Request != q {
		t.Fatalf("%s: %+v, want it dispatched", q.ID, a)
	}
	a.FirstToken(at.Add(ttft))
	a.End(at.Add(ttft+time.Millisecond), Served)
	return a
}

// The first-token timeout is generous before anything is known, then
// follows what the replica has shown: FirstTokenFactor × the slowest of
// its recent first tokens relative to the profile × this attempt's
// expectation. An engine ten times slower than its profile is learned as
// such: the region's estimates (its view, its load summary) scale by it.
func TestTheFirstTokenTimeoutAndTheSpeedAreLearned(t *testing.T) {
	r, got := newTestRegion(t, 1)
	if r.unmeasured() {
		t.Error("a region whose engine was not scraped yet is unmeasured")
	}
	r.Scraped(r.Replicas()[0], Metrics{})
	if !r.unmeasured() {
		t.Error("a region whose engine reports no metrics and has given no first token is not unmeasured")
	}
	r.Submit(t0, longReq("cold", 1000))
	if a := last(t, got); a.FirstTokenTimeout() != InitialFirstTokenTimeout {
		t.Fatalf("timeout before any first token %v, want %v", a.FirstTokenTimeout(), InitialFirstTokenTimeout)
	}
	last(t, got).End(t0, Released)
	at := t0
	for i := range 3 { // 512 ms expected, 5.12 s taken, nothing else running
		at = at.Add(10 * time.Second)
		serveAt(t, r, got, longReq(fmt.Sprint("warm", i), uint64(2000+100*i)), at, 5120*time.Millisecond)
	}
	if r.unmeasured() {
		t.Error("still unmeasured after three first tokens")
	}
	r.Submit(at.Add(10*time.Second), longReq("next", 9000))
	a := last(t, got)
	if want := time.Duration(FirstTokenFactor * 10 * float64(512*time.Millisecond)); a.FirstTokenTimeout() != want {
		t.Errorf("learned timeout %v, want %v (4 × ratio 10 × 512 ms)", a.FirstTokenTimeout(), want)
	}
	if got, want := r.View(probeReq()).Local.Prefill.PerToken, time.Millisecond; got != want {
		t.Errorf("the view's prefill per token %v, want %v: the engine is ten times slower than its profile", got, want)
	}
	if got := r.Load().Prefill.PerToken; got != time.Millisecond {
		t.Errorf("the load summary's prefill per token %v, want 1ms: peers must see the speed too", got)
	}

	// It times out, and the replica gave nobody a first token meanwhile:
	// it counts toward ejection (and says nothing of its speed). The only
	// replica is not tried again.
	sent := at.Add(10 * time.Second)
	next := a.End(sent.Add(a.FirstTokenTimeout()), TimedOut)
	if next.Retry || next.Err == nil || next.Err.Code != apierr.Unavailable {
		t.Errorf("a timeout at the region's only replica gave %+v, want the 503 at once", next)
	}
	if s := r.ReplicaStates()[0]; s.Failures != 1 {
		t.Errorf("failure streak %d after a timeout at a silent replica, want 1", s.Failures)
	}
}

// A timeout at a replica that gave someone else a first token while the
// request waited is a slow replica, not a hung one: it does not count
// toward ejection, but the replica's learned dispatch cap drops (it had
// two in flight: it was full).
func TestATimeoutAtASlowReplicaLowersItsCapAndDoesNotEjectIt(t *testing.T) {
	r, got := newTestRegion(t, 1)
	rp := r.Replicas()[0]
	for i := range 3 { // as fast as the profile says, one at a time
		serveAt(t, r, got, longReq(fmt.Sprint("warm", i), uint64(5000+100*i)), t0.Add(time.Duration(i)*time.Second), 512*time.Millisecond)
	}
	t1 := t0.Add(time.Minute)
	r.Submit(t1, longReq("a", 1000))
	first := last(t, got)
	r.Submit(t1, longReq("b", 2000))
	second := last(t, got)
	if cap := r.DispatchCap(rp); cap != 2 || rp.InFlight() != 2 {
		t.Fatalf("cap %d with %d in flight, want the learned start 2 with both dispatched", cap, rp.InFlight())
	}
	first.FirstToken(t1.Add(time.Second))
	first.End(t1.Add(2*time.Second), Served)
	waited := second.FirstTokenTimeout()
	next := second.End(t1.Add(waited), TimedOut)
	if next.Err == nil {
		t.Errorf("the timed-out request went back to the replica it timed out on: %+v", next)
	}
	if s := r.ReplicaStates()[0]; s.Failures != 0 || !s.Healthy {
		t.Errorf("replica %+v: a timeout while it answered others counted against it", s)
	}
	if cap := r.DispatchCap(rp); cap != 1 {
		t.Errorf("learned cap %d after a timeout with two in flight, want 1", cap)
	}
	// The wait was a sample: the next attempt there is waited for longer.
	r.Submit(t1.Add(time.Minute), longReq("c", 3000))
	if c := last(t, got); c.FirstTokenTimeout() <= waited {
		t.Errorf("timeout after a timeout %v, want longer than the %v waited", c.FirstTokenTimeout(), waited)
	}
}

// The timeout of an attempt still waiting follows what the region learns
// meanwhile: a replica's first attempts, sent before anything was known,
// wait InitialFirstTokenTimeout only until another replica's first tokens
// say how long is too long.
func TestAWaitingAttemptsTimeoutFollowsWhatTheRegionLearns(t *testing.T) {
	r, got := newTestRegion(t, 2)
	r.Submit(t0, longReq("a", 1000))
	a := last(t, got)
	r.Submit(t0, longReq("b", 2000))
	b := last(t, got)
	if a.Replica == b.Replica {
		t.Fatalf("both on %s, want one on each replica", a.Replica)
	}
	if a.FirstTokenTimeout() != InitialFirstTokenTimeout {
		t.Fatalf("timeout %v before anything is known, want %v", a.FirstTokenTimeout(), InitialFirstTokenTimeout)
	}
	b.FirstToken(t0.Add(600 * time.Millisecond))
	b.End(t0.Add(time.Second), Served)
	for i := range 2 {
		serveAt(t, r, got, longReq(fmt.Sprint("more", i), uint64(3000+100*i)), t0.Add(time.Duration(2+i)*time.Second), 600*time.Millisecond)
	}
	if d := a.FirstTokenTimeout(); d != MinFirstTokenTimeout {
		t.Errorf("the waiting attempt's timeout %v after three first tokens of about the profile's time, want %v", d, MinFirstTokenTimeout)
	}
}

// A request that timed out is retried on another replica, never on the
// one it timed out on.
func TestATimedOutRequestIsRetriedElsewhere(t *testing.T) {
	r, got := newTestRegion(t, 2)
	q := longReq("a", 1000)
	r.Submit(t0, q)
	a := last(t, got)
	next := a.End(t0.Add(a.FirstTokenTimeout()), TimedOut)
	b := last(t, got)
	if !next.Retry || b == a || !b.Dispatched() || b.Replica == a.Replica {
		t.Fatalf("after a timeout at %s: %+v, then %+v; want a retry at the other replica", a.Replica, next, b)
	}
}
