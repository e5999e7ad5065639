package policy

import "skywalker/internal/request"

// SkyLB is the SkyLB paper prototype's rule, kept as a baseline: serve
// locally whenever a local replica is free; only when none is, forward to
// the eligible peer with the shortest queue, if that queue is shorter than
// the local one; otherwise hold. One hop at most, and no cache state is
// exchanged between regions: a peer's cached prefixes play no part.
type SkyLB struct {
	loadMargin int
	filter     peerFilter
}

// NewSkyLB returns the policy. It shares SkyWalker's in-region replica
// choice (loadMargin), WAN threshold and data-age bound.
func NewSkyLB(cfg SkywalkerConfig) *SkyLB {
	return &SkyLB{loadMargin: cfg.LoadMargin, filter: peerFilter{maxDataAge: cfg.MaxDataAge, respectGate: true, maxRTT: cfg.MaxWANRTT}}
}

// Name implements Policy.
func (s *SkyLB) Name() string { return "skylb" }

// Route implements Policy.
func (s *SkyLB) Route(req *request.Request, v *View) Decision {
	if req.Forwarded {
		return serveLocally(req, v, s.loadMargin, ReasonForwarded)
	}
	allowed := req.AllowedIn(v.Local.Jurisdiction)
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
	best := -1
	filter := s.filter.forRequest(req, v)
	for i := range v.Peers {
		p := &v.Peers[i]
		if !filter.eligible(req, p) || (allowed && p.Queued >= localQueue) {
			continue
		}
		if best < 0 || p.Queued < v.Peers[best].Queued || (p.Queued == v.Peers[best].Queued && p.RTT < v.Peers[best].RTT) {
			best = i
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
