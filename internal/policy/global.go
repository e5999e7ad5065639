package policy

import "skywalker/internal/request"

// The global baselines (round-robin, least-load, consistent-hash,
// cache-aware) treat every replica of every region as one flat pool, the
// way a single global load balancer would: they ignore RTT and the WAN gate
// and push requests into engine queues at once. Each regional balancer sees
// its own replicas one by one and each peer region as a group of
// PeerRegion.Replicas identical members; a forwarded request is then placed
// by the same policy among the receiving region's replicas. Health,
// residency and data freshness still apply: no policy sends a request where
// it may not or cannot be served.

// member is one element of the flat pool: a local replica, or one of a
// peer region's replicas.
type member struct {
	replica int // local replica index, or -1
	peer    int // peer index, or -1
}

// globalFilter admits any healthy, fresh, residency-compatible peer.
func globalFilter(cfg SkywalkerConfig) peerFilter {
	return peerFilter{maxDataAge: cfg.MaxDataAge}
}

// members lists the pool for req: local replicas that may serve it
// (healthy, in a jurisdiction it allows) and eligible peers' replica slots. Each peer
// appears once with a weight of its replica count.
func members(req *request.Request, v *View, f peerFilter, dst []member) ([]member, int) {
	total := 0
	for i := range v.Local.Replicas {
		if v.Local.Serves(req, i) {
			dst = append(dst, member{replica: i, peer: -1})
			total++
		}
	}
	for i := range v.Peers {
		if f.eligible(req, &v.Peers[i]) {
			dst = append(dst, member{replica: -1, peer: i})
			total += v.Peers[i].Replicas
		}
	}
	return dst, total
}

// decide turns a chosen member into a decision.
func (m member) decide(v *View, reason Reason) Decision {
	if m.peer >= 0 {
		return forward(v, m.peer, reason, 0)
	}
	return Decision{Action: Dispatch, Replica: m.replica, Region: v.Local.Name, Reason: reason}
}

// noMember is the decision when the pool is empty.
func noMember(req *request.Request, v *View) Decision {
	if !anyReplicaMayServe(req, v) && !anyPeerMayServe(req, v) {
		return reject(v)
	}
	return Decision{Action: Hold, Region: v.Local.Name, Reason: ReasonNoReplica}
}

// load is the member's outstanding requests per replica.
func (m member) load(v *View) float64 {
	if m.peer >= 0 {
		return v.Peers[m.peer].PerReplicaLoad()
	}
	return float64(v.Local.Replicas[m.replica].Load())
}

// prefixBlocks is the member's match for the request.
func (m member) prefixBlocks(v *View) int {
	if m.peer >= 0 {
		return v.Peers[m.peer].PrefixBlocks
	}
	return v.Local.Replicas[m.replica].PrefixBlocks
}

// anyReplicaMayServe reports whether some local replica, healthy or not,
// is in a jurisdiction req allows: only then is holding worthwhile.
func anyReplicaMayServe(req *request.Request, v *View) bool {
	for i := range v.Local.Replicas {
		j := v.Local.Replicas[i].Jurisdiction
		if j == "" {
			j = v.Local.Jurisdiction
		}
		if req.AllowedIn(j) {
			return true
		}
	}
	return len(v.Local.Replicas) == 0 && req.AllowedIn(v.Local.Jurisdiction)
}
