package region

import (
	"fmt"
	"time"

	"skywalker/internal/prefix"
	"skywalker/internal/request"
)

// Metrics are what one scrape of a replica's engine reported (vLLM's or
// SGLang's metric names; see internal/proxy/scrape.go for the mapping).
type Metrics struct {
	// Known is true when the engine exposed queue metrics at all; without
	// them the replica is balanced on the requests in flight alone.
	Known            bool
	Waiting, Running int
	KVUsage          float64 // 0..1
	// KVBlocks and BlockSize come from vllm:cache_config_info: the KV
	// cache's size, which bounds the prefix index's entries for the
	// replica. Zero when not reported.
	KVBlocks, BlockSize int
	// MaxLoRAs and RunningAdapters come from vllm:lora_requests_info: the
	// engine's adapter slots (max_lora; 0 when not reported) and the
	// adapters of its running requests.
	MaxLoRAs        int
	RunningAdapters []string
}

// replica is one local inference server as the region sees it. Its fields
// change only through its pool's methods; drivers name it, and read it
// in Node.Snapshot.
type replica struct {
	name         string
	jurisdiction string        // "" for the region's own
	rtt          time.Duration // from the balancer; zero in its own region
	target       prefix.Target
	healthy      bool
	failures     int // consecutive failed requests or health checks
	passes       int // consecutive passed health checks while ejected
	// ejections since the replica last served a request, and whether it
	// was re-admitted without having served since: a replica that answers
	// /health but hangs on requests is ejected again at its first failure
	// and kept out longer each time.
	ejections      int
	probation      bool
	inFlight       int
	inFlightTokens int // prompt tokens of the requests in flight
	// prefillTokens is the uncached prompt tokens of the requests in
	// flight that have not produced their first token: the prefill work a
	// new request waits behind.
	prefillTokens int
	// footprint is the KV-cache tokens a running sequence holds on this
	// replica, smoothed over scrapes: what sets how many requests its
	// cache carries at once (effectiveCap).
	footprint float64
	// sinceScrape is the KV-cache tokens the requests dispatched since the
	// last scrape will take (uncached prompt plus an output reserve): the
	// scrape's KV usage does not count them yet.
	sinceScrape int
	// endedSinceScrape counts this node's requests on the replica that
	// ended after the last scrape began: the scrape's Running may still
	// count them.
	endedSinceScrape int
	// ended and dispatchedTokens are running totals, marked when a scrape
	// begins (ScrapeMark) so that what happened while it was in flight
	// still counts once it lands.
	ended, dispatchedTokens int
	metrics                 Metrics
	learned                 capLearner // dispatch cap, for engines without metrics
	// firstTokens are its recent first tokens' times against the
	// profile's, and lastFirstToken when it last gave one (timing.go).
	firstTokens    firstTokenTimes
	lastFirstToken time.Time
	scraped        bool // a scrape of its engine has landed
	adapters       adapterState
	engine         engineCache // what its KV events say (enginecache.go)
	cacheFactor    float64     // believed cache over reported (0 = 1), from cache truth
	truth          CacheTruth
}

// ReplicaSpec names a replica and, for one outside the balancer's region
// (a single global router's), where it is.
type ReplicaSpec struct {
	Name         string
	Jurisdiction string        // "" for the region's own
	RTT          time.Duration // round trip from the balancer
}

// Specs turns names of the region's own replicas into specs.
func Specs(names ...string) []ReplicaSpec {
	out := make([]ReplicaSpec, len(names))
	for i, n := range names {
		out[i] = ReplicaSpec{Name: n}
	}
	return out
}

// ReplicaState is a replica's bookkeeping as the core holds it: for the
// debug endpoint and the drivers' parity test.
type ReplicaState struct {
	Model                string // its pool's
	Name                 string
	Healthy, Probation   bool
	InFlight             int
	Failures, Ejections  int // the failure streak, and ejections since it last served
	PrefillTokens, Ended int
	Metrics              Metrics // its last scrape
	// IndexedBlocks is how many prefix blocks the index believes it holds;
	// CacheTokens, the KV cache it is believed to hold (the index,
	// corrected by cache truth); DispatchCap, its requests-in-flight cap.
	IndexedBlocks, CacheTokens, DispatchCap int
	Truth                                   CacheTruth
	CacheSource                             CacheSource
}

// ReplicaStates lists every replica's bookkeeping, in the region's order.
func (r *pool) ReplicaStates() []ReplicaState {
	out := make([]ReplicaState, len(r.replicas))
	for i, rp := range r.replicas {
		out[i] = ReplicaState{Name: rp.name, Healthy: rp.healthy, Probation: rp.probation, InFlight: rp.inFlight,
			Failures: rp.failures, Ejections: rp.ejections, PrefillTokens: rp.prefillTokens, Ended: rp.ended, Metrics: rp.metrics,
			IndexedBlocks: r.index.TargetLen(rp.target), CacheTokens: r.believedTokens(rp), DispatchCap: r.dispatchCap(rp),
			Truth: rp.truth, CacheSource: rp.engine.source}
	}
	return out
}

// SetReplicas makes the replica table exactly specs, in that order (which
// is the order policies see them in, and break ties by). Replicas that stay
// keep their state; those that leave are forgotten with their index
// entries. At most prefix.MaxTargets replicas are tracked; the error names
// those that were not.
func (r *pool) SetReplicas(specs []ReplicaSpec) error {
	wanted := make(map[string]bool, len(specs))
	for _, sp := range specs {
		wanted[sp.Name] = true
	}
	byName := make(map[string]*replica, len(r.replicas))
	for _, rp := range r.replicas {
		if wanted[rp.name] {
			byName[rp.name] = rp
			continue
		}
		r.index.RemoveTarget(rp.target) // leaving: free its index slot first
		r.digests.stale = true
	}
	next := make([]*replica, 0, len(specs))
	var dropped []string
	for _, sp := range specs {
		if rp, ok := byName[sp.Name]; ok {
			rp.jurisdiction, rp.rtt = sp.Jurisdiction, sp.RTT
			next = append(next, rp)
			delete(byName, sp.Name) // a name listed twice is tracked once
			continue
		}
		if slicesContains(next, sp.Name) {
			continue
		}
		t, err := r.index.AddTarget(sp.Name, r.cfg.DefaultReplicaTokens)
		if err != nil {
			dropped = append(dropped, sp.Name)
			continue
		}
		next = append(next, &replica{name: sp.Name, jurisdiction: sp.Jurisdiction, rtt: sp.RTT, target: t, healthy: true})
	}
	r.replicas = next
	if len(dropped) > 0 {
		return fmt.Errorf("region %s: at most %d replicas are routed to; not tracking %v", r.cfg.Name, prefix.MaxTargets, dropped)
	}
	return nil
}

func slicesContains(rs []*replica, name string) bool {
	for _, rp := range rs {
		if rp.name == name {
			return true
		}
	}
	return false
}

// Replica returns the replica named name, or nil.
func (r *pool) Replica(name string) *replica {
	for _, rp := range r.replicas {
		if rp.name == name {
			return rp
		}
	}
	return nil
}

// ScrapeMark is where a replica's counters stood when a scrape of its
// engine began.
type scrapeMark struct{ ended, dispatchedTokens int }

// MarkScrape is called as a scrape of rp's engine begins; the mark goes
// to ScrapedSince when it lands.
func (r *pool) MarkScrape(rp *replica) scrapeMark {
	return scrapeMark{ended: rp.ended, dispatchedTokens: rp.dispatchedTokens}
}

// ScrapedSince records one scrape of rp's engine that began at mark. The
// requests that ended and the tokens dispatched since the mark stay
// counted against the scrape (it may have been taken before they
// happened): a scrape that takes milliseconds on a busy machine must not
// make a replica look busy with a request that has already ended. A failed
// scrape passes the zero Metrics: the engine's queue is then unknown and
// the replica is balanced on its requests in flight. A reported KV-cache
// size resizes the replica's share of the prefix index.
func (r *pool) ScrapedSince(rp *replica, m Metrics, mark scrapeMark) {
	rp.metrics, rp.scraped = m, true
	for _, a := range m.RunningAdapters {
		rp.touchAdapter(a)
	}
	rp.sinceScrape = max(rp.dispatchedTokens-mark.dispatchedTokens, 0)
	rp.endedSinceScrape = max(rp.ended-mark.ended, 0)
	if m.Running > 0 && m.KVUsage > 0 && m.KVBlocks > 0 && m.BlockSize > 0 {
		per := m.KVUsage * float64(m.KVBlocks*m.BlockSize) / float64(m.Running)
		if rp.footprint == 0 {
			rp.footprint = per
		} else {
			rp.footprint += footprintAlpha * (per - rp.footprint)
		}
	}
	if m.KVBlocks > 0 && m.BlockSize > 0 {
		r.sizeIndex(rp)
	}
}

// footprintAlpha weighs a new scrape in a replica's footprint average.
const footprintAlpha = 0.05

// effectiveCap is how many requests rp can run at once: its KV cache over
// the tokens a running sequence holds there (kept at 90%, the headroom for
// sequences still growing), never more than the configured MaxInFlight. A
// replica whose engine reports no cache size, or that has not run anything
// yet, has the configured cap.
func (r *pool) effectiveCap(rp *replica) int {
	m := rp.metrics
	if rp.footprint <= 0 || m.KVBlocks <= 0 || m.BlockSize <= 0 {
		return r.dispatchCap(rp)
	}
	return min(r.dispatchCap(rp), max(1, int(0.9*float64(m.KVBlocks*m.BlockSize)/rp.footprint)))
}

// capacityTokens is the KV cache rp is believed to hold.
func (r *pool) capacityTokens(rp *replica) int {
	if m := rp.metrics; m.KVBlocks > 0 && m.BlockSize > 0 {
		return m.KVBlocks * m.BlockSize
	}
	return r.cfg.DefaultReplicaTokens
}

// booking is a dispatched request's claim on its replica, from Deliver to
// End.
type booking struct {
	rp         *replica
	prompt     int // prompt tokens
	uncached   int // prompt tokens the replica must prefill
	prefilling bool
	submitted  time.Time     // when the request reached the balancer
	estimate   time.Duration // the policy's TTFT estimate then
	held       bool          // it waited in the balancer
	sent       time.Time     // when it was dispatched
	inflight   int           // requests in flight at its replica then, itself included
	expected   time.Duration // the service it was expected to take (see pool.expectedService)
	// ttftExpected is what the profile expects of its first token (see
	// expectedFirstToken); alone, that nothing else ran on the replica
	// when it was sent.
	ttftExpected time.Duration
	alone        bool
	adapter      string // its LoRA adapter, "" for the base model
	chain        *chain // its prompt awaiting the engine's stores (enginecache.go)
	shared       uint64 // its number as told to the region's other nodes; 0: not told (siblings.go)
}

// firstToken records that a dispatched request produced its first token
// (the proxy: its first byte) at now: its prefill no longer delays
// others, and the time it took, against what was estimated when it was
// submitted, calibrates admission (TTFTBias).
func (r *pool) firstToken(now time.Time, req *request.Request) {
	b := r.bookings[req]
	if b == nil || !b.prefilling {
		return
	}
	if !b.sent.IsZero() {
		r.observeFirstToken(b.rp, b.inflight, now.Sub(b.sent), r.cfg.Prefill.Time(b.uncached))
		r.observeFirstTokenTime(b, now.Sub(b.sent), now)
	}
	// An estimate made before the region knew its engines' speed erred by
	// that, not by its queue model: it calibrates nothing.
	if b.estimate > 0 && !b.submitted.IsZero() && !b.submitted.Before(r.speedKnownAt) {
		r.estimate.Observe(now.Sub(b.submitted), b.estimate)
	}
	if b.held && b.estimate > 0 && !b.submitted.IsZero() && !b.submitted.Before(r.speedKnownAt) {
		actual, est := float64(now.Sub(b.submitted)), float64(b.estimate)
		r.bias.observe(actual, est)
		key := flowOf(req)
		t := r.tenantBias[key]
		if t == nil {
			if len(r.tenantBias) >= maxTenantBiases {
				clear(r.tenantBias) // forget them all rather than grow without bound
			}
			t = &ratioEWMA{}
			r.tenantBias[key] = t
		}
		t.observe(actual, est)
	}
	r.prefilled(b)
}

// prefilled takes a booking's prefill off its replica's queued prefill.
func (r *pool) prefilled(b *booking) {
	if !b.prefilling {
		return
	}
	b.prefilling = false
	b.rp.prefillTokens = max(b.rp.prefillTokens-b.uncached, 0)
}

// ttftBias is how much longer than estimated recent held requests of
// req's flow (its tenant in its priority class) took to their first
// token: the ratio of the smoothed actual times to the smoothed
// estimates (a ratio of means, so short estimates do not swamp it), kept
// within [0.5, 4]. It is the flow's own once it has samples — under fair
// queuing a tenant that floods the queue waits longer than its place on
// arrival said, one that does not waits less, and a critical request
// overtakes standard ones — else the region's, else 1.
func (r *pool) ttftBias(req *request.Request) float64 {
	if t := r.tenantBias[flowOf(req)]; t != nil {
		return t.ratio()
	}
	return r.bias.ratio()
}

// flow is a request's fair-queuing flow: its class and tenant.
type flow struct {
	class  request.Class
	tenant string
}

func flowOf(req *request.Request) flow { return flow{req.Class, req.Tenant} }

// maxTenantBiases bounds the tenants whose bias a region keeps.
const maxTenantBiases = 4096

func (e *ratioEWMA) ratio() float64 { return e.ratioWithin(0.5, 4) }

// ratioWithin is the smoothed ratio kept within [lo, hi]; 1 before any
// sample.
func (e *ratioEWMA) ratioWithin(lo, hi float64) float64 {
	if !e.seen || e.estimate <= 0 {
		return 1
	}
	return min(max(e.actual/e.estimate, lo), hi)
}

// ratioEWMA smooths the two sides of a ratio.
type ratioEWMA struct {
	actual, estimate float64
	seen             bool
}

// biasAlpha weighs a new first token in TTFTBias: about the last fifty.
const biasAlpha = 0.02

func (e *ratioEWMA) observe(actual, estimate float64) {
	if !e.seen {
		e.actual, e.estimate, e.seen = actual, estimate, true
		return
	}
	e.actual += biasAlpha * (actual - e.actual)
	e.estimate += biasAlpha * (estimate - e.estimate)
}

// end records the end of a dispatched request: its replica's slot frees,
// and how it went is booked (see Outcome; service is from dispatch to the
// last byte). A request not dispatched, or already ended, is ignored.
func (r *pool) end(req *request.Request, how Outcome, service time.Duration) {
	b := r.bookings[req]
	if b == nil {
		return
	}
	delete(r.bookings, req)
	if b.expected > 0 {
		r.expectedSum -= b.expected
		r.expectedCount--
	}
	r.prefilled(b)
	rp := b.rp
	rp.adapterEnded(b.adapter)
	r.cacheDone(rp, b.chain)
	r.siblings.ended(rp, b.shared)
	rp.inFlight = max(rp.inFlight-1, 0)
	rp.inFlightTokens = max(rp.inFlightTokens-b.prompt, 0)
	rp.endedSinceScrape++
	rp.ended++
	switch how {
	case Served:
		rp.failures, rp.ejections, rp.probation = 0, 0, false
		r.service.Observe(service)
	case TimedOut:
		if r.timedOut(b, service) {
			r.fail(rp)
		}
	case ReplicaFailed, BrokeMidStream:
		r.fail(rp)
	}
}

// HealthChecked records one health check of rp. A replica in service that
// fails EjectAfter checks (or requests) in a row is ejected; an ejected one
// is re-admitted after ReadmitAfter passes in a row, doubled for every
// ejection since it last served a request (at most 32×), and on
// probation: until it serves one, its first failure ejects it again.
func (r *pool) HealthChecked(rp *replica, ok bool) {
	switch {
	case ok && !rp.healthy:
		if rp.passes++; rp.passes >= r.cfg.ReadmitAfter<<min(max(rp.ejections-1, 0), 5) {
			rp.healthy, rp.failures, rp.passes, rp.probation = true, 0, 0, rp.ejections > 0
		}
	case ok:
		rp.failures = 0
	default:
		rp.passes = 0
		r.fail(rp)
	}
}

// fail counts one failure and ejects rp at the EjectAfter-th in a row. An
// ejected replica's index entries are forgotten: a replica that fails may
// have restarted with an empty cache.
func (r *pool) fail(rp *replica) {
	rp.failures++
	if (rp.failures >= r.cfg.EjectAfter || rp.probation) && rp.healthy {
		rp.healthy, rp.passes, rp.probation = false, 0, false
		rp.ejections++
		r.index.Forget(rp.target)
		r.digests.stale = true
	}
}
