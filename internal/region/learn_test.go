package region

import (
	"testing"
	"time"

	"skywalker/internal/balancer"
	"skywalker/internal/policy"
	"skywalker/internal/request"
)

// dispatchAt books req on replica 0 as sent at, with inflight requests
// on it.
func dispatchAt(r *pool, req *request.Request, at time.Time) {
	r.View(req)
	r.Deliver(balancer.Outcome{Request: req, Decision: policy.Decision{Action: policy.Dispatch, Replica: 0}, Submitted: at})
}

// TestACapIsLearnedForAnEngineWithoutMetrics: a replica whose engine
// exposes no queue metrics starts at a cap of 2; a request sent while
// another ran and whose first token came far later than its prefill (it
// queued inside the engine) brings the cap to 1; timely first tokens at
// the cap let it grow again, never past MaxInFlight. With metrics the
// configured cap applies.
func TestACapIsLearnedForAnEngineWithoutMetrics(t *testing.T) {
	r, _ := newTestRegion(t, 1)
	rp := r.Replicas()[0]
	if got := r.DispatchCap(rp); got != 2 {
		t.Fatalf("cap before any first token %d, want 2", got)
	}
	a, b := req("a", 1), req("b", 2)
	dispatchAt(r, a, t0)
	dispatchAt(r, b, t0) // sent with a in flight: 2
	r.firstToken(t0.Add(20*time.Millisecond), a)
	r.firstToken(t0.Add(3*time.Second), b) // waited for a inside the engine
	r.end(a, Served, time.Second)
	r.end(b, Served, 3*time.Second)
	if got := r.DispatchCap(rp); got != 1 {
		t.Fatalf("cap after a late first token at 2 in flight: %d, want 1", got)
	}
	for i := range 40 {
		x := req("x", uint64(100+i))
		dispatchAt(r, x, t0)
		r.firstToken(t0.Add(20*time.Millisecond), x)
		r.end(x, Served, time.Second)
	}
	if got := r.DispatchCap(rp); got < 2 || got > 4 {
		t.Errorf("cap after 40 timely requests alone: %d, want it grown (but ≤ MaxInFlight 4)", got)
	}
	r.Scraped(rp, Metrics{Known: true})
	if got := r.DispatchCap(rp); got != 4 {
		t.Errorf("cap once the engine exposes metrics: %d, want MaxInFlight 4", got)
	}
}

// TestCacheTruthShrinksAnOverbelievedCache: every prediction short by a
// block shrinks the index's share for the replica; predictions borne out
// grow it back, never past what is configured.
func TestCacheTruthShrinksAnOverbelievedCache(t *testing.T) {
	r, _ := newTestRegion(t, 1)
	rp := r.Replicas()[0]
	full := r.BelievedCacheTokens(rp)
	warm := req("warm", 1, 2, 3, 4)
	dispatchAt(r, warm, t0)
	r.end(warm, Served, time.Second)
	for i := range 5 {
		x := req("again", 1, 2, 3, 4) // the index predicts all 4 blocks
		x.ID = x.ID + string(rune('a'+i))
		dispatchAt(r, x, t0)
		r.cacheReported(x, 0) // the engine had none of it
		r.end(x, Served, time.Second)
	}
	tr := r.Truth(rp)
	if tr.PredictedHits != 5 || tr.Hits != 0 || tr.Short != 5 || tr.Predicted != 5*512 || tr.Actual != 0 {
		t.Errorf("truth %+v", tr)
	}
	shrunk := r.BelievedCacheTokens(rp)
	if shrunk >= full/2 {
		t.Errorf("believed cache %d after five misses, from %d: want it well below half", shrunk, full)
	}
	for i := range 200 {
		x := req("hit", 1, 2, 3, 4)
		x.ID = x.ID + string(rune('a'+i%26)) + string(rune('a'+i/26))
		dispatchAt(r, x, t0)
		r.cacheReported(x, 512)
		r.end(x, Served, time.Second)
	}
	if got := r.BelievedCacheTokens(rp); got <= shrunk || got > full {
		t.Errorf("believed cache %d after 200 hits, from %d (configured %d): want it grown back, never past", got, shrunk, full)
	}
}
