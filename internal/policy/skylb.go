package policy

import "skywalker/internal/request"

// SkyLB is the SkyLB paper prototype's rule, kept as a baseline:
//
//   - inside the region, a request goes to a replica only when that
//     replica's engine waiting queue is empty (as last polled; the proxy
//     scrapes every 100 ms) and it is under its in-flight cap, preferring
//     the one holding the longest prefix of the request among those within
//     the load margin (max(LoadMargin, a quarter of the least load), as
//     SkyWalker's);
//   - only when no local replica is free, it forwards to the eligible peer
//     with the shortest queue — the peer's held requests plus the ones this
//     balancer has in flight there — if that is shorter than the local
//     queue; otherwise the request waits in the balancer;
//   - one hop at most, and no cache state crosses regions: a peer's cached
//     prefixes play no part.
type SkyLB struct {
	loadMargin int
	filter     peerFilter
}

// NewSkyLB returns the policy. It shares SkyWalker's load margin, WAN
// threshold and data-age bound.
func NewSkyLB(cfg SkywalkerConfig) *SkyLB {
	return &SkyLB{loadMargin: cfg.LoadMargin, filter: peerFilter{maxDataAge: cfg.MaxDataAge, respectGate: true, maxRTT: cfg.MaxWANRTT}}
}

// Name implements Policy.
func (s *SkyLB) Name() string { return "skylb" }

// Route implements Policy.
func (s *SkyLB) Route(req *request.Request, v *View) Decision {
	if req.StaysHere() {
		return serveLocally(req, v, s.loadMargin, forwardedReason(req))
	}
	allowed := StayingPossible(req, v) // residency permits, and the region serves the model
	if allowed {
		if d := serveLocally(req, v, s.loadMargin, ""); d.Action == Dispatch {
			return d
		}
	}
	localQueue := v.Local.Queued
	for i := range v.Local.Replicas {
		if r := &v.Local.Replicas[i]; r.Healthy {
			localQueue += r.Waiting
		}
	}
	best, bestQueue := -1, 0
	filter := s.filter.forRequest(req, v)
	for i := range v.Peers {
		p := &v.Peers[i]
		queue := p.Queued + p.InFlightFromUs
		if !filter.eligible(req, p) || (allowed && queue >= localQueue) {
			continue
		}
		if best < 0 || queue < bestQueue || (queue == bestQueue && p.RTT < v.Peers[best].RTT) {
			best, bestQueue = i, queue
		}
	}
	switch {
	case best >= 0 && allowed:
		return forward(v, best, ReasonLocalBusy, 0)
	case best >= 0:
		return forward(v, best, ReasonResidency, 0)
	case !allowed && !anyPeerMayServe(req, v):
		return reject(v)
	case !allowed || !anyHealthy(v.Local.Replicas):
		return Decision{Action: Hold, Region: v.Local.Name, Reason: ReasonNoReplica}
	}
	return Decision{Action: Hold, Region: v.Local.Name, Reason: ReasonBusy}
}

var _ Policy = (*SkyLB)(nil)
