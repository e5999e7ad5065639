package policy

import (
	"time"

	"skywalker/internal/apierr"
	"skywalker/internal/request"
)

// Policy routes one request. Route must be safe for concurrent use, must
// not retain req or v, and must not read the clock or do I/O: everything it
// may depend on is in its arguments and its own configuration.
type Policy interface {
	// Name is the policy's registry name, e.g. "skywalker".
	Name() string
	// Route decides where req goes given the view v built for it.
	Route(req *request.Request, v *View) Decision
}

// Action is what the balancer does with a decision.
type Action uint8

// The actions a decision can carry.
const (
	Dispatch Action = iota // send to v.Local.Replicas[Decision.Replica] now
	Forward                // send to v.Peers[Decision.Peer] now; that region serves it
	Hold                   // keep in the balancer queue; re-route when state changes
	Reject                 // no region can ever take it; answer the client now
)

func (a Action) String() string {
	switch a {
	case Dispatch:
		return "dispatch"
	case Forward:
		return "forward"
	case Hold:
		return "hold"
	default:
		return "reject"
	}
}

// Reason is a short, stable explanation of a decision. The set is small and
// fixed so it can label metrics and travel in the X-SkyWalker-Route-Reason
// header.
type Reason string

// The reasons policies give.
const (
	ReasonPrefix       Reason = "local-prefix"       // local replica holding the longest prefix
	ReasonLeastLoad    Reason = "least-load"         // least-loaded replica or region
	ReasonSession      Reason = "session"            // the replica that last served the request's session (prompt_cache_key, session header)
	ReasonRemoteFaster Reason = "remote-faster"      // a peer's estimated TTFT beats local
	ReasonNotServed    Reason = "not-served-here"    // the model has no replica here; a peer serves it
	ReasonResidency    Reason = "residency"          // the local region may not serve it
	ReasonLocalBusy    Reason = "local-busy"         // no local replica free; a peer has a shorter queue (skylb)
	ReasonBusy         Reason = "hold-busy"          // every local replica is busy
	ReasonNoReplica    Reason = "hold-no-replica"    // no healthy local replica, no eligible peer yet
	ReasonNoRegion     Reason = "no-eligible-region" // nothing in the view may serve it
	ReasonRoundRobin   Reason = "round-robin"
	ReasonHash         Reason = "consistent-hash"
	ReasonCacheHit     Reason = "cache-hit"    // cache-aware: match above threshold
	ReasonImbalance    Reason = "imbalance"    // cache-aware: loads too far apart
	ReasonForwarded    Reason = "forwarded-in" // served here after another region forwarded it
	ReasonOverload     Reason = "overload"     // the local region cannot meet the request's objective; this peer can
	ReasonDrain        Reason = "drain"        // held here; a peer with room starts it sooner, within its objective
)

// Decision is a policy's answer.
type Decision struct {
	Action  Action
	Replica int    // index into View.Local.Replicas, for Dispatch
	Peer    int    // index into View.Peers, for Forward
	Region  string // the region that serves (or would serve) the request
	Reason  Reason
	// Estimate is the policy's estimated time to first token for the chosen
	// target, when the policy estimates one (skywalker does); else zero.
	Estimate time.Duration
	// HasFallback: the policy kept the request here but a peer could
	// take it, FallbackPeer (an index into View.Peers), with an estimated
	// time to first token of FallbackEstimate. The balancer forwards there
	// when the local estimate misses the request's objective and the
	// peer's does not (a region under pressure forwards before it sheds).
	HasFallback      bool
	FallbackPeer     int
	FallbackEstimate time.Duration
	// Refusal, for a Reject, is why, when the client must hear something
	// other than that no region may serve it (Homing's errors).
	Refusal *apierr.Error
	// StartedOver: the request continued a Responses chain whose home is
	// gone, and starts it over (request.StartOver): routed as a new
	// request, it is sent without its previous_response_id.
	StartedOver bool
}

// View is the world as one region's balancer sees it when routing one
// request. Prefix matches are specific to that request.
type View struct {
	Local LocalRegion
	Peers []PeerRegion
}

// LocalRegion is the balancer's own region.
type LocalRegion struct {
	Name         string
	Jurisdiction string
	Replicas     []Replica
	// Queued is the number of requests ahead of this one in the balancer
	// queue, and Held the number held in all, this one included if it is
	// (the balancer fills both in).
	Queued, Held int
	// Waited is how long this request has been held so far (the balancer
	// fills it in; zero on arrival).
	Waited time.Duration
	// Objective is this request's TTFT objective (its class's SLO for its
	// prompt; the balancer fills it in), zero when it has none: a peer is
	// within reach when its estimate fits it.
	Objective time.Duration
	// PerRequestWait is how much longer the wait gets per request ahead in
	// the queue: by Little's law, the smoothed service time divided by the
	// requests the region serves at once (see PerRequestWait).
	PerRequestWait time.Duration
	Prefill        PrefillProfile
	// TTFTBias is how much longer than estimated recent requests took to
	// their first token (a smoothed ratio; 0 or 1 when unknown). Policies
	// route on their own estimates; SLO-aware admission scales by it.
	TTFTBias float64
	// HitShare is the smoothed share of recent prompt tokens served from
	// cache in the region (0 when unknown): how likely a cached token is
	// to be asked for again, the worth of what a cold prompt evicts.
	HitShare float64
	// Unmeasured: the region's estimates rest on the profile alone — it
	// has seen no first token, and some replica's engine reports no
	// metrics (nothing says it is the hardware the profile names).
	// Admission then holds at most one request per healthy replica (see
	// balancer.Config.Objectives).
	Unmeasured bool
	// AdapterLoad is what loading the request's LoRA adapter costs on a
	// replica where it is not resident (zero for a base-model request).
	AdapterLoad time.Duration
	// Error is how the region's recent dispatches' first tokens compared
	// with their estimates (learned by the region; unknown at first).
	Error ErrorSummary
}

// Replica is one local inference server.
type Replica struct {
	Name    string
	Healthy bool
	// Waiting and Running are the engine's own queue and batch, as last
	// scraped (vllm:num_requests_waiting / _running).
	Waiting, Running int
	// InFlight counts requests this balancer sent and has not seen finish.
	InFlight int
	// MaxInFlight caps InFlight for dispatch; 0 means no cap.
	MaxInFlight int
	// Capacity is how many requests the replica runs at once before its
	// KV cache is full (learned from its metrics; MaxInFlight when
	// unknown): the denominator of its load.
	Capacity int
	KVUsage  float64 // 0..1
	// CacheTokens is the KV cache, in tokens, the prefix index sizes the
	// replica by (0: unknown); with IndexedBlocks it tells how much a new
	// prompt can be cached there before something else is evicted.
	CacheTokens int
	// PrefixBlocks is how many leading blocks of the request this replica
	// is believed to hold (from the prefix index); IndexedBlocks how many
	// blocks of any prompt it is believed to hold.
	PrefixBlocks, IndexedBlocks int
	// QueuedTokens is the prompt tokens of the requests this balancer has
	// in flight at the replica.
	QueuedTokens int
	// PrefillTokens is the uncached prompt tokens of those that have not
	// produced their first token yet: the prefill a new request waits
	// behind (engines prefill in arrival order).
	PrefillTokens int
	// Jurisdiction and RTT describe a replica outside the balancer's own
	// region: a single global router sees every region's replicas as its
	// own. Empty and zero for the region's own replicas (the regional
	// policies assume all their replicas are).
	Jurisdiction string
	RTT          time.Duration
	// AdapterResident: the request's LoRA adapter is believed loaded on
	// the replica (its cost there is then nothing). AdapterBlocked: it is
	// not, and every adapter slot the replica has serves requests of
	// other adapters in flight, so the request could not start there
	// now. Both false for a base-model request.
	AdapterResident, AdapterBlocked bool
	// Session: the request's session (request.Affinity: prompt_cache_key,
	// the session header) was last served here, and SessionPrefix is the
	// longest prefix any replica of the region is believed to hold for
	// the request: what the session sent here is most likely still here
	// (the index may have lost it: another proxy served it, or this one
	// restarted). The choice credits the replica with it (Prefix) and
	// breaks ties for it — a soft affinity, lost when the replica is out
	// of the load margin or has no room. PrefixBlocks stays the index's
	// word.
	Session       bool
	SessionPrefix int
}

// Prefix is the prefix the choice credits the replica with: what the
// index says, or for the session's replica what the session sent.
func (r *Replica) Prefix() int {
	if r.Session {
		return max(r.PrefixBlocks, r.SessionPrefix)
	}
	return r.PrefixBlocks
}

// FreeCacheTokens is how many more tokens the replica is believed to cache
// before it evicts anything, for blocks of blockTokens tokens (0 when its
// cache size is unknown: it counts as full).
func (r *Replica) FreeCacheTokens(blockTokens int) int {
	return max(r.CacheTokens-r.IndexedBlocks*max(blockTokens, 1), 0)
}

// Serves reports whether replica i may serve req now: healthy, and in a
// jurisdiction the request allows.
func (l *LocalRegion) Serves(req *request.Request, i int) bool {
	r := &l.Replicas[i]
	j := r.Jurisdiction
	if j == "" {
		j = l.Jurisdiction
	}
	return r.Healthy && req.AllowedIn(j)
}

// Load is the replica's outstanding work in requests: the larger of what
// this balancer sent (exact, fresh) and what the engine reports (which
// includes other balancers' traffic, but is as old as the last scrape).
func (r *Replica) Load() int { return max(r.InFlight, r.Waiting+r.Running) }

// capacity is Capacity, or MaxInFlight when unknown.
func (r *Replica) capacity() int {
	if r.Capacity > 0 {
		return r.Capacity
	}
	return r.MaxInFlight
}

// Utilization is the replica's load over its capacity.
func (r *Replica) Utilization() float64 { return float64(r.Load()) / float64(max(r.capacity(), 1)) }

// MaxDispatchKVUsage is the KV-cache usage above which a replica is
// treated as full: a new prompt would wait in the engine for blocks.
const MaxDispatchKVUsage = 0.95

// HasRoom reports whether the balancer may dispatch to the replica now: it
// is healthy, its own waiting queue is empty, its KV cache is not full, and
// it is under its in-flight cap. This is "selective pushing": a request
// that cannot start at once stays in the balancer's queue, where it can
// still be routed elsewhere.
func (r *Replica) HasRoom() bool {
	return r.Healthy && r.Waiting == 0 && r.KVUsage < MaxDispatchKVUsage && (r.MaxInFlight <= 0 || r.InFlight < r.MaxInFlight)
}

// QueueWait estimates how long a request arriving now waits before a local
// replica starts it: nothing if a replica has room and nobody is queued,
// otherwise one PerRequestWait for each request ahead of it (in the
// balancer and in the engines' own queues), and at least one.
func (l *LocalRegion) QueueWait() time.Duration {
	ahead := l.Queued
	room := false
	for i := range l.Replicas {
		r := &l.Replicas[i]
		if r.Healthy {
			ahead += r.Waiting
			room = room || r.HasRoom()
		}
	}
	if room && l.Queued == 0 {
		return 0
	}
	return time.Duration(max(ahead, 1)) * l.PerRequestWait
}

// Load is the region's utilization: outstanding requests (in flight and
// queued) over dispatch slots. Above 1 means a queue.
func (l *LocalRegion) Load() float64 {
	slots, outstanding := 0, l.Queued
	for i := range l.Replicas {
		r := &l.Replicas[i]
		if !r.Healthy {
			continue
		}
		slots += max(r.capacity(), 1)
		outstanding += r.Load()
	}
	if slots == 0 {
		return 0
	}
	return float64(outstanding) / float64(slots)
}

// PeerRegion is another region as its gossip last described it.
type PeerRegion struct {
	Name         string
	Jurisdiction string
	// Healthy is false when the region has no live nodes; Left when they
	// all left the mesh (nothing is worth holding for it).
	Healthy, Left bool
	// DataAge is how old the newest load summary from the region is.
	DataAge time.Duration
	RTT     time.Duration // smoothed round-trip time to the region's proxy
	// GateOpen is the WAN gate: false while the link is too slow or lossy.
	GateOpen   bool
	GateReason string
	QueueWait  time.Duration // the region's own queue-wait estimate
	Queued     int           // requests held in the region's balancers
	Replicas   int           // healthy replicas
	Slots      int           // dispatch slots over those replicas
	// Outstanding is in-flight plus queued requests in the region,
	// including InFlightFromUs.
	Outstanding int
	// QueuedTokens is the prompt tokens of the region's outstanding
	// requests, as its summary said.
	QueuedTokens int
	// PrefillTokens is the prefill work queued at the region's least
	// busy replica, as its summary said.
	PrefillTokens int
	// InFlightFromUs is how many of this balancer's requests are in flight
	// at the region (forwarded and not finished); AwaitingFromUs how many
	// of those have not had their first token yet — the prefill a new
	// forward waits behind, and the slots this balancer has claimed there
	// since the region's summary.
	InFlightFromUs, AwaitingFromUs int
	// Offloading is how many requests the region itself has in flight at
	// its own peers: SkyWalker prices them as the region's own load.
	Offloading int
	// PrefixBlocks is how many leading blocks of the request the region's
	// digest probably holds.
	PrefixBlocks int
	Prefill      PrefillProfile
	// FreeCacheTokens and HitShare describe the region's cache as its
	// summary said: the most any healthy replica can still cache without
	// evicting, and the share of its prompt tokens served from cache (0
	// when unknown, and then no eviction is priced).
	FreeCacheTokens int
	HitShare        float64
	// Error is how this balancer's recent forwards to the region reached
	// their first tokens against the estimates they were chosen on
	// (learned by the balancer's region; unknown at first).
	Error ErrorSummary
}

// PrefixMatcher tells how many leading blocks of a request a peer
// probably holds; *digest.Digest is one.
type PrefixMatcher interface {
	MatchLength(blocks []uint64) int
}

// MatchPrefix sets PrefixBlocks from the peer's digest, but only for a
// peer the request could be sent to: matching costs probes, and a
// forwarded, non-resident or unhealthy peer's cache cannot help. Both
// drivers build the view through it. Callers pass no digest at all when
// they have none: a nil *digest.Digest is not a nil PrefixMatcher.
func (p *PeerRegion) MatchPrefix(req *request.Request, digest PrefixMatcher) {
	if digest != nil && p.Healthy && !req.StaysHere() && req.AllowedIn(p.Jurisdiction) {
		p.PrefixBlocks = digest.MatchLength(req.Blocks)
	}
}

// Load is the region's utilization, as LocalRegion.Load.
func (p *PeerRegion) Load() float64 {
	if p.Slots <= 0 {
		return 0
	}
	return float64(p.Outstanding) / float64(p.Slots)
}

// loadWithOutflow is Load counting the requests the region is itself
// sending to its peers as its own: a region that offloads is short of
// capacity, and work sent to it would displace work it then sends on.
func (p *PeerRegion) loadWithOutflow() float64 {
	if p.Slots <= 0 {
		return 0
	}
	return float64(p.Outstanding+max(p.Offloading, 0)) / float64(p.Slots)
}

// PerReplicaLoad is the region's outstanding requests per healthy replica,
// comparable with Replica.Load.
func (p *PeerRegion) PerReplicaLoad() float64 {
	if p.Replicas <= 0 {
		return 0
	}
	return float64(p.Outstanding) / float64(p.Replicas)
}
