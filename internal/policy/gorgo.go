package policy

import (
	"time"

	"skywalker/internal/request"
)

// GorgoConfig are GORGO's per-token costs. Zero fields take the published
// testbed's values (DefaultGorgoConfig); the simulator and the proxy set
// them from the replicas' engine profile (profile.Profile.PrefillPerToken
// and QueuePerToken, the latter fitted by engine.FitQueueCost).
type GorgoConfig struct {
	// PrefillPerToken is c_prefill: TTFT per uncached prompt token.
	PrefillPerToken time.Duration
	// QueuePerToken is c_queue: TTFT per prompt token of the work already
	// in flight at the target.
	QueuePerToken time.Duration
}

// DefaultGorgoConfig returns the constants GORGO reports for its testbed
// (arXiv 2602.11688): 0.063 ms per uncached prefill token, 0.010 ms per
// queued token.
func DefaultGorgoConfig() GorgoConfig {
	return GorgoConfig{PrefillPerToken: 63 * time.Microsecond, QueuePerToken: 10 * time.Microsecond}
}

// Gorgo is GORGO (arXiv 2602.11688), the closest research peer: every
// candidate — a replica, or a peer region (GORGO's distributed form) —
// costs
//
//	RTT + c_prefill × uncached prompt tokens + c_queue × queued prompt tokens
//
// and the request goes to the cheapest at once: no hold queue, no gate (the
// RTT is in the cost). A peer region's queue is its summary's queued tokens
// per replica, plus what this balancer has in flight there; its uncached
// tokens come from its digest. As a single global router (GORGO-proxy, its
// best form) every region's replicas are its own, each with its RTT.
type Gorgo struct {
	cfg    GorgoConfig
	filter peerFilter
}

// NewGorgo returns the policy.
func NewGorgo(cfg GorgoConfig, sw SkywalkerConfig) *Gorgo {
	d := DefaultGorgoConfig()
	if cfg.PrefillPerToken <= 0 {
		cfg.PrefillPerToken = d.PrefillPerToken
	}
	if cfg.QueuePerToken <= 0 {
		cfg.QueuePerToken = d.QueuePerToken
	}
	return &Gorgo{cfg: cfg, filter: peerFilter{maxDataAge: sw.MaxDataAge}}
}

// Name implements Policy.
func (g *Gorgo) Name() string { return "gorgo" }

func (g *Gorgo) cost(rtt time.Duration, uncached, queued int) time.Duration {
	return rtt + time.Duration(max(uncached, 0))*g.cfg.PrefillPerToken + time.Duration(max(queued, 0))*g.cfg.QueuePerToken
}

// Route implements Policy.
func (g *Gorgo) Route(req *request.Request, v *View) Decision {
	best, bestPeer := -1, -1
	var bestCost time.Duration
	for i := range v.Local.Replicas {
		if !v.Local.Serves(req, i) {
			continue
		}
		r := &v.Local.Replicas[i]
		c := g.cost(r.RTT, req.PromptTokens-req.CachedTokens(r.PrefixBlocks), r.QueuedTokens)
		if best < 0 || c < bestCost {
			best, bestCost = i, c
		}
	}
	for i := range v.Peers {
		p := &v.Peers[i]
		if !g.filter.eligible(req, p) {
			continue
		}
		queued := p.QueuedTokens/max(p.Replicas, 1) + p.InFlightFromUs*req.PromptTokens/max(p.Replicas, 1)
		c := g.cost(p.RTT, req.PromptTokens-req.CachedTokens(p.PrefixBlocks), queued)
		if (best < 0 && bestPeer < 0) || c < bestCost {
			best, bestPeer, bestCost = -1, i, c
		}
	}
	switch {
	case bestPeer >= 0:
		return forward(v, bestPeer, ReasonRemoteFaster, bestCost)
	case best >= 0:
		reason := ReasonLeastLoad
		if v.Local.Replicas[best].PrefixBlocks > 0 {
			reason = ReasonPrefix
		}
		return Decision{Action: Dispatch, Replica: best, Region: v.Local.Name, Reason: reason, Estimate: bestCost}
	}
	return noMember(req, v)
}

var _ Policy = (*Gorgo)(nil)
