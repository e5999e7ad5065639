package sim

import (
	"strconv"
	"time"

	"skywalker/internal/apierr"
	"skywalker/internal/balancer"
	"skywalker/internal/digest"
	"skywalker/internal/engine"
	"skywalker/internal/policy"
	"skywalker/internal/prefix"
	"skywalker/internal/request"
)

// simRequest tracks one request through the simulation.
type simRequest struct {
	req         *request.Request
	ingress     int
	served      int
	forwardedTo int // region the ingress forwarded it to, or -1
	arrival     time.Duration
	dispatched  time.Duration
	firstToken  time.Duration // -1 until the first token
	forwarded   bool
	retries     int
}

// replica is one engine of a region.
type replica struct {
	name     string
	eng      *engine.Engine
	cfg      engine.Config
	target   prefix.Target
	healthy  bool
	down     int    // overlapping faults holding it down
	epoch    uint32 // incarnation; bumped by a crash
	inflight int
	// scraped is the replica's metrics as of the last scrape.
	scraped struct {
		waiting, running int
		kv               float64
	}
}

// summary is a region's load as published to its peers.
type summary struct {
	at          time.Duration
	queueWait   time.Duration
	queued      int
	replicas    int
	slots       int
	outstanding int
}

// peerState is what a region knows of one peer: the latest summary and
// digest that reached it.
type peerState struct {
	summary *summary
	digest  *digest.Digest
}

// region is one simulated region: replicas, a balancer, a prefix index and
// its digest, and its view of the peers. It is the balancer's Env.
type region struct {
	w        *world
	idx      int
	spec     RegionSpec
	bal      *balancer.Balancer
	index    *prefix.Index
	replicas []*replica
	service  *policy.EWMA
	prefill  policy.PrefillProfile
	maxIn    int
	peers    []peerState
	// forwarding counts requests this region has in flight at each peer;
	// peers' summaries are old, and what we sent since must count, or a
	// burst herds onto the one peer that looked idle (as the proxy does).
	forwarding []int

	digest       *digest.Digest // live: blocks added as the index learns them
	published    *digest.Digest // last snapshot sent to peers
	digestCap    uint
	digestAdds   uint
	digestDirty  bool
	digestGen    uint64
	expireAt     time.Duration // pending evExpire, or -1
	view         policy.View
	viewPeerIdx  []int // view.Peers[i] is region viewPeerIdx[i]
	matched      []int
	needPump     bool
	busy         time.Duration // engine busy time, for utilization
	preemptions  int64         // of engines lost to crashes
	servedLocal  int
	forwardedOut int
	received     int
}

func newRegion(w *world, idx int, spec RegionSpec) *region {
	r := &region{w: w, idx: idx, spec: spec, service: policy.NewEWMA(w.cfg.ServiceAlpha), prefill: spec.Profile.Prefill(),
		peers: make([]peerState, len(w.cfg.Regions)), forwarding: make([]int, len(w.cfg.Regions)), matched: make([]int, prefix.MaxTargets), expireAt: -1}
	pol, _ := policy.New(w.cfg.Policy, *w.cfg.PolicyConfig) // validated by Config
	r.bal = balancer.New(pol, w.cfg.Balancer)
	blockTokens := max(w.blockTokens, 1)
	r.index = prefix.New(blockTokens)
	for i := range spec.Replicas {
		cfg := engine.Config{Profile: spec.Profile, MaxNumSeqs: spec.MaxNumSeqs, KVBlocks: spec.KVBlocks}
		eng := engine.New(cfg)
		rp := &replica{name: spec.Name + "-" + strconv.Itoa(i), eng: eng, cfg: cfg, healthy: true}
		capTokens := eng.Config().KVBlocks * eng.Config().BlockSize
		rp.target, _ = r.index.AddTarget(rp.name, capTokens) // at most 64 replicas, checked by Config
		r.replicas = append(r.replicas, rp)
		r.digestCap += uint(capTokens / blockTokens)
		r.maxIn = w.cfg.MaxInFlight
		if r.maxIn <= 0 {
			r.maxIn = eng.Config().MaxNumSeqs
		}
	}
	// Stale blocks stay in the live digest until a rebuild, which happens
	// once as many blocks were added as the filter is sized for (about 1%
	// false positives then); size it at twice the cache so that is rare.
	r.digestCap *= 2
	r.digest = digest.New(spec.Name, "", 0, r.digestCap, 0.01)
	return r
}

func (r *region) now() time.Time { return r.w.clock(r.w.now) }

// View implements balancer.Env: the region's replicas as last scraped
// (in-flight counts exact), prefix matches from the index, and the peers
// as their last summaries and digests described them.
func (r *region) View(req *request.Request) *policy.View {
	v := &r.view
	v.Local.Name = r.spec.Name
	v.Local.Jurisdiction = r.spec.Jurisdiction
	v.Local.Prefill = r.prefill
	r.index.Match(req.Blocks, r.matched)
	v.Local.Replicas = v.Local.Replicas[:0]
	for _, rp := range r.replicas {
		v.Local.Replicas = append(v.Local.Replicas, policy.Replica{
			Name: rp.name, Healthy: rp.healthy, Waiting: rp.scraped.waiting, Running: rp.scraped.running,
			InFlight: rp.inflight, MaxInFlight: r.maxIn, KVUsage: rp.scraped.kv, PrefixBlocks: r.matched[rp.target],
		})
	}
	v.Local.PerRequestWait = policy.PerRequestWait(r.service.Value(), r.concurrency())
	v.Peers = v.Peers[:0]
	r.viewPeerIdx = r.viewPeerIdx[:0]
	for j := range r.peers {
		ps := &r.peers[j]
		if j == r.idx || ps.summary == nil {
			continue
		}
		s := ps.summary
		peer := r.w.regions[j]
		rtt := r.w.rtt[r.idx][j]
		p := policy.PeerRegion{
			Name: peer.spec.Name, Jurisdiction: peer.spec.Jurisdiction, Healthy: s.replicas > 0,
			DataAge: r.w.now - s.at, RTT: rtt, GateOpen: rtt <= r.w.gateRTT, QueueWait: s.queueWait, Queued: s.queued,
			Replicas: s.replicas, Slots: s.slots, Outstanding: s.outstanding + r.forwarding[j], Prefill: peer.prefill,
		}
		if !p.GateOpen {
			p.GateReason = "rtt above threshold"
		}
		if ps.digest != nil {
			p.MatchPrefix(req, ps.digest)
		}
		v.Peers = append(v.Peers, p)
		r.viewPeerIdx = append(r.viewPeerIdx, j)
	}
	return v
}

// Deliver implements balancer.Env.
func (r *region) Deliver(o balancer.Outcome) {
	sr := r.w.live[o.Request]
	if o.Err != nil {
		r.w.drop(sr, o.Err.Code)
		return
	}
	switch o.Decision.Action {
	case policy.Dispatch:
		r.dispatch(sr, o.Decision.Replica)
	case policy.Forward:
		r.forwardedOut++
		to := r.viewPeerIdx[o.Decision.Peer]
		r.forwarding[to]++
		sr.forwardedTo = to
		r.w.forward(sr, r.idx, to)
	}
}

func (r *region) dispatch(sr *simRequest, i int) {
	rp := r.replicas[i]
	req := sr.req
	seq := &engine.Sequence{ID: req.ID, PromptTokens: req.PromptTokens, MaxTokens: max(req.MaxTokens, 1), Units: req.Blocks,
		UnitTokens: req.BlockTokens, Arrival: r.now(), Data: sr}
	if err := rp.eng.Add(seq); err != nil {
		r.w.drop(sr, apierr.InvalidRequest)
		return
	}
	rp.inflight++
	sr.served = r.idx
	sr.dispatched = r.w.now
	if sr.ingress == r.idx {
		r.servedLocal++
	} else {
		r.received++
	}
	r.index.Insert(rp.target, req.Blocks, r.learnBlock)
	r.kick(i)
}

// learnBlock adds a block new to the region's index to the live digest.
func (r *region) learnBlock(h uint64) {
	r.digest.Add(h)
	r.digestAdds++
	r.digestDirty = true
}

// kick starts replica i's next engine step if it is idle and has work.
func (r *region) kick(i int) {
	rp := r.replicas[i]
	if !rp.healthy || rp.eng.Busy() {
		return
	}
	d, ok := rp.eng.BeginStep(r.now())
	if !ok {
		return
	}
	r.busy += d
	r.w.series.busy(r.idx, r.w.now, d)
	r.w.push(event{at: r.w.now + d, kind: evStepEnd, region: int32(r.idx), replica: int32(i), epoch: rp.epoch})
}

// stepEnd applies a finished engine step and starts the next.
func (r *region) stepEnd(i int, epoch uint32) {
	rp := r.replicas[i]
	if epoch != rp.epoch {
		return // the engine crashed during the step
	}
	rp.eng.EndStep(r.now(), sink{r: r, rp: rp})
	if r.needPump {
		r.needPump = false
		r.bal.PumpDepth(r.now(), r, 1)
		r.scheduleExpire()
	}
	r.kick(i)
}

// sink receives a replica's engine events.
type sink struct {
	r  *region
	rp *replica
}

func (k sink) FirstToken(s *engine.Sequence, _ time.Time) {
	s.Data.(*simRequest).firstToken = k.r.w.now
}

func (k sink) Token(*engine.Sequence, time.Time) {}

func (k sink) Finished(s *engine.Sequence, _ time.Time) {
	sr := s.Data.(*simRequest)
	k.rp.inflight--
	k.r.service.Observe(k.r.w.now - sr.dispatched)
	k.r.needPump = true
	k.r.w.finish(sr, s)
}

// scrape refreshes the replicas' metrics as the proxy's scraper would.
func (r *region) scrape() {
	for _, rp := range r.replicas {
		if !rp.healthy {
			rp.scraped.waiting, rp.scraped.running, rp.scraped.kv = 0, 0, 0
			continue
		}
		rp.scraped.waiting, rp.scraped.running, rp.scraped.kv = rp.eng.Waiting(), rp.eng.Running(), rp.eng.KVUsage()
	}
	r.bal.Pump(r.now(), r)
	r.scheduleExpire()
}

// concurrency is how many requests the region's healthy replicas serve at
// once, as last scraped (at least one per replica).
func (r *region) concurrency() int {
	n := 0
	for _, rp := range r.replicas {
		if rp.healthy {
			n += max(rp.scraped.running, 1)
		}
	}
	return n
}

// summarize is the region's load summary as of now.
func (r *region) summarize() *summary {
	s := &summary{at: r.w.now, queued: r.bal.Len(), outstanding: r.bal.Len()}
	local := policy.LocalRegion{Queued: r.bal.Len()}
	for _, rp := range r.replicas {
		s.outstanding += rp.inflight
		if rp.healthy {
			s.replicas++
			s.slots += r.maxIn
		}
		local.Replicas = append(local.Replicas, policy.Replica{Healthy: rp.healthy, Waiting: rp.scraped.waiting,
			Running: rp.scraped.running, InFlight: rp.inflight, MaxInFlight: r.maxIn, KVUsage: rp.scraped.kv})
	}
	local.PerRequestWait = policy.PerRequestWait(r.service.Value(), r.concurrency())
	s.queueWait = local.QueueWait()
	return s
}

// publishDigest returns the digest to send peers: a snapshot of the live
// one, rebuilt from the index when stale blocks have piled up.
func (r *region) publishDigest() *digest.Digest {
	if r.digestAdds > r.digestCap {
		r.digestGen++
		r.digest = digest.Build(r.index, r.spec.Name, "", r.digestGen, r.digestCap, 0.01)
		r.digestAdds = uint(r.index.Blocks())
		r.digestDirty = true
	}
	if r.digestDirty || r.published == nil {
		r.digestGen++
		r.published = r.digest.Clone()
		r.published.Generation = r.digestGen
		r.digestDirty = false
	}
	return r.published
}

// scheduleExpire makes sure an evExpire is queued for the balancer's
// earliest deadline.
func (r *region) scheduleExpire() {
	d, ok := r.bal.NextDeadline()
	if !ok {
		return
	}
	at := d.Sub(r.w.clock(0))
	if r.expireAt >= 0 && r.expireAt <= at {
		return
	}
	r.expireAt = at
	r.w.push(event{at: at, kind: evExpire, region: int32(r.idx)})
}

// crash takes replica i down: its engine and cache are lost; requests that
// had not produced a token are retried through the balancer (as the proxy
// retries before the first byte); streams already under way fail.
func (r *region) crash(i int) {
	rp := r.replicas[i]
	rp.down++
	if rp.down > 1 {
		return
	}
	rp.healthy = false
	rp.epoch++
	var lost []*simRequest
	rp.eng.ForEach(func(s *engine.Sequence) { lost = append(lost, s.Data.(*simRequest)) })
	r.preemptions += rp.eng.Stats().Preemptions
	rp.eng = engine.New(rp.cfg)
	rp.inflight = 0
	rp.scraped.waiting, rp.scraped.running, rp.scraped.kv = 0, 0, 0
	r.index.Forget(rp.target)
	for _, sr := range lost {
		if sr.firstToken >= 0 {
			r.w.drop(sr, apierr.Upstream)
			continue
		}
		sr.retries++
		r.bal.Submit(r.now(), sr.req, r)
	}
	r.scheduleExpire()
}

func (r *region) recover(i int) {
	rp := r.replicas[i]
	if rp.down == 0 {
		return
	}
	rp.down--
	if rp.down == 0 {
		rp.healthy = true
		r.bal.Pump(r.now(), r)
		r.scheduleExpire()
	}
}
