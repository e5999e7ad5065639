package proxy

import (
	"context"
	"net/url"
	"slices"
	"sync"
	"time"

	"skywalker/internal/balancer"
	"skywalker/internal/digest"
	"skywalker/internal/mesh"
	"skywalker/internal/policy"
	"skywalker/internal/prefix"
	"skywalker/internal/request"
)

// PeerSource is the mesh as the router reads it; *mesh.Mesh is one.
type PeerSource interface {
	// Peers returns a consistent snapshot without blocking on the network.
	Peers() []mesh.Peer
}

// replica is one local inference server. Fields are guarded by Router.mu.
type replica struct {
	name     string
	url      *url.URL
	target   prefix.Target
	healthy  bool
	failures int // consecutive request or health-check failures
	passes   int // consecutive passed health checks while ejected
	inflight int
	metrics  engineMetrics
	models   []string
}

// Router is where a request is routed: it owns the region's balancer, its
// replicas' state and prefix index, and builds the policy's view from them
// and the mesh. Every method is safe for concurrent use; one mutex guards
// everything the decision core reads, so each decision sees a consistent
// view, and the lock is held only for in-memory work.
type Router struct {
	mu       sync.Mutex
	cfg      Config
	bal      *balancer.Balancer
	index    *prefix.Index
	replicas []*replica
	service  *policy.EWMA
	prefill  policy.PrefillProfile
	mesh     PeerSource
	peers    []mesh.Peer // snapshot, refreshed by the pump loop
	view     policy.View
	peerAt   []int // view.Peers[i] is peers[peerAt[i]]
	matched  []int
	waiters  map[*request.Request]chan routed

	// forwarding counts this proxy's requests in flight at each peer
	// region. A peer's summary is always a little old; adding what we sent
	// since keeps a burst from herding onto the one peer that looked idle.
	forwarding map[string]int

	indexDirty bool
	digest     *digest.Digest
	digestGen  uint64
	recent     []Decision // ring of recent decisions, for /debug/skywalker
	recentNext int
}

// Decision is one routing outcome, as /debug/skywalker shows it.
type Decision struct {
	At     time.Time `json:"at"`
	ID     string    `json:"id"`
	Action string    `json:"action"`
	Region string    `json:"region"`
	Target string    `json:"target,omitempty"`
	Reason string    `json:"reason"`
	Waited string    `json:"waited,omitempty"`
	Error  string    `json:"error,omitempty"`
}

// newRouter returns a router over the given replica URLs.
func newRouter(cfg Config, pol policy.Policy, prefill policy.PrefillProfile, peers PeerSource) *Router {
	r := &Router{cfg: cfg, index: prefix.New(request.DefaultBlockBytes / request.BytesPerToken), service: policy.NewEWMA(0.05),
		prefill: prefill, mesh: peers, matched: make([]int, prefix.MaxTargets), waiters: map[*request.Request]chan routed{}, forwarding: map[string]int{},
		recent: make([]Decision, 64)}
	r.bal = balancer.New(pol, balancer.Config{MaxQueue: cfg.MaxQueue, MaxWait: cfg.MaxWait})
	return r
}

// defaultReplicaTokens is the prefix-index capacity assumed for a replica
// until its metrics report its KV cache size.
const defaultReplicaTokens = 32_000

// setReplicas makes the pool exactly urls, keeping the state of replicas
// that stay and forgetting those that left.
func (r *Router) setReplicas(urls []*url.URL) {
	r.mu.Lock()
	defer r.mu.Unlock()
	keep := map[string]bool{}
	for _, u := range urls {
		keep[u.String()] = true
	}
	kept := r.replicas[:0]
	for _, rp := range r.replicas {
		if keep[rp.url.String()] {
			kept = append(kept, rp)
			delete(keep, rp.url.String())
		} else {
			r.index.RemoveTarget(rp.target)
		}
	}
	r.replicas = kept
	for _, u := range urls {
		if !keep[u.String()] {
			continue
		}
		t, err := r.index.AddTarget(u.Host, defaultReplicaTokens)
		if err != nil {
			continue // over 64 replicas: the rest are not routed to
		}
		r.replicas = append(r.replicas, &replica{name: u.Host, url: u, target: t, healthy: true})
	}
	slices.SortFunc(r.replicas, func(a, b *replica) int {
		if a.name < b.name {
			return -1
		}
		if a.name > b.name {
			return 1
		}
		return 0
	})
}

// routed is a delivered outcome with its target resolved at delivery, while
// the view it was decided on is still current.
type routed struct {
	balancer.Outcome
	replica *replica   // Dispatch
	peer    *mesh.Peer // Forward
	// prefixBlocks is how many leading blocks the chosen replica was
	// believed to hold.
	prefixBlocks int
}

// Route submits req to the balancer and waits until it is dispatched,
// forwarded or rejected, or ctx ends (then the request is withdrawn).
func (r *Router) Route(ctx context.Context, req *request.Request) (routed, error) {
	ch := make(chan routed, 1)
	r.mu.Lock()
	r.waiters[req] = ch
	r.bal.Submit(time.Now(), req, r)
	r.mu.Unlock()
	select {
	case o := <-ch:
		if o.Err != nil {
			return o, o.Err
		}
		return o, nil
	case <-ctx.Done():
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.waiters, req)
		if r.bal.Cancel(req) {
			return routed{}, ctx.Err()
		}
		// Delivered just as the client left: take it, release it.
		select {
		case o := <-ch:
			if o.replica != nil {
				o.replica.inflight = max(o.replica.inflight-1, 0)
			}
			if o.peer != nil {
				r.forwarding[o.peer.Region] = max(r.forwarding[o.peer.Region]-1, 0)
			}
		default:
		}
		return routed{}, ctx.Err()
	}
}

// View implements balancer.Env. Called with r.mu held.
func (r *Router) View(req *request.Request) *policy.View {
	v := &r.view
	v.Local.Name, v.Local.Jurisdiction, v.Local.Prefill = r.cfg.Region, r.cfg.Jurisdiction, r.prefill
	r.index.Match(req.Blocks, r.matched)
	v.Local.Replicas = v.Local.Replicas[:0]
	running := 0
	for _, rp := range r.replicas {
		m := rp.metrics
		v.Local.Replicas = append(v.Local.Replicas, policy.Replica{Name: rp.name, Healthy: rp.healthy, Waiting: m.Waiting,
			Running: m.Running, InFlight: rp.inflight, MaxInFlight: r.cfg.MaxInFlight, KVUsage: m.KVUsage, PrefixBlocks: r.matched[rp.target]})
		if rp.healthy {
			running += max(m.Running, rp.inflight, 1)
		}
	}
	v.Local.PerRequestWait = policy.PerRequestWait(r.service.Value(), running)
	v.Peers = v.Peers[:0]
	r.peerAt = r.peerAt[:0]
	for i := range r.peers {
		p := &r.peers[i]
		pr := p.Policy()
		pr.Outstanding += r.forwarding[p.Region]
		if p.Digest != nil {
			pr.MatchPrefix(req, p.Digest)
		}
		v.Peers = append(v.Peers, pr)
		r.peerAt = append(r.peerAt, i)
	}
	return v
}

// Deliver implements balancer.Env. Called with r.mu held, right after the
// View the decision was made on.
func (r *Router) Deliver(o balancer.Outcome) {
	out := routed{Outcome: o}
	if o.Err == nil {
		switch o.Decision.Action {
		case policy.Dispatch:
			rp := r.replicas[o.Decision.Replica]
			out.prefixBlocks = r.view.Local.Replicas[o.Decision.Replica].PrefixBlocks
			rp.inflight++
			r.index.Insert(rp.target, o.Request.Blocks, nil)
			r.indexDirty = true
			out.replica = rp
		case policy.Forward:
			p := r.peers[r.peerAt[o.Decision.Peer]]
			out.peer = &p
			r.forwarding[p.Region]++
		}
	}
	r.record(o)
	if ch, ok := r.waiters[o.Request]; ok {
		delete(r.waiters, o.Request)
		ch <- out
	}
}

func (r *Router) record(o balancer.Outcome) {
	d := Decision{At: time.Now(), ID: o.Request.ID, Action: o.Decision.Action.String(), Region: o.Decision.Region, Reason: string(o.Decision.Reason)}
	if o.Waited > 0 {
		d.Waited = o.Waited.String()
	}
	switch {
	case o.Err != nil:
		d.Action, d.Error = "reject", o.Err.Message
	case o.Decision.Action == policy.Dispatch:
		d.Target = r.replicas[o.Decision.Replica].name
	}
	r.recent[r.recentNext%len(r.recent)] = d
	r.recentNext++
}

// done records the end of a request on a replica: its slot frees, its
// service time feeds the queue-wait estimate, and a failure counts toward
// passive ejection. Held requests are pumped.
func (r *Router) done(rp *replica, service time.Duration, failed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rp.inflight = max(rp.inflight-1, 0)
	if failed {
		rp.failures++
		if rp.failures >= r.cfg.EjectAfter && rp.healthy {
			rp.healthy = false
			rp.passes = 0
			r.index.Forget(rp.target) // a replica that fails may have restarted: its cache is gone
		}
	} else {
		rp.failures = 0
		r.service.Observe(service)
	}
	r.bal.PumpDepth(time.Now(), r, 1)
}

// forwardDone records the end of a request forwarded to region.
func (r *Router) forwardDone(region string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.forwarding[region] = max(r.forwarding[region]-1, 0)
	r.bal.PumpDepth(time.Now(), r, 1)
}

// pump refreshes the peers snapshot and re-routes held requests.
func (r *Router) pump() {
	var peers []mesh.Peer
	if r.mesh != nil {
		peers = r.mesh.Peers()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.peers = peers
	r.bal.Pump(time.Now(), r)
}

// Load implements mesh.Source: this node's load summary.
func (r *Router) Load() mesh.Load {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := mesh.Load{Queued: r.bal.Len(), Outstanding: r.bal.Len(), Prefill: r.prefill}
	local := policy.LocalRegion{Queued: r.bal.Len()}
	running := 0
	for _, rp := range r.replicas {
		l.Outstanding += rp.inflight
		if rp.healthy {
			l.Replicas++
			l.Slots += r.cfg.MaxInFlight
			running += max(rp.metrics.Running, rp.inflight, 1)
		}
		local.Replicas = append(local.Replicas, policy.Replica{Healthy: rp.healthy, Waiting: rp.metrics.Waiting, Running: rp.metrics.Running,
			InFlight: rp.inflight, MaxInFlight: r.cfg.MaxInFlight, KVUsage: rp.metrics.KVUsage})
	}
	local.PerRequestWait = policy.PerRequestWait(r.service.Value(), running)
	l.QueueWait = local.QueueWait()
	return l
}

// Digest implements mesh.Source: a digest of the prefix index, rebuilt
// (with a new generation) when the index changed since the last one.
func (r *Router) Digest() *digest.Digest {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.digest != nil && !r.indexDirty {
		return r.digest
	}
	capacity := uint(0)
	for _, rp := range r.replicas {
		capacity += uint(r.capacityTokens(rp) / r.index.BlockTokens())
	}
	r.digestGen++
	r.digest = digest.Build(r.index, r.cfg.Region, r.cfg.NodeID, r.digestGen, max(capacity, 1024), digest.DefaultFalsePositiveRate)
	r.indexDirty = false
	return r.digest
}

func (r *Router) capacityTokens(rp *replica) int {
	if rp.metrics.KVBlocks > 0 && rp.metrics.BlockSize > 0 {
		return rp.metrics.KVBlocks * rp.metrics.BlockSize
	}
	return defaultReplicaTokens
}
