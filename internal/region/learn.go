package region

import (
	"time"

	"skywalker/internal/request"
)

// What a region learns about replicas whose engines do not tell it:
// how many requests one takes at once (from first-token times), and how
// much of a prompt it really held (from the cached-token counts engines
// put in their usage).

// Learning a dispatch cap. An engine without queue metrics (llama.cpp
// servers, most OpenAI-compatible fronts) gives selective pushing nothing
// to hold on: the configured MaxInFlight would let a one-slot engine queue
// dozens inside itself, where they can no longer go elsewhere. So the cap
// is learned, AIMD-style, from each request's time to first token against
// the prefill it needed: a first token much later than its prefill says
// the replica was already full when the request was sent (it queued
// inside), and the cap drops below the in-flight count it was sent at;
// a timely one at the cap lets the cap grow (by half while it has never
// been full, then by one per cap's worth of requests). It starts small.
const (
	learnedCapStart = 2
	// saturatedFactor and saturatedSlack: a first token later than
	// saturatedFactor × its prefill estimate + saturatedSlack means the
	// request waited inside the engine.
	saturatedFactor = 2.0
	saturatedSlack  = 150 * time.Millisecond
	capDecrease     = 0.75
)

// capLearner is one replica's learned dispatch cap.
type capLearner struct {
	limit float64 // 0 until first used
	full  bool    // it has been seen full at least once
}

// saturated lowers the cap below inflight, the requests the replica had
// when one of them showed it was full.
func (l *capLearner) saturated(inflight int) {
	if l.limit == 0 {
		l.limit = learnedCapStart
	}
	l.limit = max(1, min(l.limit, float64(inflight))*capDecrease)
	l.full = true
}

// learnsCap reports whether rp's dispatch cap is learned: its engine
// exposes no queue metrics.
func (r *pool) learnsCap(rp *replica) bool { return !rp.metrics.Known }

// dispatchCap is how many requests the balancer may have in flight at rp:
// the configured MaxInFlight, or for an engine without metrics the
// learned cap, never above MaxInFlight.
func (r *pool) dispatchCap(rp *replica) int {
	if rp.probation {
		return 1 // re-admitted, not yet proven: one request at a time (see HealthChecked)
	}
	if !r.learnsCap(rp) {
		return r.cfg.MaxInFlight
	}
	if rp.learned.limit == 0 {
		rp.learned.limit = learnedCapStart
	}
	return min(r.cfg.MaxInFlight, max(1, int(rp.learned.limit)))
}

// observeFirstToken adapts rp's learned cap from one request: sent with
// inflight requests on the replica (itself included), its first token
// came ttft after it was sent, for a prefill estimated at prefill.
func (r *pool) observeFirstToken(rp *replica, inflight int, ttft, prefill time.Duration) {
	if !r.learnsCap(rp) {
		return
	}
	l := &rp.learned
	if l.limit == 0 {
		l.limit = learnedCapStart
	}
	late := ttft > time.Duration(saturatedFactor*float64(prefill))+saturatedSlack
	switch {
	case late && inflight > 1:
		l.saturated(inflight)
	case !late && inflight >= int(l.limit):
		if l.full {
			l.limit += 1 / l.limit
		} else {
			l.limit *= 1.5
		}
		l.limit = min(l.limit, float64(r.cfg.MaxInFlight))
	}
}

// Cache truth. When the engine reports how many prompt tokens it had
// cached (usage.prompt_tokens_details.cached_tokens: vLLM with
// --enable-prompt-tokens-details, SGLang, llama.cpp servers), the region
// compares it with what its prefix index predicted for the replica it
// chose. The index is an LRU sized by the replica's believed cache; if
// that belief is larger than the engine's real cache, the index keeps
// prefixes the engine has evicted, and predicts hits that do not happen.
// Each prediction short by a block or more shrinks the replica's believed
// cache by cacheShrink (the index then evicts its oldest entries); each
// prediction borne out grows it back by cacheGrow, never past what the
// engine reports or the configuration says.
const (
	cacheShrink  = 0.8
	cacheGrow    = 1.01
	minCacheFrac = 0.02 // never below 2% of the believed size
)

// CacheTruth counts, for one replica, the prompt tokens the index
// predicted cached and the engine reported cached, over the requests
// whose engines reported it.
type CacheTruth struct {
	Predicted, Actual int64
	Requests          int64
	Short             int64 // predictions short by a block or more
	// PredictedHits is the requests routed as holding a cached prefix
	// (predicted > 0), and Hits those of them whose engine really held it
	// (to within a block): the prediction's precision.
	PredictedHits, Hits int64
	// Cached is the requests whose engine held a block or more of their
	// prompt, and Foreseen those of them the index predicted so: its
	// recall.
	Cached, Foreseen int64
}

// cacheReported records what the engine reported cached for a dispatched
// request (before its end). It adapts the replica's believed cache size.
func (r *pool) cacheReported(req *request.Request, cachedTokens int) {
	b := r.bookings[req]
	if b == nil || cachedTokens < 0 {
		return
	}
	rp := b.rp
	predicted := b.prompt - b.uncached
	rp.truth.Requests++
	rp.truth.Predicted += int64(predicted)
	rp.truth.Actual += int64(cachedTokens)
	if rp.cacheFactor == 0 {
		rp.cacheFactor = 1
	}
	block := max(req.BlockTokens, 1)
	short := cachedTokens+block <= predicted
	if predicted > 0 {
		rp.truth.PredictedHits++
		if !short {
			rp.truth.Hits++
		}
	}
	if cachedTokens >= block {
		rp.truth.Cached++
		if predicted >= block {
			rp.truth.Foreseen++
		}
	}
	if r.cfg.NoCacheTruth {
		return
	}
	if short {
		rp.truth.Short++
		rp.cacheFactor = max(rp.cacheFactor*cacheShrink, minCacheFrac)
	} else if predicted > 0 {
		rp.cacheFactor = min(rp.cacheFactor*cacheGrow, 1)
	}
	r.sizeIndex(rp)
}

// believedTokens is the cache the index sizes rp by: what its engine
// reports (or the configured default), times what cache truth taught.
func (r *pool) believedTokens(rp *replica) int {
	f := rp.cacheFactor
	if f == 0 {
		f = 1
	}
	return max(int(f*float64(r.capacityTokens(rp))), 1)
}
