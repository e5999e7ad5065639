package region

import (
	"fmt"
	"skywalker/internal/kvevents"
	"slices"
	"strings"
	"time"

	"skywalker/internal/apierr"
	"skywalker/internal/balancer"
	"skywalker/internal/digest"
	"skywalker/internal/policy"
	"skywalker/internal/request"
)

// Node is one proxy's (or one simulated router's) routing state for every
// model it serves, and the only API its drivers use (see the package
// comment): a pool — balancer, replicas, prefix index, estimators — per
// base model, so that a request for a model is routed, held and admitted
// among the replicas that serve that model only, against their own
// estimates. The pools share the region's prefix digest (their blocks are
// salted by model and adapter, request.PoolSalt) and its peers' snapshot,
// of which each pool sees the peers that serve its model, with their load
// for that model. A pool may have no replicas at all: it forwards its
// model's requests to the peers that serve it.
//
// A request goes to the pool of its request.Base; a model neither served
// here nor by any peer is refused (404). Not safe for concurrent use: the
// proxy holds it under one lock, the simulator is single-threaded.
type Node struct {
	configFor func(model string) Config
	policyFor func(model string) (policy.Policy, error)
	deliver   func(*Attempt)
	pools     map[string]*pool
	models    []string // the pools' models, sorted
	peers     []Peer
	digests   *digestPublisher
	peerBufs  map[string][]Peer // each pool's peers, rewritten in place
	share     bool              // tell the region's other nodes what is dispatched (siblings.go)
}

// NewNode returns a region with no pools. configFor gives a pool's
// configuration (its profile, its dispatch cap: a 70B model is not an 8B
// one), policyFor its policy; every attempt a pool delivers goes to
// deliver.
func NewNode(configFor func(model string) Config, policyFor func(model string) (policy.Policy, error), deliver func(*Attempt)) *Node {
	return &Node{configFor: configFor, policyFor: policyFor, deliver: deliver, pools: map[string]*pool{},
		digests: &digestPublisher{}, peerBufs: map[string][]Peer{}}
}

// ensure returns model's pool, made empty if it has none.
func (p *Node) ensure(model string) (*pool, error) {
	if r := p.pools[model]; r != nil {
		return r, nil
	}
	pol, err := p.policyFor(model)
	if err != nil {
		return nil, err
	}
	r, err := newPool(p.configFor(model), pol, p.deliver)
	if err != nil {
		return nil, err
	}
	r.digests = p.digests
	r.ShareDispatches(p.share)
	p.digests.sources = append(p.digests.sources, r)
	p.digests.stale = true
	p.pools[model] = r
	p.models = append(p.models, model)
	slices.Sort(p.models)
	r.SetPeers(p.peersFor(model))
	return r, nil
}

// SetReplicas makes each pool's replica table exactly its specs (see
// pool.SetReplicas); the pools of models not in byModel lose their
// replicas (they keep forwarding to peers that serve them).
func (p *Node) SetReplicas(byModel map[string][]ReplicaSpec) error {
	var errs []error
	for model, specs := range byModel {
		r, err := p.ensure(model)
		if err == nil {
			err = r.SetReplicas(specs)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("model %q: %w", model, err))
		}
	}
	for _, m := range p.models {
		if _, ok := byModel[m]; !ok {
			_ = p.pools[m].SetReplicas(nil)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%v", errs)
	}
	return nil
}

// serves reports where model is served: by replicas of this region, and
// by some peer region (healthy or not, as last heard).
func (p *Node) serves(model string) (here, peers bool) {
	if r := p.pools[model]; r != nil && len(r.replicas) > 0 {
		here = true
	}
	for i := range p.peers {
		if p.peers[i].serves(model) {
			return here, true
		}
	}
	return here, false
}

// SetPeers replaces what the region knows of its peers; each pool sees
// those that serve its model, with their load for it.
func (p *Node) SetPeers(peers []Peer) {
	p.peers = peers
	for _, m := range p.models {
		p.pools[m].SetPeers(p.peersFor(m))
	}
}

// peersFor is the peers that serve model, each with its load for it (in
// a buffer the pool keeps: a pool reads its peers only until the next
// SetPeers).
func (p *Node) peersFor(model string) []Peer {
	out := p.peerBufs[model][:0]
	for i := range p.peers {
		if q, ok := p.peers[i].forModel(model); ok {
			out = append(out, q)
		}
	}
	p.peerBufs[model] = out
	return out
}

// Peers returns the last peers' snapshot, as the mesh gave it.
func (p *Node) Peers() []Peer { return p.peers }

// errNoSuchModel refuses a request for a model no region serves.
func errNoSuchModel(model string, served []string) *apierr.Error {
	return &apierr.Error{Code: apierr.ModelNotFound, Param: "model",
		Message: fmt.Sprintf("the model %q is not served in this region or by any peer (served: %v)", model, served)}
}

// Submit routes a new request to the pool of its base model, made (empty)
// if only peers serve it. A model nobody serves is delivered at once as a
// 404 rejection.
func (p *Node) Submit(now time.Time, req *request.Request) {
	here, peers := p.serves(req.Base)
	var r *pool
	var err error
	if here || peers {
		r, err = p.ensure(req.Base)
	}
	if r == nil {
		e := errNoSuchModel(req.Base, p.servedModels())
		if err != nil {
			e = &apierr.Error{Code: apierr.Internal, Message: err.Error()}
		}
		p.deliver(&Attempt{Outcome: balancer.Outcome{Request: req, Err: e, Submitted: now}})
		return
	}
	r.Submit(now, req)
}

// servedModels lists the models served here or by a peer, sorted.
func (p *Node) servedModels() []string {
	var out []string
	for _, m := range p.models {
		if len(p.pools[m].replicas) > 0 {
			out = append(out, m)
		}
	}
	for i := range p.peers {
		for _, ml := range p.peers[i].Load.Models {
			out = append(out, ml.Model)
		}
	}
	out = slices.DeleteFunc(out, func(m string) bool { return m == "" }) // the replicas whose models are not known
	slices.Sort(out)
	return slices.Compact(out)
}

// Pump re-routes the held requests of every pool.
func (p *Node) Pump(now time.Time) int {
	n := 0
	for _, m := range p.models {
		n += p.pools[m].Pump(now)
	}
	return n
}

// Expire rejects held requests past their deadline, in every pool.
func (p *Node) Expire(now time.Time) int {
	n := 0
	for _, m := range p.models {
		n += p.pools[m].Expire(now)
	}
	return n
}

// Flush answers every held request of every pool with e.
func (p *Node) Flush(now time.Time, e *apierr.Error) int {
	n := 0
	for _, m := range p.models {
		n += p.pools[m].Flush(now, e)
	}
	return n
}

// Cancel withdraws a held request whose client left (see pool.Cancel).
func (p *Node) Cancel(req *request.Request) bool {
	if r := p.pools[req.Base]; r != nil {
		return r.Cancel(req)
	}
	return false
}

// NextDeadline is the earliest deadline of a held request in any pool.
func (p *Node) NextDeadline() (time.Time, bool) {
	var at time.Time
	found := false
	for _, m := range p.models {
		if d, ok := p.pools[m].NextDeadline(); ok && (!found || d.Before(at)) {
			at, found = d, true
		}
	}
	return at, found
}

// Digest is the digest of every pool's prefix index (see pool.Digest).
func (p *Node) Digest() *digest.Digest {
	if len(p.digests.sources) == 0 {
		return nil
	}
	return p.digests.digest()
}

// Load is the region's summary: each pool with replicas under its model
// (Load.Models), and their aggregate (for peers of an earlier release,
// and for reading at a glance).
func (p *Node) Load() Load {
	var total Load
	for _, m := range p.models {
		r := p.pools[m]
		if len(r.replicas) == 0 && r.Queued() == 0 {
			continue
		}
		l := r.Load()
		if len(total.Models) == 0 {
			total = l
		} else {
			total.QueueWait = max(total.QueueWait, l.QueueWait)
			total.Queued += l.Queued
			total.Slots += l.Slots
			total.Outstanding += l.Outstanding
			total.QueuedTokens += l.QueuedTokens
			total.PrefillTokens = min(total.PrefillTokens, l.PrefillTokens)
			total.Offloading += l.Offloading
			total.FreeCacheTokens = max(total.FreeCacheTokens, l.FreeCacheTokens)
			total.HitShare += l.HitShare
		}
		l.Model = m
		total.Models = append(total.Models, l)
	}
	if n := len(total.Models); n > 1 {
		total.HitShare /= float64(n)
	}
	total.Model = ""
	total.Replicas = p.distinctReplicas()
	return total
}

// distinctReplicas counts the healthy replicas of every pool, a replica
// that serves two models once.
func (p *Node) distinctReplicas() int {
	seen := map[string]bool{}
	for _, m := range p.models {
		for _, rp := range p.pools[m].replicas {
			if rp.healthy {
				seen[rp.name] = true
			}
		}
	}
	return len(seen)
}

// ShareDispatches turns telling the region's other nodes what is
// dispatched on or off, in every pool (siblings.go).
func (p *Node) ShareDispatches(on bool) {
	p.share = on
	for _, r := range p.pools {
		r.ShareDispatches(on)
	}
}

// TakeDispatches returns every pool's dispatches and ends to tell since
// the last call.
func (p *Node) TakeDispatches() []SiblingDispatch {
	return byModel(p, (*pool).TakeDispatches, func(d *SiblingDispatch, m string) { d.Model = m })
}

// byModel gathers what each pool's list returns, in model order, each
// item labelled with its model by set.
func byModel[T any](p *Node, list func(*pool) []T, set func(*T, string)) []T {
	var out []T
	for _, m := range p.models {
		for _, v := range list(p.pools[m]) {
			set(&v, m)
			out = append(out, v)
		}
	}
	return out
}

// SiblingDispatched applies what node from, another node of this region,
// told, each in its model's pool.
func (p *Node) SiblingDispatched(from string, told []SiblingDispatch) {
	for _, d := range told {
		if r := p.pools[d.Model]; r != nil {
			r.SiblingDispatched(from, d)
		}
	}
}

// forReplica calls fn for the replica named name in every pool it
// serves.
func (p *Node) forReplica(name string, fn func(r *pool, rp *replica)) {
	for _, m := range p.models {
		r := p.pools[m]
		if rp := r.Replica(name); rp != nil {
			fn(r, rp)
		}
	}
}

// ScrapeMark is where a replica's counters stood, in each pool it
// serves, when a scrape of its engine began (see Node.MarkScrape).
type ScrapeMark map[*replica]scrapeMark

// MarkScrape is called as a scrape of the named replica's engine begins;
// the mark goes to Scraped when the scrape lands.
func (p *Node) MarkScrape(name string) ScrapeMark {
	marks := ScrapeMark{}
	p.forReplica(name, func(r *pool, rp *replica) { marks[rp] = r.MarkScrape(rp) })
	return marks
}

// Scraped records one scrape of the named replica's engine, in every pool
// it serves, that began at mark (nil: a scrape that took no time, the
// simulator's; a pool the replica joined while the scrape was out counts
// it so too). A failed scrape passes the zero Metrics: the engine's queue
// is then unknown and the replica is balanced on its requests in flight.
func (p *Node) Scraped(name string, m Metrics, mark ScrapeMark) {
	p.forReplica(name, func(r *pool, rp *replica) {
		at, ok := mark[rp]
		if !ok {
			at = r.MarkScrape(rp)
		}
		r.ScrapedSince(rp, m, at)
	})
}

// HealthChecked records one active health check of the named replica, in
// every pool it serves.
func (p *Node) HealthChecked(name string, ok bool) {
	p.forReplica(name, func(r *pool, rp *replica) { r.HealthChecked(rp, ok) })
}

// Healthy reports whether the named replica is in service in some pool.
func (p *Node) Healthy(name string) bool {
	healthy := false
	p.forReplica(name, func(_ *pool, rp *replica) { healthy = healthy || rp.healthy })
	return healthy
}

// EngineEvents applies a batch of the named replica's KV events,
// published by its data-parallel rank rank and heard at now, in every
// pool it serves (see pool.EngineEvents).
func (p *Node) EngineEvents(now time.Time, name string, rank int, events []kvevents.Event) {
	p.forReplica(name, func(r *pool, rp *replica) { r.EngineEvents(now, rp, rank, events) })
}

// EngineStream is what became of a replica's stream of KV events.
type EngineStream int

const (
	// StreamRestarted: the engine restarted (its events' sequence began
	// again): its cache is empty.
	StreamRestarted EngineStream = iota + 1
	// StreamLost: its events could not be kept whole (a gap no replay
	// filled, a batch that could not be read): its index falls back to
	// belief, bounded by its cache, until rebuilt.
	StreamLost
)

// EngineStreamChanged records what became of the named replica's KV
// events, in every pool it serves.
func (p *Node) EngineStreamChanged(name string, what EngineStream) {
	p.forReplica(name, func(r *pool, rp *replica) {
		switch what {
		case StreamRestarted:
			r.EngineRestarted(rp)
		case StreamLost:
			r.EngineEventsLost(rp)
		}
	})
}

// Explain returns a copy of the view the policy of req's pool would
// route it by now, and the decision it would make, without routing it:
// for explanations and the drivers' parity test. A model no pool serves
// gets an empty view and a rejection.
func (p *Node) Explain(req *request.Request) (policy.View, policy.Decision) {
	r := p.pools[req.Base]
	if r == nil {
		return policy.View{}, policy.Decision{Action: policy.Reject, Reason: policy.ReasonNoRegion}
	}
	v := r.View(req)
	v.Local.Queued, v.Local.Held = r.bal.Len(), r.bal.Len()
	d := r.bal.Policy().Route(req, v)
	out := policy.View{Local: v.Local, Peers: slices.Clone(v.Peers)}
	out.Local.Replicas = slices.Clone(v.Local.Replicas)
	return out, d
}

// Flow is a class and tenant of requests.
type Flow struct {
	Class  request.Class
	Tenant string
}

// Snapshot is a copy of a node's state, for the readers that need it
// whole: debugging endpoints, metrics, the drivers' tests. Nothing in it
// is shared with the node.
type Snapshot struct {
	Models    []string // the pools' models, sorted
	Queued    int      // held requests, in every pool
	Held      []balancer.HeldRequest
	HeldBy    map[Flow]int // held requests by flow
	Replicas  []ReplicaState
	Peers     []Peer
	PeerTrust map[string]string // why each distrusted or unproven peer is closed to forwarding
}

// Snapshot copies the node's state at now.
func (p *Node) Snapshot(now time.Time) Snapshot {
	s := Snapshot{Models: slices.Clone(p.models), Peers: slices.Clone(p.peers), HeldBy: map[Flow]int{}, PeerTrust: map[string]string{}}
	for _, m := range p.models {
		r := p.pools[m]
		s.Queued += r.Queued()
		s.Held = append(s.Held, r.Held(now)...)
		r.HeldBy(func(class request.Class, tenant string, n int) { s.HeldBy[Flow{class, tenant}] += n })
		for _, st := range r.ReplicaStates() {
			st.Model = m
			s.Replicas = append(s.Replicas, st)
		}
		for peer, why := range r.PeerTrust() {
			s.PeerTrust[peer] = why
		}
	}
	return s
}

// Resolve names the pool that serves model (aliases already resolved):
// its base model, and the LoRA adapter when model is one. A model served
// here or by a peer is its own base; an adapter goes to its parent's pool
// (parentOf: the base model whose replicas list the adapter, "" if none
// does); a request that names no model goes to the one model this region
// serves. Anything else goes to the replicas whose models are not known
// yet (base ""), if there are any, else it is refused: 404 naming the
// models that are served, or 400 when the model is missing and several
// are served.
func (p *Node) Resolve(model string, parentOf func(adapter string) string) (base, adapter string, err *apierr.Error) {
	unknownHere, _ := p.serves("")
	if model == "" {
		var local []string
		for _, m := range p.models {
			if here, _ := p.serves(m); here && m != "" {
				local = append(local, m)
			}
		}
		if len(local) == 1 {
			return local[0], "", nil
		}
		if len(local) > 1 {
			return "", "", &apierr.Error{Code: apierr.InvalidRequest, Param: "model",
				Message: fmt.Sprintf("the request names no model and this region serves several: %s", strings.Join(p.servedModels(), ", "))}
		}
	} else {
		if here, peers := p.serves(model); here || peers {
			return model, "", nil
		}
		if parent := parentOf(model); parent != "" {
			return parent, model, nil
		}
	}
	if unknownHere {
		return "", "", nil
	}
	return "", "", &apierr.Error{Code: apierr.ModelNotFound, Param: "model",
		Message: fmt.Sprintf("the model %q is not served here or by any peer region (served: %s)", model, strings.Join(p.servedModels(), ", "))}
}
