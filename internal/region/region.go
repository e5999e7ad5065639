package region

import (
	"errors"
	"time"

	"skywalker/internal/apierr"
	"skywalker/internal/balancer"
	"skywalker/internal/policy"
	"skywalker/internal/prefix"
	"skywalker/internal/request"
)

// Config is one region's routing configuration. Zero fields take the
// documented defaults (defaults.go).
type Config struct {
	Name         string // the region, e.g. "us-east"
	Jurisdiction string // for data residency, e.g. "us"
	// Node names this node in the digests it publishes (a region may run
	// several proxies).
	Node string
	// MaxInFlight caps every replica's requests in flight for dispatch
	// (selective pushing). Default DefaultMaxInFlight.
	MaxInFlight int
	// Prefill is the replicas' prefill-time profile, for TTFT estimates.
	Prefill policy.PrefillProfile
	// Hardware names the engines' hardware profile (profile.Profile.Name):
	// what a peer region running the same learned of its engines' speed is
	// borrowed until this region has measured its own (see pool.speed).
	// Empty: nothing is borrowed.
	Hardware string
	// DecodeStep is the replicas' time per output token of one request (an
	// engine iteration at a light batch). Until a request has ended here,
	// the queue wait is estimated from what the requests in flight were
	// expected to take (their prefill plus max_tokens decode steps; those
	// without max_tokens add nothing), so a region refuses what it cannot
	// start in time from its first request. Zero: no such prior (the wait
	// counts zero until a request ends).
	DecodeStep time.Duration
	// BlockTokens is how many tokens one prefix block covers. Default
	// request.DefaultBlockBytes / request.BytesPerToken.
	BlockTokens int
	// DefaultReplicaTokens is the KV cache assumed for a replica until its
	// metrics report one. Default DefaultReplicaTokens.
	DefaultReplicaTokens int
	// NoCacheTruth turns cache-truth feedback off: engines' reported
	// cached tokens are counted but do not correct the believed cache.
	NoCacheTruth bool
	// EjectAfter and ReadmitAfter are the passive health rule.
	EjectAfter, ReadmitAfter int
	// ServiceAlpha weighs a new service time in the queue-wait estimate.
	ServiceAlpha float64
	// Retries is how many times a request whose attempt failed before its
	// first token is routed again (Attempt.End); zero: never.
	Retries int
	// Balancer bounds the hold queue.
	Balancer balancer.Config
	// AdapterLoad is what loading a LoRA adapter into a replica's slot
	// costs a request whose adapter is not resident there (the proxy's
	// lora_load_time). Default DefaultAdapterLoad.
	AdapterLoad time.Duration
	// EventSettle is how long KV events wait before they are applied
	// while the region's nodes share their dispatches (siblings.go): a
	// bound on how late a node hears another's dispatch. Default
	// DefaultEventSettle.
	EventSettle time.Duration
	// OnDistrust, if set, is told when a peer region becomes distrusted
	// and why (see PeerProbation), for the driver's log. It is called
	// synchronously, by whoever holds the region.
	OnDistrust func(peer, reason string)
}

func (c Config) withDefaults() Config {
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.BlockTokens <= 0 {
		c.BlockTokens = request.DefaultBlockBytes / request.BytesPerToken
	}
	if c.DefaultReplicaTokens <= 0 {
		c.DefaultReplicaTokens = DefaultReplicaTokens
	}
	if c.EjectAfter <= 0 {
		c.EjectAfter = DefaultEjectAfter
	}
	if c.ReadmitAfter <= 0 {
		c.ReadmitAfter = DefaultReadmitAfter
	}
	if c.ServiceAlpha <= 0 {
		c.ServiceAlpha = DefaultServiceAlpha
	}
	if c.AdapterLoad <= 0 {
		c.AdapterLoad = DefaultAdapterLoad
	}
	if c.EventSettle <= 0 {
		c.EventSettle = DefaultEventSettle
	}
	return c
}

// pool is one model's routing state in a Node: its balancer (for which it
// is the Env), replicas, prefix index and estimators. Its exported
// methods are the Node's and the balancer's to call. Not safe for
// concurrent use.
type pool struct {
	cfg      Config
	bal      *balancer.Balancer
	index    *prefix.Index
	replicas []*replica
	service  *policy.EWMA
	// expectedSum and expectedCount total the expected service of the
	// requests in flight (see perRequestWait).
	expectedSum   time.Duration
	expectedCount int
	peers         []Peer
	// forwarding counts this node's requests in flight at each peer
	// region. A peer's summary is always a little old; adding what we sent
	// since keeps a burst from herding onto the one peer that looked idle.
	forwarding map[string]int
	// awaiting counts, of those, the ones whose first token has not come
	// back yet: the prefill a new forward would wait behind there (a
	// forward already streaming is only load).
	awaiting map[string]int
	view     policy.View
	loadReps []policy.Replica // Load's scratch
	matched  []int
	deliver  func(*Attempt)
	digests  *digestPublisher              // its own, or the one its Pools share
	bookings map[*request.Request]*booking // dispatched, not ended
	retries  map[*request.Request]retried  // routed again, not yet delivered
	bias     ratioEWMA                     // actual over estimated time to first token, of held requests
	// estimate is how every dispatch's first token compared with its
	// estimate (policy.LocalRegion.Error).
	estimate policy.EstimateError
	// hitCached and hitPrompt are exponentially decayed sums (weight
	// ServiceAlpha per dispatch) of the cached and the prompt tokens of
	// dispatched requests: their ratio is HitShare.
	hitCached, hitPrompt float64
	tenantBias           map[flow]*ratioEWMA // the same per flow (class, tenant)
	// firstTokens and idleSpeed are what the region learned of its
	// engines' speed from first tokens (timing.go).
	firstTokens firstTokenTimes
	idleSpeed   ratioEWMA
	idleSamples int // first tokens idleSpeed learned from
	// borrowedSpeed is what peers of the same hardware measured of their
	// engines' speed (borrowedSpeed), 0 if none has.
	borrowedSpeed float64
	speedKnownAt  time.Time // when it had enough to be used (see speed)
	trust         map[string]*peerTrust
	now           time.Time // the latest time a driver gave (peer trust is judged at it)
	siblings      siblings  // dispatches shared with the region's other nodes (siblings.go)
	sessions      sessions  // each session's last replica (sessions.go)
}

// newPool returns a region with no replicas that routes by pol and hands every
// attempt it delivers to deliver (called synchronously from Submit, Pump,
// Expire, Flush and an Attempt's End, after the bookkeeping).
func newPool(cfg Config, pol policy.Policy, deliver func(*Attempt)) (*pool, error) {
	if cfg.Name == "" {
		return nil, errors.New("region: a name is required")
	}
	if pol == nil || deliver == nil {
		return nil, errors.New("region: a policy and a delivery function are required")
	}
	cfg = cfg.withDefaults()
	r := &pool{cfg: cfg, bal: balancer.New(policy.Homing{Policy: pol}, cfg.Balancer), index: prefix.New(cfg.BlockTokens),
		service: policy.NewEWMA(cfg.ServiceAlpha), forwarding: map[string]int{}, awaiting: map[string]int{}, matched: make([]int, prefix.MaxTargets), deliver: deliver,
		bookings: map[*request.Request]*booking{}, retries: map[*request.Request]retried{}, tenantBias: map[flow]*ratioEWMA{},
		trust: map[string]*peerTrust{}}
	r.digests = &digestPublisher{sources: []*pool{r}}
	return r, nil
}

// Policy is the policy the region routes by.
func (r *pool) Policy() policy.Policy { return r.bal.Policy() }

// Submit routes a new request (see balancer.Balancer.Submit).
func (r *pool) Submit(now time.Time, req *request.Request) { r.at(now); r.bal.Submit(now, req, r) }

// Pump re-routes held requests after a state change.
func (r *pool) Pump(now time.Time) int {
	r.at(now)
	r.settleEvents(now)
	return r.bal.Pump(now, r)
}

// Expire rejects held requests past their deadline.
func (r *pool) Expire(now time.Time) int { r.at(now); return r.bal.Expire(now, r) }

// Flush answers every held request with e (see balancer.Balancer.Flush).
func (r *pool) Flush(now time.Time, e *apierr.Error) int { r.at(now); return r.bal.Flush(now, r, e) }

// at moves the region's clock to now (never back).
func (r *pool) at(now time.Time) {
	if now.After(r.now) {
		r.now = now
	}
}

// Cancel withdraws a held request whose client left; it reports whether
// the request was still held (else it was already delivered).
func (r *pool) Cancel(req *request.Request) bool {
	if !r.bal.Cancel(req) {
		return false
	}
	delete(r.retries, req)
	return true
}

// Queued is the number of held requests.
func (r *pool) Queued() int { return r.bal.Len() }

// NextDeadline is the earliest deadline of a held request.
func (r *pool) NextDeadline() (time.Time, bool) { return r.bal.NextDeadline() }

// HeldBy calls fn for every (class, tenant) with requests held, with
// their count, for metrics.
func (r *pool) HeldBy(fn func(class request.Class, tenant string, n int)) { r.bal.HeldBy(fn) }

// Held lists the held requests, for debugging endpoints.
func (r *pool) Held(now time.Time) []balancer.HeldRequest { return r.bal.Held(now) }

// SetPeers replaces what the region knows of its peers (the mesh's
// snapshot, or the simulator's). Peers are in the order policies see them.
func (r *pool) SetPeers(peers []Peer) {
	r.peers = peers
	r.borrowedSpeed = borrowedSpeed(r.cfg.Hardware, peers)
}

// forwardingTo is how many of this node's requests are in flight at peer.
func (r *pool) forwardingTo(peer string) int { return r.forwarding[peer] }

// forwardDone records the end of a request forwarded to peer.
func (r *pool) forwardDone(peer string) { decrement(r.forwarding, peer) }

// decrement takes one off m[key], never below zero, forgetting the key at
// zero.
func decrement(m map[string]int, key string) {
	if n := m[key]; n > 1 {
		m[key] = n - 1
	} else {
		delete(m, key)
	}
}

// concurrency is how many requests the healthy replicas serve at once: per
// replica the larger of what its engine last reported running and what
// this node has in flight there (fresher than any scrape), at least one.
func (r *pool) concurrency() int {
	n := 0
	for _, rp := range r.replicas {
		if rp.healthy {
			n += max(rp.metrics.Running, rp.inFlight, 1)
		}
	}
	return n
}

// perRequestWait is the queue-wait step Q grows by per request ahead:
// from the service times learned, or, before any request has ended, from
// the mean expected service of the requests in flight that set max_tokens.
func (r *pool) perRequestWait() time.Duration {
	service := r.service.Value()
	if !r.service.Seen() && r.expectedCount > 0 {
		service = r.expectedSum / time.Duration(r.expectedCount)
	}
	return policy.PerRequestWait(service, r.concurrency())
}

// expectedService is what a request dispatched with uncached prompt
// tokens is expected to occupy its slot: its prefill and, with the
// profile's decode step, its max_tokens. Zero for a request that sets no
// max_tokens (its length is unknown: it adds nothing to the prior) or
// without a decode step.
func (r *pool) expectedService(req *request.Request, uncached int) time.Duration {
	if req.MaxTokens <= 0 || r.cfg.DecodeStep <= 0 {
		return 0
	}
	return r.prefill().Time(uncached) + time.Duration(float64(req.MaxTokens)*r.speed()*float64(r.cfg.DecodeStep))
}

// View implements balancer.Env: the replicas as last scraped, with this
// node's exact in-flight counts and the request's prefix match from the
// index; the peers as last heard, with this node's forwards in flight added
// to their load and the request's prefix match from their digests.
func (r *pool) View(req *request.Request) *policy.View {
	v := &r.view
	v.Local.Name, v.Local.Jurisdiction, v.Local.Prefill = r.cfg.Name, r.cfg.Jurisdiction, r.prefill()
	v.Local.Queued, v.Local.Held = 0, 0
	r.index.Match(req.Blocks, r.matched)
	v.Local.Replicas = v.Local.Replicas[:0]
	for _, rp := range r.replicas {
		pr := r.policyReplica(rp, r.matched[rp.target])
		if req.Adapter != "" {
			pr.AdapterResident, pr.AdapterBlocked = rp.adapterResident(req.Adapter), rp.adapterBlocked(req.Adapter)
		}
		v.Local.Replicas = append(v.Local.Replicas, pr)
	}
	if req.Affinity != "" {
		r.creditSession(req.Affinity, v.Local.Replicas)
	}
	if again, ok := r.retries[req]; ok {
		avoid(v.Local.Replicas, r.replicas, again.failedOn)
	}
	v.Local.PerRequestWait = r.perRequestWait()
	v.Local.TTFTBias = r.ttftBias(req)
	v.Local.HitShare = r.hitShare()
	v.Local.Unmeasured = r.unmeasured()
	v.Local.Error = r.estimate.Summary()
	v.Local.AdapterLoad = 0
	if req.Adapter != "" {
		v.Local.AdapterLoad = r.cfg.AdapterLoad
	}
	v.Peers = v.Peers[:0]
	for i := range r.peers {
		p := &r.peers[i]
		pr := p.view()
		r.judgeSpeed(&pr, p.Load)
		pr.InFlightFromUs, pr.AwaitingFromUs = r.forwarding[p.Region], r.awaiting[p.Region]
		pr.Outstanding += pr.InFlightFromUs
		if t := r.trust[p.Region]; t != nil {
			pr.Error = t.estimate.Summary()
		}
		if p.Digest != nil {
			pr.MatchPrefix(req, p.Digest)
		}
		if why := r.peerGate(p.Region); why != "" {
			pr.GateOpen, pr.GateReason = false, why
		}
		v.Peers = append(v.Peers, pr)
	}
	return v
}

// hitShare is the smoothed share of the prompt tokens dispatched in the
// region that its replicas were believed to hold cached (the prefix index,
// corrected by cache truth), 0 before any dispatch: how likely a cached
// token is to be asked for again, which prices what a cold prompt evicts.
func (r *pool) hitShare() float64 {
	if r.hitPrompt <= 0 {
		return 0
	}
	return r.hitCached / r.hitPrompt
}

func (r *pool) policyReplica(rp *replica, prefixBlocks int) policy.Replica {
	m := rp.metrics
	// The engine's running count as last scraped, less what this node has
	// seen end since: a scrape a few milliseconds old still counts a
	// request that has finished, and would make the replica look busy.
	running := max(m.Running-rp.endedSinceScrape, 0)
	return policy.Replica{Name: rp.name, Healthy: rp.healthy, Waiting: m.Waiting, Running: running, InFlight: rp.inFlight,
		MaxInFlight: r.dispatchCap(rp), Capacity: r.effectiveCap(rp), KVUsage: r.projectedKVUsage(rp), CacheTokens: r.believedTokens(rp), PrefixBlocks: prefixBlocks, IndexedBlocks: r.index.TargetLen(rp.target), QueuedTokens: rp.inFlightTokens,
		PrefillTokens: rp.prefillTokens, Jurisdiction: rp.jurisdiction, RTT: rp.rtt}
}

// projectedKVUsage is the replica's KV-cache usage as last scraped plus
// what the requests dispatched since will take: between two scrapes a
// burst must not pile into a cache that only looked free.
func (r *pool) projectedKVUsage(rp *replica) float64 {
	m := rp.metrics
	if m.KVBlocks <= 0 || m.BlockSize <= 0 {
		return m.KVUsage
	}
	return min(m.KVUsage+float64(rp.sinceScrape)/float64(m.KVBlocks*m.BlockSize), 1)
}

// OutputReserve is the KV-cache tokens a dispatched request is assumed to
// grow by while it decodes, when it sets no max_tokens or a larger one.
const OutputReserve = 256

// book takes a slot on rp for the dispatched o: in flight, its prompt and
// prefill queued there, the KV cache it will take, what it is expected to
// occupy (the prior of perRequestWait), the hit share, and the prefix
// index (and so the next digest) taught that rp now holds the prompt.
func (r *pool) book(o balancer.Outcome, rp *replica, prefixBlocks int) {
	req := o.Request
	uncached := req.PromptTokens - req.CachedTokens(prefixBlocks)
	out := OutputReserve
	if req.MaxTokens > 0 {
		out = min(req.MaxTokens, OutputReserve)
	}
	a := r.cfg.ServiceAlpha
	r.hitCached = (1-a)*r.hitCached + a*float64(req.PromptTokens-uncached)
	r.hitPrompt = (1-a)*r.hitPrompt + a*float64(req.PromptTokens)
	alone := rp.inFlight == 0 && rp.metrics.Running-rp.endedSinceScrape <= 0 && rp.metrics.Waiting == 0
	rp.inFlight++
	rp.inFlightTokens += req.PromptTokens
	rp.prefillTokens += uncached
	rp.sinceScrape += uncached + out
	rp.dispatchedTokens += uncached + out
	b := &booking{rp: rp, prompt: req.PromptTokens, uncached: uncached, prefilling: true,
		submitted: o.Submitted, estimate: o.Admitted, held: o.Waited > 0, inflight: rp.inFlight,
		expected: r.expectedService(req, uncached), ttftExpected: r.expectedFirstToken(rp.prefillTokens), alone: alone, adapter: req.Adapter}
	rp.adapterDispatched(req.Adapter)
	if b.expected > 0 {
		r.expectedSum += b.expected
		r.expectedCount++
	}
	if !o.Submitted.IsZero() {
		b.sent = o.Submitted.Add(o.Waited)
	}
	sent := b.sent
	if sent.IsZero() {
		sent = r.now
	}
	if req.Affinity != "" {
		r.sessions.put(req.Affinity, rp.name)
	}
	b.chain = r.cacheSent(rp, req.Blocks, req.BlockTokens, prefixBlocks, sent, "", 0)
	b.shared = r.siblings.sent(rp, req.Blocks, req.BlockTokens, prefixBlocks, sent)
	if b.chain != nil {
		b.chain.id = b.shared
	}
	r.bookings[req] = b
	r.index.Insert(rp.target, req.Blocks, r.digests.learn)
}
