package policy

import (
	"math"
	"time"

	"github.com/cespare/xxhash/v2"

	"skywalker/internal/request"
)

// SkywalkerConfig tunes the SkyWalker policy. DefaultSkywalkerConfig gives
// the documented defaults.
type SkywalkerConfig struct {
	// CongestionWeight is ω: how much estimated TTFT a region's load
	// (outstanding requests per dispatch slot) is worth, charged as
	// ω·load². The TTFT estimate sees queues but not the slowdown of a full
	// batch (every step of a 64-sequence batch is several times longer than
	// an idle one), nor that load data is stale, nor the requests other
	// balancers are about to send; the convex term charges for all three,
	// lightly while a region is quiet and steeply as it fills. Default 12 s
	// (so 0.48 s at load 0.2, 3 s at 0.5), chosen on the tuning set only
	// (diurnal-3region, 2 seeds, loads 1× and 1.25×; TestTune in
	// internal/eval): from 0.8 s to 6 s the fewest replicas meeting the
	// SLO fell from 18.5 to 16, and 12–48 s gave 15.5 with 12 s the lowest
	// p99 at 1×.
	CongestionWeight time.Duration
	// ReplicaWeight is the in-region counterpart of CongestionWeight:
	// estimated TTFT per unit of a replica's load (outstanding requests
	// over its dispatch cap), charged as ReplicaWeight·util²: among
	// replicas that save similar prefill the emptier one wins, and a hot
	// prefix does not pile onto one replica. Default 200 ms; on the tuning
	// set (diurnal-3region) 100, 200 and 400 ms were within seed noise of
	// each other (15.5–16 replicas).
	ReplicaWeight time.Duration
	// LoadMargin is how many requests more than the least-loaded replica
	// a replica may carry and still be chosen for its cached prefix (or a
	// quarter of the least load, if larger); it keeps a popular prefix from
	// piling every request onto one replica. Default 16.
	LoadMargin int
	// MinRemotePrefixTokens: a peer's cached prefix counts only if it is at
	// least this long; shorter matches are not worth a WAN hop and Bloom
	// false positives on short prefixes are noise. Default 2048.
	MinRemotePrefixTokens int
	// MaxWANRTT is a cap on reach (MAX_WAN_RTT_THRESHOLD_MS): peers with a
	// higher smoothed RTT are never chosen, gate or not; zero is no cap.
	// Default 1 s, the control plane's ceiling: within it, reach follows
	// each request's objective (a peer is eligible when its estimate, RTT
	// included, fits the request's TTFT objective with ErrorFraction to
	// spare), so a 2 s objective affords a 250 ms link and a tight one does
	// not. Operators lower it to cap reach by hand.
	MaxWANRTT time.Duration
	// MaxDataAge: a peer whose newest load data is older is unavailable,
	// not idle. Default 2 s.
	MaxDataAge time.Duration
	// PushMargin is how much better a peer's score must be than the local
	// one, at least; zero means strictly better. Default 0.
	PushMargin time.Duration
	// ErrorFraction is the TTFT estimate's relative error: a peer must
	// beat the local score by this share of it, so that two regions the
	// estimate cannot tell apart do not trade work back and forth. Default
	// 0.1; on the tuning set 0.05, 0.1 and 0.25 were within seed noise
	// (15.5–16.5 replicas). Reach and drain use it only until the region
	// has learned its estimates' real error (LocalRegion.Error,
	// PeerRegion.Error).
	ErrorFraction float64
	// ReferenceObjective is the TTFT objective CongestionWeight and
	// ReplicaWeight were chosen at (the tuning set's, 2 s). For a request
	// with an objective both scale with it — the weights are worth a share
	// of the objective, not an absolute time — so a fleet with a 600 ms
	// objective on fast GPUs balances as a 2 s fleet of L4s does. Zero
	// turns the scaling off.
	ReferenceObjective time.Duration
}

// DefaultSkywalkerConfig returns the documented defaults.
func DefaultSkywalkerConfig() SkywalkerConfig {
	return SkywalkerConfig{
		CongestionWeight:      12 * time.Second,
		ReplicaWeight:         200 * time.Millisecond,
		LoadMargin:            16,
		MinRemotePrefixTokens: 2048,
		MaxWANRTT:             time.Second,
		MaxDataAge:            2 * time.Second,
		ErrorFraction:         0.1,
		ReferenceObjective:    2 * time.Second,
	}
}

// Skywalker is the SkyWalker rule (DESIGN.md). For a request arriving in
// region k, the estimated time to first token if served by region j is
//
//	T(j) = RTT(k,j) + Q(j) + τ_prefill,j(uncached tokens of the request in j)
//
// and the policy picks argmin_j T(j) + ω·load²(j) + E(j), where a peer's
// load counts the requests it is itself sending away (a region offloading
// is short of capacity: its outflow is priced, not banned), and E(j) is
// the expected re-prefill of the cached prefixes the request's uncached
// tokens would evict in j (EvictionCost: a long cold prompt sent where
// the cache is full displaces documents others will ask for again). A peer is
// considered only if its WAN gate is open, its data is fresh, it is
// healthy, residency allows, and it is within reach: T(j) with the
// estimate's error to spare fits the request's TTFT objective (and its RTT
// is under the operator's cap, if one is set). It wins only by being
// strictly better than local (the selective-pushing inequality). A peer's
// cache counts only for a match of at least MinRemotePrefixTokens.
//
// A request forwarded in is placed by the same in-region rule as a local
// one (pickReplica) and never forwarded again; so is one whose forward
// failed (request.ServeHere), with the local rule's reason.
//
// Inside the region the request goes to the replica holding the longest
// prefix unless that replica's load exceeds the least-loaded one's by more
// than LoadMargin; if no replica has room, the request is held in the
// balancer's queue, where it is re-routed as state changes.
type Skywalker struct {
	cfg     SkywalkerConfig
	filter  peerFilter
	name    string
	forward bool
}

// NewSkywalker returns the policy with cfg.
func NewSkywalker(cfg SkywalkerConfig) *Skywalker {
	return &Skywalker{cfg: cfg, filter: peerFilter{maxDataAge: cfg.MaxDataAge, respectGate: true, maxRTT: cfg.MaxWANRTT},
		name: "skywalker", forward: true}
}

// NewGeoDNS returns the fair GeoDNS baseline, registered as "local": every
// request is served in the region its client reached (GeoDNS sent it
// there), by SkyWalker's own regional balancer — prefix affinity, TTFT
// estimates, the hold queue — that never forwards. A request whose
// residency excludes the region is rejected: GeoDNS has nowhere else to
// send it. Against it, SkyWalker's gain is exactly what forwarding buys.
func NewGeoDNS(cfg SkywalkerConfig) *Skywalker {
	s := NewSkywalker(cfg)
	s.name, s.forward = "local", false
	return s
}

// Name implements Policy.
func (s *Skywalker) Name() string { return s.name }

// Route implements Policy.
func (s *Skywalker) Route(req *request.Request, v *View) Decision {
	if req.StaysHere() {
		d := s.routeLocally(req, v)
		if d.Action == Dispatch && req.Forwarded {
			d.Reason = ReasonForwarded
		}
		return d
	}
	if !s.forward {
		return s.routeLocally(req, v)
	}
	local := &v.Local
	localOK := req.AllowedIn(local.Jurisdiction) && anyHealthy(local.Replicas)

	var localScore, localEstimate time.Duration
	replica := -1
	if localOK {
		var evicts time.Duration
		replica, localEstimate, evicts = s.pickReplica(req, local)
		localScore = localEstimate + s.congestion(v, local.Load()) + evicts
	}

	// The best peer by score; and the peer that would start the request
	// soonest (fastest, its estimate) and the soonest of those with a
	// dispatch slot free for this region's held work (drain): where a
	// request goes when it cannot wait here.
	bestPeer, fastest, drain := -1, -1, -1
	var peerScore, peerEstimate, fastestEstimate, drainEstimate time.Duration
	filter := s.filter.forRequest(req, v)
	for i := range v.Peers {
		p := &v.Peers[i]
		if !filter.eligible(req, p) {
			continue
		}
		cached := req.CachedTokens(p.PrefixBlocks)
		if cached < s.cfg.MinRemotePrefixTokens {
			cached = 0
		}
		// The prefill queued at its least busy replica, plus what we have
		// sent it that has not started streaming back (as if each were
		// this request, spread over its replicas).
		ahead := p.PrefillTokens + p.AwaitingFromUs*req.PromptTokens/max(p.Replicas, 1)
		estimate := p.RTT + p.QueueWait + p.Prefill.Time(req.PromptTokens-cached) + time.Duration(ahead)*p.Prefill.PerToken
		if !s.withinReach(v, localOK, p.Error, estimate) {
			continue
		}
		uncached := req.PromptTokens - cached
		score := estimate + s.congestion(v, p.loadWithOutflow()) + EvictionCost(uncached, p.FreeCacheTokens, p.HitShare, p.Prefill)
		if bestPeer < 0 || score < peerScore {
			bestPeer, peerScore, peerEstimate = i, score, estimate
		}
		if fastest < 0 || estimate < fastestEstimate {
			fastest, fastestEstimate = i, estimate
		}
		if hasRoomFor(v, i) && (drain < 0 || estimate < drainEstimate) {
			drain, drainEstimate = i, estimate
		}
	}

	switch {
	case !localOK && bestPeer >= 0:
		reason := ReasonResidency
		if req.AllowedIn(local.Jurisdiction) {
			reason = ReasonRemoteFaster // allowed here, but nothing healthy
		}
		return forward(v, bestPeer, reason, peerEstimate)
	case !localOK && !req.AllowedIn(local.Jurisdiction) && !anyPeerMayServe(req, v):
		return reject(v)
	case !localOK:
		return Decision{Action: Hold, Region: local.Name, Reason: ReasonNoReplica}
	case bestPeer >= 0 && peerScore+s.pushMargin(localScore) < localScore:
		return forward(v, bestPeer, ReasonRemoteFaster, peerEstimate)
	}
	d := dispatchIfRoom(local, replica, localEstimate)
	if d.Action == Hold && drain >= 0 && s.drains(v, localEstimate, v.Peers[drain].Error, drainEstimate) {
		return forward(v, drain, ReasonDrain, drainEstimate)
	}
	if fastest >= 0 {
		d.HasFallback, d.FallbackPeer, d.FallbackEstimate = true, fastest, fastestEstimate
	}
	return d
}

// drains reports whether a request held here, estimated to get its first
// token localEstimate from now, goes to a peer with a slot free for it,
// estimated at peerEstimate (erring as peerError says): work-conserving
// pooling — held work is a debt the mesh owes, and a peer that can start
// it sooner takes it. It goes when the peer's estimate, as late as it runs
// nine times in ten, still beats the local one, or when the local one, as
// late as it runs nine times in ten, misses what is left of the request's
// objective (the peer is within reach of that: see withinReach).
func (s *Skywalker) drains(v *View, localEstimate time.Duration, peerError ErrorSummary, peerEstimate time.Duration) bool {
	if peerError.Pessimistic(peerEstimate, s.cfg.ErrorFraction) < localEstimate {
		return true
	}
	left := remaining(&v.Local)
	return left > 0 && v.Local.Error.Pessimistic(localEstimate, s.cfg.ErrorFraction) > left
}

// remaining is what is left of the request's objective after its wait in
// the balancer so far; zero when it has no objective.
func remaining(l *LocalRegion) time.Duration {
	if l.Objective <= 0 {
		return 0
	}
	return max(l.Objective-l.Waited, 1)
}

// hasRoomFor reports whether peer i can start a request of this region's
// held work now: its summary says a replica had room and nobody was held
// (QueueWait zero), and this region has not already claimed its share of
// the dispatch slots the peer had free — the share of the regions that
// hold work and may send it there (this one's held requests among all the
// peers' and its own), so that several regions draining at once do not
// herd onto the first peer that frees up.
func hasRoomFor(v *View, i int) bool {
	p := &v.Peers[i]
	if p.QueueWait > 0 {
		return false
	}
	mine := p.AwaitingFromUs                 // claimed since its summary, about: our forwards not yet started there
	free := p.Slots - (p.Outstanding - mine) // what its summary left free, those aside
	if free <= 0 {
		return false
	}
	held, all := max(v.Local.Held, 1), max(v.Local.Held, 1)
	for j := range v.Peers {
		if j != i && v.Peers[j].Healthy {
			all += v.Peers[j].Queued
		}
	}
	share := int(math.Ceil(float64(free) * float64(held) / float64(all)))
	return mine < share
}

// dispatchIfRoom dispatches to the chosen local replica if it has room,
// else holds the request for it.
func dispatchIfRoom(local *LocalRegion, replica int, estimate time.Duration) Decision {
	if r := &local.Replicas[replica]; !r.HasRoom() || r.AdapterBlocked {
		return Decision{Action: Hold, Region: local.Name, Reason: ReasonBusy, Estimate: estimate}
	}
	reason := ReasonLeastLoad
	switch r := &local.Replicas[replica]; {
	case r.PrefixBlocks > 0:
		reason = ReasonPrefix
	case r.Session:
		reason = ReasonSession
	}
	return Decision{Action: Dispatch, Replica: replica, Region: local.Name, Reason: reason, Estimate: estimate}
}

// routeLocally is the rule without peers: the replica pickReplica chooses,
// dispatched if it has room, else held.
func (s *Skywalker) routeLocally(req *request.Request, v *View) Decision {
	local := &v.Local
	switch {
	case !req.AllowedIn(local.Jurisdiction):
		return reject(v)
	case !anyHealthy(local.Replicas):
		return Decision{Action: Hold, Region: local.Name, Reason: ReasonNoReplica}
	}
	replica, estimate, _ := s.pickReplica(req, local)
	return dispatchIfRoom(local, replica, estimate)
}

// pickReplica chooses the local replica with the lowest estimated time to
// first token (wait for a slot plus prefill of what it does not have
// cached) plus its congestion term, among healthy replicas whose load is
// within LoadMargin of the least loaded. A replica without room costs one
// slot's wait (a slot frees on it every PerRequestWait × healthy replicas;
// less while requests are held, see saturatedSlotWait), so a replica
// holding a long prefix is worth waiting for and a short one is not.
// Requests already queued ahead add their wait. A cold prompt is charged
// what it evicts there (EvictionCost), so it goes where the cache has room
// rather than over prefixes others will ask for again. A request of a LoRA
// adapter pays the adapter's load where it is not resident, and a replica
// whose every adapter slot serves other adapters' requests has no room
// for it. Ties go to the
// lesser load, then the lower index. It returns the replica, its estimated
// time to first token and the eviction cost of placing the request there.
func (s *Skywalker) pickReplica(req *request.Request, l *LocalRegion) (int, time.Duration, time.Duration) {
	healthy, room := 0, false
	for i := range l.Replicas {
		if r := &l.Replicas[i]; r.Healthy {
			healthy++
			room = room || r.HasRoom() && !r.AdapterBlocked
		}
	}
	slotWait := l.PerRequestWait * time.Duration(healthy)
	// The request's own wait for a replica without room: that replica's
	// next slot while others have room (waiting for it is a choice), one
	// slot anywhere once none has (it is then its turn that it waits for,
	// counted below by the requests ahead).
	ownWait := slotWait
	if !room {
		ownWait = l.PerRequestWait
	}
	// What waiting for a slot costs the region, for the choice; the
	// estimate keeps the request's own wait.
	slotCost := slotWait
	if l.Waited < slotWait {
		// Waiting for the replica that holds the prefix is free for the
		// region while saturated, but not for ever for the request:
		// once it has waited one slot's time it takes the next free one,
		// so those behind it in the queue do not overtake it for long.
		slotCost = saturatedSlotWait(slotWait, l.Held, healthy)
	}
	least := l.Replicas[leastLoaded(l.Replicas, false)].Load()
	limit := least + loadMargin(s.cfg.LoadMargin, least)
	// Its own prefill on r, behind the prefill already queued there.
	startsIn := func(r *Replica) (time.Duration, int) {
		uncached := req.PromptTokens - req.CachedTokens(r.Prefix())
		t := l.Prefill.Time(uncached) + time.Duration(r.PrefillTokens)*l.Prefill.PerToken
		if !r.AdapterResident {
			t += l.AdapterLoad // its LoRA adapter is loaded first (zero for the base model)
		}
		return t, uncached
	}
	// Waiting for a replica without room is a bet that its slot frees
	// in time. While a replica with room would meet what is left of the
	// request's objective, the bet is taken only if the wait fits in the
	// slack that replica leaves (its estimate as late as it runs half the
	// time, against what is left): a request is never held for a cached
	// prefix past the moment it could still have started cold.
	// Once the objective has passed (the balancer sheds the request unless
	// it leaves now) nothing is worth waiting for: a replica with room
	// serves it late rather than never.
	slack := time.Duration(-1) // no bound
	if left := remaining(l); left > 0 {
		passed := l.Waited >= l.Objective
		for i := range l.Replicas {
			if r := &l.Replicas[i]; r.Healthy && r.HasRoom() && !r.AdapterBlocked && r.Load() <= limit {
				t, _ := startsIn(r)
				if spare := left - l.Error.Central(t); passed || spare >= 0 && spare > slack {
					slack = max(spare, 0)
				}
			}
		}
	}
	best := -1
	var bestT, bestScore, bestEvicts time.Duration
	for i := range l.Replicas {
		r := &l.Replicas[i]
		if !r.Healthy || r.Load() > limit {
			continue
		}
		t, uncached := startsIn(r)
		evicts := EvictionCost(uncached, r.FreeCacheTokens(req.BlockTokens), l.HitShare, l.Prefill)
		score := t + s.replicaCongestion(l, r) + evicts
		if !r.HasRoom() || r.AdapterBlocked {
			if slack >= 0 && ownWait > slack {
				continue // its wait would cost the request the objective a replica with room still meets
			}
			t += ownWait
			score += slotCost
		}
		if best < 0 || score < bestScore || score == bestScore && s.breaksTie(req, r, &l.Replicas[best]) {
			best, bestT, bestScore, bestEvicts = i, t, score, evicts
		}
	}
	return best, bestT + time.Duration(l.Queued)*l.PerRequestWait, bestEvicts
}

// EvictionCost is what caching uncached new tokens on a target with
// free tokens of cache to spare costs others: the tokens beyond the free
// room evict cached ones, and each evicted token is asked for again with
// about the probability hitShare that any cached token is (the target's
// share of prompt tokens served from cache), when it must be prefilled
// again at the target's per-token rate. The expectation is linear: the
// fixed cost of a prefill step is not charged, since re-prefilled tokens
// ride in some later request's prefill. Zero when nothing is evicted or
// nothing is reused.
func EvictionCost(uncached, free int, hitShare float64, prefill PrefillProfile) time.Duration {
	evicted := uncached - max(free, 0)
	if evicted <= 0 || hitShare <= 0 {
		return 0
	}
	return time.Duration(float64(evicted) * min(hitShare, 1) * float64(prefill.PerToken))
}

// breaksTie reports whether r beats best, whose score it equals: the
// session's replica wins, then the lesser load, then the emptier cache, then — rendezvous hashing on
// the request's first block — the replica with the higher hash. So
// conversations nobody holds spread over the replicas even when they
// arrive one at a time (each then finds every replica idle, and an index
// order would send them all to the first, whose cache would hold them
// all).
func (s *Skywalker) breaksTie(req *request.Request, r, best *Replica) bool {
	if r.Session != best.Session {
		return r.Session
	}
	if r.Load() != best.Load() {
		return r.Load() < best.Load()
	}
	if r.IndexedBlocks != best.IndexedBlocks {
		return r.IndexedBlocks < best.IndexedBlocks
	}
	if len(req.Blocks) == 0 {
		return false
	}
	return rendezvous(req.Blocks[0], r.Name) > rendezvous(req.Blocks[0], best.Name)
}

// rendezvous is the highest-random-weight hash of a key and a target.
func rendezvous(key uint64, target string) uint64 {
	var d xxhash.Digest
	d.ResetWithSeed(key)
	_, _ = d.WriteString(target)
	return d.Sum64()
}

// saturatedSlotWait is what waiting for a replica without room costs the
// region, when a slot frees on that replica every slotWait and held
// requests are waiting in the balancer: the full slotWait while nobody is
// held (a free replica skipped now would idle), nothing once at least one
// request per healthy replica is held (every slot that frees is taken at
// once by somebody, so waiting for the replica that holds the prefix
// costs the region no capacity, and a cache miss taken instead costs it
// prefill). Without this, a saturated region hands every freed slot to
// the head of its queue whatever that replica holds, and its hit rate —
// its capacity — falls exactly when capacity is short: on the tuning set
// at 1.5× load, SLO attainment 89.8% → 94.7% and hits 56% → 58% with it
// (two seeds; 1× and 1.25× unchanged).
func saturatedSlotWait(slotWait time.Duration, held, healthy int) time.Duration {
	if healthy <= 0 || held <= 0 {
		return slotWait
	}
	return time.Duration(float64(slotWait) * (1 - min(1, float64(held)/float64(healthy))))
}

// replicaCongestion is the in-region congestion term: ReplicaWeight times
// the replica's outstanding requests over its dispatch cap. Among replicas
// that save similar prefill the emptier one wins, since its batch runs
// faster; and a hot prefix does not pile onto one replica until its KV
// cache thrashes.
func (s *Skywalker) replicaCongestion(l *LocalRegion, r *Replica) time.Duration {
	u := r.Utilization()
	return time.Duration(float64(s.cfg.ReplicaWeight) * s.weightScale(l) * u * u)
}

// weightScale is how the congestion weights scale for the request a view
// was built for: its objective over ReferenceObjective (1 without either).
func (s *Skywalker) weightScale(l *LocalRegion) float64 {
	if l.Objective <= 0 || s.cfg.ReferenceObjective <= 0 {
		return 1
	}
	return float64(l.Objective) / float64(s.cfg.ReferenceObjective)
}

// pushMargin is how much better a peer must be than the local choice, whose
// score is local: PushMargin, or the estimate's own error (ErrorFraction of
// it) if larger. Within its error an estimate cannot tell two regions
// apart, and sending work away on noise makes loaded regions trade it back
// and forth.
func (s *Skywalker) pushMargin(local time.Duration) time.Duration {
	return max(s.cfg.PushMargin, time.Duration(s.cfg.ErrorFraction*float64(local)))
}

// withinReach reports whether a peer whose estimated time to first token
// for req is estimate, erring as its learned error says, may serve it:
// the estimate, as late as it runs nine times in ten (before anything is
// learned: with ErrorFraction of itself to spare), fits what is left of
// the request's objective after its wait here. A request without an
// objective, or one the local region may not serve now (localOK false:
// its residency, or no healthy replica — slow beats never), is within
// reach of any peer the filter admits; so is one whose objective has
// passed (the balancer sheds it unless it leaves now: late beats never).
func (s *Skywalker) withinReach(v *View, localOK bool, peerError ErrorSummary, estimate time.Duration) bool {
	if v.Local.Objective <= 0 || !localOK || v.Local.Waited >= v.Local.Objective {
		return true
	}
	return peerError.Pessimistic(estimate, s.cfg.ErrorFraction) <= remaining(&v.Local)
}

// FitsObjective is the reach rule: a time to first token estimated at
// estimate (the RTT included), with errorFraction of itself to spare,
// fits objective. The router applies it to each request; the capacity
// plan to a typical one.
func FitsObjective(estimate, objective time.Duration, errorFraction float64) bool {
	return estimate+time.Duration(errorFraction*float64(estimate)) <= objective
}

func (s *Skywalker) congestion(v *View, load float64) time.Duration {
	return time.Duration(load * load * float64(s.cfg.CongestionWeight) * s.weightScale(&v.Local))
}

// anyPeerMayServe reports whether some peer in the view could ever serve
// req, however busy or unreachable now: only then is holding worthwhile.
func anyPeerMayServe(req *request.Request, v *View) bool {
	if req.StaysHere() {
		return false
	}
	for i := range v.Peers {
		if p := &v.Peers[i]; !p.Left && req.AllowedIn(p.Jurisdiction) {
			return true
		}
	}
	return false
}

var _ Policy = (*Skywalker)(nil)
