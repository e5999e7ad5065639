package policy

import (
	"time"

	"skywalker/internal/request"
)

// peerFilter says which peers a policy may forward to.
type peerFilter struct {
	maxDataAge  time.Duration // older load data means unavailable; 0: no bound
	respectGate bool          // skip peers whose WAN gate is closed
	maxRTT      time.Duration // skip peers farther than this; 0: no bound
}

// forRequest is the filter for req in view v. A request the local region
// may not serve — data residency, or a model it has no replica of — may
// cross a closed gate or a link over the RTT threshold: the gate keeps
// requests off slow links when staying is an option, and for this one it
// is not — slow beats never.
func (f peerFilter) forRequest(req *request.Request, v *View) peerFilter {
	if !StayingPossible(req, v) {
		f.respectGate, f.maxRTT = false, 0
	}
	return f
}

// StayingPossible reports whether the local region could ever serve req:
// its residency allows the region, and the region has replicas of its
// model (healthy or not).
func StayingPossible(req *request.Request, v *View) bool {
	return req.AllowedIn(v.Local.Jurisdiction) && len(v.Local.Replicas) > 0
}

// eligible reports whether req may be forwarded to p. A forwarded request
// never goes further (one hop); residency and health always apply.
func (f peerFilter) eligible(req *request.Request, p *PeerRegion) bool {
	switch {
	case req.StaysHere(), !p.Healthy, p.Replicas <= 0, !req.AllowedIn(p.Jurisdiction):
		return false
	case f.maxDataAge > 0 && p.DataAge > f.maxDataAge:
		return false
	case f.respectGate && !p.GateOpen:
		return false
	case f.maxRTT > 0 && p.RTT > f.maxRTT:
		return false
	}
	return true
}

// anyHealthy reports whether some replica is healthy.
func anyHealthy(rs []Replica) bool {
	for i := range rs {
		if rs[i].Healthy {
			return true
		}
	}
	return false
}

// leastLoaded returns the healthy replica with the smallest Load (ties go
// to the lower index), restricted to replicas with room if onlyRoom; -1 if
// there is none.
func leastLoaded(rs []Replica, onlyRoom bool) int {
	best := -1
	for i := range rs {
		r := &rs[i]
		if !r.Healthy || (onlyRoom && !r.HasRoom()) {
			continue
		}
		if best < 0 || r.Load() < rs[best].Load() {
			best = i
		}
	}
	return best
}

// pickByPrefix is the in-region choice: among healthy replicas (with room,
// if onlyRoom) whose load is within max(margin, a quarter of the least
// load) requests of the least loaded, the one holding the longest prefix of
// the request; ties go to the lesser load, then the lower index. Bounding
// the margin keeps a popular prefix from piling every request onto one
// replica; scaling it with load keeps affinity when every replica is busy.
// Returns -1 if none qualifies.
func pickByPrefix(rs []Replica, margin int, onlyRoom bool) (int, Reason) {
	least := leastLoaded(rs, onlyRoom)
	if least < 0 {
		return -1, ReasonBusy
	}
	limit := rs[least].Load() + loadMargin(margin, rs[least].Load())
	best := least
	for i := range rs {
		r := &rs[i]
		if !r.Healthy || (onlyRoom && !r.HasRoom()) || r.Load() > limit {
			continue
		}
		b := &rs[best]
		if r.Prefix() > b.Prefix() || r.Prefix() == b.Prefix() && (r.Session && !b.Session || r.Session == b.Session && r.Load() < b.Load()) {
			best = i
		}
	}
	if rs[best].Prefix() > 0 {
		return best, ReasonPrefix
	}
	return best, ReasonLeastLoad
}

// loadMargin is how many requests more than the least-loaded replica a
// replica may carry and still win on its cached prefix.
func loadMargin(margin, least int) int { return max(margin, least/4) }

// serveLocally is the decision for a request that must stay in the region
// (forwarded in, its forward failed, or a policy that never forwards): the pick of pickByPrefix
// among replicas with room, or Hold; Reject if residency forbids the region.
func serveLocally(req *request.Request, v *View, margin int, reason Reason) Decision {
	if !req.AllowedIn(v.Local.Jurisdiction) {
		return reject(v)
	}
	if !anyHealthy(v.Local.Replicas) {
		return Decision{Action: Hold, Region: v.Local.Name, Reason: ReasonNoReplica}
	}
	i, why := pickByPrefix(v.Local.Replicas, margin, true)
	if i < 0 {
		return Decision{Action: Hold, Region: v.Local.Name, Reason: ReasonBusy}
	}
	if reason == "" {
		reason = why
	}
	return Decision{Action: Dispatch, Replica: i, Region: v.Local.Name, Reason: reason}
}

// forwardedReason is the reason a request that stays here is served
// with: forwarded-in for one a peer sent, else "" (the pick's own).
func forwardedReason(req *request.Request) Reason {
	if req.Forwarded {
		return ReasonForwarded
	}
	return ""
}

// dispatchOrHold dispatches to replica i, or holds when i < 0 (no healthy
// replica): a baseline that pushes into engine queues still cannot push to
// a dead replica.
func dispatchOrHold(v *View, i int, reason Reason) Decision {
	if i < 0 {
		return Decision{Action: Hold, Region: v.Local.Name, Reason: ReasonNoReplica}
	}
	return Decision{Action: Dispatch, Replica: i, Region: v.Local.Name, Reason: reason}
}

func forward(v *View, p int, reason Reason, estimate time.Duration) Decision {
	return Decision{Action: Forward, Peer: p, Region: v.Peers[p].Name, Reason: reason, Estimate: estimate}
}

func reject(v *View) Decision {
	return Decision{Action: Reject, Region: v.Local.Name, Reason: ReasonNoRegion}
}
