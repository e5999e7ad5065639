package policy

import (
	"time"

	"skywalker/internal/request"
)

// SkywalkerConfig tunes the SkyWalker policy. DefaultSkywalkerConfig gives
// the documented defaults.
type SkywalkerConfig struct {
	// CongestionWeight is ω: how much estimated TTFT one unit of load
	// (outstanding requests per dispatch slot) is worth. It breaks near-ties
	// toward the emptier region, hedging against stale load data. Default
	// 50 ms.
	CongestionWeight time.Duration
	// LoadMargin is how many requests more than the least-loaded replica
	// the longest-prefix replica may carry and still be chosen. Default 4.
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
		CongestionWeight:      50 * time.Millisecond,
		LoadMargin:            4,
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
	if localOK {
		cached := req.CachedTokens(bestPrefix(local.Replicas))
		localEstimate = local.QueueWait() + local.Prefill.Time(req.PromptTokens-cached)
		localScore = localEstimate + s.congestion(local.Load())
	}

	bestPeer := -1
	var peerScore, peerEstimate time.Duration
	for i := range v.Peers {
		p := &v.Peers[i]
		if !s.filter.eligible(req, p) {
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
	d := serveLocally(req, v, s.cfg.LoadMargin, "")
	d.Estimate = localEstimate
	return d
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
