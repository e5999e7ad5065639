package policy

import (
	"time"

	"skywalker/internal/request"
)

// SkywalkerConfig tunes the SkyWalker policy. DefaultSkywalkerConfig gives
// the documented defaults.
type SkywalkerConfig struct {
	// CongestionWeight is ω: how much estimated TTFT one unit of a
	// region's load (outstanding requests per dispatch slot) is worth. The
	// TTFT estimate sees queues but not the slowdown of a full batch (every
	// step of a 96-sequence batch is several times longer than an idle
	// one, and prefill chunks queue behind each other inside "running"),
	// nor that load data is stale; ω charges for both. Default 800 ms,
	// chosen by sweeping 50 ms to 1.6 s on the diurnal-3region scenario:
	// TTFT p50 fell from 169 to 130 ms and p99 from 892 to 698 ms between 50
	// and 800 ms, and was flat beyond.
	CongestionWeight time.Duration
	// ReplicaWeight is the in-region counterpart of CongestionWeight:
	// estimated TTFT per unit of a replica's load (outstanding requests
	// over its dispatch cap). Default 200 ms, chosen by sweeping 100–800 ms
	// on the diurnal-3region scenario: 400 ms and above concentrate too
	// little and thrash KV caches; 100 ms balances too little.
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
	// MaxWANRTT is the WAN threshold (MAX_WAN_RTT_THRESHOLD_MS): peers with
	// a higher smoothed RTT are never chosen, gate or not. Default 120 ms.
	MaxWANRTT time.Duration
	// MaxDataAge: a peer whose newest load data is older is unavailable,
	// not idle. Default 2 s.
	MaxDataAge time.Duration
	// PushMargin is how much better a peer's score must be than the local
	// one; zero means strictly better. Default 0.
	PushMargin time.Duration
}

// DefaultSkywalkerConfig returns the documented defaults.
func DefaultSkywalkerConfig() SkywalkerConfig {
	return SkywalkerConfig{
		CongestionWeight:      800 * time.Millisecond,
		ReplicaWeight:         200 * time.Millisecond,
		LoadMargin:            16,
		MinRemotePrefixTokens: 2048,
		MaxWANRTT:             120 * time.Millisecond,
		MaxDataAge:            2 * time.Second,
	}
}

// Skywalker is the SkyWalker rule (DESIGN.md). For a request arriving in
// region k, the estimated time to first token if served by region j is
//
//	T(j) = RTT(k,j) + Q(j) + τ_prefill,j(uncached tokens of the request in j)
//
// and the policy picks argmin_j T(j) + ω·load(j). A peer is considered only
// if its WAN gate is open, its RTT is under the WAN threshold, its data is
// fresh, it is healthy and residency allows; and it wins only by being
// strictly better than local (the selective-pushing inequality). A peer's
// cache counts only for a match of at least MinRemotePrefixTokens.
//
// Inside the region the request goes to the replica holding the longest
// prefix unless that replica's load exceeds the least-loaded one's by more
// than LoadMargin; if no replica has room, the request is held in the
// balancer's queue, where it is re-routed as state changes.
type Skywalker struct {
	cfg    SkywalkerConfig
	filter peerFilter
}

// NewSkywalker returns the policy with cfg.
func NewSkywalker(cfg SkywalkerConfig) *Skywalker {
	return &Skywalker{cfg: cfg, filter: peerFilter{maxDataAge: cfg.MaxDataAge, respectGate: true, maxRTT: cfg.MaxWANRTT}}
}

// Name implements Policy.
func (s *Skywalker) Name() string { return "skywalker" }

// Route implements Policy.
func (s *Skywalker) Route(req *request.Request, v *View) Decision {
	if req.Forwarded {
		return serveLocally(req, v, s.cfg.LoadMargin, ReasonForwarded)
	}
	local := &v.Local
	localOK := req.AllowedIn(local.Jurisdiction) && anyHealthy(local.Replicas)

	var localScore, localEstimate time.Duration
	replica := -1
	if localOK {
		replica, localEstimate = s.pickReplica(req, local)
		localScore = localEstimate + s.congestion(local.Load())
	}

	bestPeer := -1
	var peerScore, peerEstimate time.Duration
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
		estimate := p.RTT + p.QueueWait + p.Prefill.Time(req.PromptTokens-cached)
		score := estimate + s.congestion(p.Load())
		if bestPeer < 0 || score < peerScore {
			bestPeer, peerScore, peerEstimate = i, score, estimate
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
	case bestPeer >= 0 && peerScore+s.cfg.PushMargin < localScore:
		return forward(v, bestPeer, ReasonRemoteFaster, peerEstimate)
	}
	if !local.Replicas[replica].HasRoom() {
		return Decision{Action: Hold, Region: local.Name, Reason: ReasonBusy, Estimate: localEstimate}
	}
	reason := ReasonLeastLoad
	if local.Replicas[replica].PrefixBlocks > 0 {
		reason = ReasonPrefix
	}
	return Decision{Action: Dispatch, Replica: replica, Region: local.Name, Reason: reason, Estimate: localEstimate}
}

// pickReplica chooses the local replica with the lowest estimated time to
// first token (wait for a slot plus prefill of what it does not have
// cached) plus its congestion term, among healthy replicas whose load is within LoadMargin of the
// least loaded. A replica without room costs one slot's wait (a slot frees
// on it every PerRequestWait × healthy replicas), so a replica holding a
// long prefix is worth waiting for and a short one is not. Requests already
// queued ahead add their wait. Ties go to the lesser load, then the lower
// index.
func (s *Skywalker) pickReplica(req *request.Request, l *LocalRegion) (int, time.Duration) {
	healthy := 0
	for i := range l.Replicas {
		if l.Replicas[i].Healthy {
			healthy++
		}
	}
	slotWait := l.PerRequestWait * time.Duration(healthy)
	least := l.Replicas[leastLoaded(l.Replicas, false)].Load()
	limit := least + max(s.cfg.LoadMargin, least/4)
	best := -1
	var bestT, bestScore time.Duration
	for i := range l.Replicas {
		r := &l.Replicas[i]
		if !r.Healthy || r.Load() > limit {
			continue
		}
		t := l.Prefill.Time(req.PromptTokens - req.CachedTokens(r.PrefixBlocks))
		if !r.HasRoom() {
			t += slotWait
		}
		score := t + s.replicaCongestion(r)
		if best < 0 || score < bestScore || (score == bestScore && r.Load() < l.Replicas[best].Load()) {
			best, bestT, bestScore = i, t, score
		}
	}
	return best, bestT + time.Duration(l.Queued)*l.PerRequestWait
}

// replicaCongestion is the in-region congestion term: ReplicaWeight times
// the replica's outstanding requests over its dispatch cap. Among replicas
// that save similar prefill the emptier one wins, since its batch runs
// faster; and a hot prefix does not pile onto one replica until its KV
// cache thrashes.
func (s *Skywalker) replicaCongestion(r *Replica) time.Duration {
	return time.Duration(float64(s.cfg.ReplicaWeight) * float64(r.Load()) / float64(max(r.MaxInFlight, 1)))
}

func (s *Skywalker) congestion(load float64) time.Duration {
	return time.Duration(load * float64(s.cfg.CongestionWeight))
}

// anyPeerMayServe reports whether some peer in the view could ever serve
// req, however busy or unreachable now: only then is holding worthwhile.
func anyPeerMayServe(req *request.Request, v *View) bool {
	if req.Forwarded {
		return false
	}
	for i := range v.Peers {
		if req.AllowedIn(v.Peers[i].Jurisdiction) {
			return true
		}
	}
	return false
}

var _ Policy = (*Skywalker)(nil)
