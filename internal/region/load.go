package region

import (
	"time"

	"skywalker/internal/digest"
	"skywalker/internal/policy"
)

// Load is one node's summary of its region's load, as it publishes it to
// every peer.
type Load struct {
	QueueWait   time.Duration // the region's own queue-wait estimate Q
	Queued      int           // requests held in this node's balancer
	Replicas    int           // healthy replicas
	Slots       int           // dispatch slots over them
	Outstanding int           // queued plus in flight through this node
	// QueuedTokens is the prompt tokens of the outstanding requests.
	QueuedTokens int
	// PrefillTokens is the prefill work queued at the least busy healthy
	// replica: what a request forwarded here would wait behind.
	PrefillTokens int
	// Offloading is this node's requests in flight at peer regions.
	Offloading int
	Prefill    policy.PrefillProfile
	// Hardware is the engines' hardware profile (Config.Hardware), Speed
	// the scale of the profile Prefill already bears (pool.speed), and
	// SpeedMeasured whether the region measured it from its own first
	// tokens (else it is 1 or borrowed): a peer of the same hardware
	// borrows a measured speed until it has its own.
	Hardware      string
	Speed         float64
	SpeedMeasured bool
	// FreeCacheTokens is the most KV cache, in tokens, any healthy
	// replica is believed to have free (a prompt cached there evicts
	// nothing), and HitShare the region's share of prompt tokens served
	// from cache (pool.hitShare): with them a peer prices what a forward
	// would evict.
	FreeCacheTokens int
	HitShare        float64
	// Draining: the node is shutting down. Peers stop forwarding to it at
	// once; it still forwards and serves what it holds.
	Draining bool
	// Models is the load of each model the node serves (its pools with
	// replicas, see Pools), each with Model set; the fields above are
	// their aggregate. Empty from a node of a release before pools
	// (mesh wire version 7): it is taken to serve every model, as its
	// aggregate.
	Models []Load
	// Model is the model a per-model load is for ("" in the aggregate).
	Model string
}

// forModel is the load for model: its entry in Models; the aggregate when
// the summary has no Models (a node of an earlier release serves one
// model, whichever it is asked for). ok is false when the node does not
// serve model.
func (l *Load) forModel(model string) (Load, bool) {
	if len(l.Models) == 0 {
		return *l, true
	}
	for _, m := range l.Models {
		if m.Model == model {
			m.Draining = l.Draining
			return m, true
		}
	}
	return Load{}, false
}

// Load is the region's summary as of now, as this node publishes it.
func (r *pool) Load() Load {
	queued := r.bal.Len()
	l := Load{Queued: queued, Outstanding: queued, QueuedTokens: r.bal.HeldTokens(), Prefill: r.prefill(), HitShare: r.hitShare(),
		Hardware: r.cfg.Hardware, Speed: r.speed(), SpeedMeasured: r.speedMeasured()}
	for _, n := range r.forwarding {
		l.Offloading += n
	}
	local := policy.LocalRegion{Queued: queued, PerRequestWait: r.perRequestWait(), Replicas: r.loadReps[:0]}
	l.PrefillTokens = -1
	for _, rp := range r.replicas {
		l.Outstanding += rp.inFlight
		l.QueuedTokens += rp.inFlightTokens
		pr := r.policyReplica(rp, 0)
		if rp.healthy {
			l.Replicas++
			l.Slots += r.effectiveCap(rp)
			if l.PrefillTokens < 0 || rp.prefillTokens < l.PrefillTokens {
				l.PrefillTokens = rp.prefillTokens
			}
			l.FreeCacheTokens = max(l.FreeCacheTokens, pr.FreeCacheTokens(r.cfg.BlockTokens))
		}
		local.Replicas = append(local.Replicas, pr)
	}
	l.PrefillTokens = max(l.PrefillTokens, 0)
	l.QueueWait = local.QueueWait()
	r.loadReps = local.Replicas
	return l
}

// Significant reports a change of load worth publishing before the
// interval ends: replicas came or went, the node began draining, or the
// queue or the outstanding requests moved by more than a quarter (and more
// than a few requests).
func Significant(old, cur Load) bool {
	diff := func(a, b int) int {
		if a > b {
			return a - b
		}
		return b - a
	}
	return cur.Replicas != old.Replicas || cur.Draining != old.Draining || diff(cur.Queued, old.Queued) > max(4, old.Queued/4) ||
		diff(cur.Outstanding, old.Outstanding) > max(8, old.Outstanding/4)
}

// LoadPublisher decides when a node sends its load summary: every
// ControlPlane.LoadInterval, and early on a Significant change. The mesh
// and the simulator ask it every ControlPlane.LoadCheck. Not safe for
// concurrent use.
type LoadPublisher struct {
	Interval time.Duration
	last     Load
	lastAt   time.Time
	seq      uint64
}

// Due reports whether l should be sent now, and if so the sequence number
// the summary carries (increasing, so receivers keep only the newest).
func (p *LoadPublisher) Due(now time.Time, l Load) (uint64, bool) {
	if p.seq > 0 && now.Sub(p.lastAt) < p.Interval && !Significant(p.last, l) {
		return 0, false
	}
	p.seq++
	p.last, p.lastAt = l, now
	return p.seq, true
}

// Peer is a peer region as this node last heard of it: a consistent
// snapshot built by the mesh (internal/mesh.Table.Peers).
type Peer struct {
	Region       string
	Jurisdiction string
	// Nodes are the region's live nodes whose load data is fresh; APIAddrs
	// their proxies' addresses.
	Nodes    int
	APIAddrs []string
	Healthy  bool          // some node is live with fresh data
	Left     bool          // every node of the region left the mesh (listed until forgotten)
	DataAge  time.Duration // since the newest load summary arrived
	RTT      time.Duration // smoothed
	Loss     float64
	GateOpen bool
	Gate     string // why the gate is as it is
	// Load aggregates the fresh nodes: queues and outstanding requests
	// summed, replicas and slots as the largest report (the region's
	// proxies share its replicas), queue wait as the worst, free cache as
	// the most, hit share as the mean.
	Load   Load
	Digest *digest.Digest // union of the fresh nodes' digests; nil if none
	// ClockOffset is the region's wall clock less this node's, measured
	// from its load summaries (zero before any): how its forwarding
	// markers' times are read.
	ClockOffset time.Duration
}

// serves reports whether the peer region is live and its summaries list
// model among those it serves (one of an earlier release lists none: it
// may be forwarded a model this region serves, never one it does not
// know of).
func (p *Peer) serves(model string) bool {
	if !p.Healthy {
		return false
	}
	for _, m := range p.Load.Models {
		if m.Model == model {
			return true
		}
	}
	return false
}

// forModel is the peer as a pool of model sees it: its load for that
// model; ok is false when it does not serve model.
func (p *Peer) forModel(model string) (Peer, bool) {
	l, ok := p.Load.forModel(model)
	if !ok {
		return Peer{}, false
	}
	q := *p
	q.Load = l
	q.Load.Models = nil
	return q, true
}

// view converts the peer to the routing view's form (the prefix match is
// left to the caller, which knows the request).
func (p *Peer) view() policy.PeerRegion {
	return policy.PeerRegion{Name: p.Region, Jurisdiction: p.Jurisdiction, Healthy: p.Healthy, DataAge: p.DataAge,
		RTT: p.RTT, GateOpen: p.GateOpen, GateReason: p.Gate, QueueWait: p.Load.QueueWait, Queued: p.Load.Queued,
		Replicas: p.Load.Replicas, Slots: p.Load.Slots, Outstanding: p.Load.Outstanding, QueuedTokens: p.Load.QueuedTokens,
		PrefillTokens: p.Load.PrefillTokens, Offloading: p.Load.Offloading, Prefill: p.Load.Prefill, Left: p.Left,
		FreeCacheTokens: p.Load.FreeCacheTokens, HitShare: p.Load.HitShare}
}
