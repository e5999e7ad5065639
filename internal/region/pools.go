package region

import (
	"fmt"
	"slices"
	"time"

	"skywalker/internal/apierr"
	"skywalker/internal/balancer"
	"skywalker/internal/digest"
	"skywalker/internal/policy"
	"skywalker/internal/request"
)

// Pools is one region's routing state for every model it serves: a
// Region — balancer, replicas, prefix index, estimators — per base model,
// its pool, so that a request for a model is routed, held and admitted
// among the replicas that serve that model only, against their own
// estimates. The pools share the region's prefix digest (their blocks are
// salted by model and adapter, request.PoolSalt) and its peers' snapshot,
// of which each pool sees the peers that serve its model, with their load
// for that model. A pool may have no replicas at all: it forwards its
// model's requests to the peers that serve it.
//
// A request goes to the pool of its request.Base; a model neither served
// here nor by any peer is refused (404). Not safe for concurrent use, like
// Region.
type Pools struct {
	configFor func(model string) Config
	policyFor func(model string) (policy.Policy, error)
	deliver   func(*Attempt)
	pools     map[string]*Region
	models    []string // the pools' models, sorted
	peers     []Peer
	digests   *digestPublisher
	peerBufs  map[string][]Peer // each pool's peers, rewritten in place
	share     bool              // tell the region's other nodes what is dispatched (siblings.go)
}

// NewPools returns a region with no pools. configFor gives a pool's
// configuration (its profile, its dispatch cap: a 70B model is not an 8B
// one), policyFor its policy; every attempt a pool delivers goes to
// deliver.
func NewPools(configFor func(model string) Config, policyFor func(model string) (policy.Policy, error), deliver func(*Attempt)) *Pools {
	return &Pools{configFor: configFor, policyFor: policyFor, deliver: deliver, pools: map[string]*Region{},
		digests: &digestPublisher{}, peerBufs: map[string][]Peer{}}
}

// Pool returns the pool of model, or nil.
func (p *Pools) Pool(model string) *Region { return p.pools[model] }

// Models lists the pools' models, sorted (a pool without replicas too).
func (p *Pools) Models() []string { return p.models }

// Each calls fn for every pool, in model order.
func (p *Pools) Each(fn func(model string, r *Region)) {
	for _, m := range p.models {
		fn(m, p.pools[m])
	}
}

// ensure returns model's pool, made empty if it has none.
func (p *Pools) ensure(model string) (*Region, error) {
	if r := p.pools[model]; r != nil {
		return r, nil
	}
	pol, err := p.policyFor(model)
	if err != nil {
		return nil, err
	}
	r, err := New(p.configFor(model), pol, p.deliver)
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
// Region.SetReplicas); the pools of models not in byModel lose their
// replicas (they keep forwarding to peers that serve them).
func (p *Pools) SetReplicas(byModel map[string][]ReplicaSpec) error {
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

// Serves reports where model is served: by replicas of this region, and
// by some peer region (healthy or not, as last heard).
func (p *Pools) Serves(model string) (here, peers bool) {
	if r := p.pools[model]; r != nil && len(r.replicas) > 0 {
		here = true
	}
	for i := range p.peers {
		if p.peers[i].Serves(model) {
			return here, true
		}
	}
	return here, false
}

// SetPeers replaces what the region knows of its peers; each pool sees
// those that serve its model, with their load for it.
func (p *Pools) SetPeers(peers []Peer) {
	p.peers = peers
	for _, m := range p.models {
		p.pools[m].SetPeers(p.peersFor(m))
	}
}

// peersFor is the peers that serve model, each with its load for it (in
// a buffer the pool keeps: a Region reads its peers only until the next
// SetPeers).
func (p *Pools) peersFor(model string) []Peer {
	out := p.peerBufs[model][:0]
	for i := range p.peers {
		if q, ok := p.peers[i].ForModel(model); ok {
			out = append(out, q)
		}
	}
	p.peerBufs[model] = out
	return out
}

// Peers returns the last peers' snapshot, as the mesh gave it.
func (p *Pools) Peers() []Peer { return p.peers }

// errNoSuchModel refuses a request for a model no region serves.
func errNoSuchModel(model string, served []string) *apierr.Error {
	return &apierr.Error{Code: apierr.ModelNotFound, Param: "model",
		Message: fmt.Sprintf("the model %q is not served in this region or by any peer (served: %v)", model, served)}
}

// Submit routes a new request to the pool of its base model, made (empty)
// if only peers serve it. A model nobody serves is delivered at once as a
// 404 rejection.
func (p *Pools) Submit(now time.Time, req *request.Request) {
	here, peers := p.Serves(req.Base)
	var r *Region
	var err error
	if here || peers {
		r, err = p.ensure(req.Base)
	}
	if r == nil {
		e := errNoSuchModel(req.Base, p.ServedModels())
		if err != nil {
			e = &apierr.Error{Code: apierr.Internal, Message: err.Error()}
		}
		p.deliver(&Attempt{Outcome: balancer.Outcome{Request: req, Err: e, Submitted: now}})
		return
	}
	r.Submit(now, req)
}

// ServedModels lists the models served here or by a peer, sorted.
func (p *Pools) ServedModels() []string {
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
func (p *Pools) Pump(now time.Time) int {
	n := 0
	for _, m := range p.models {
		n += p.pools[m].Pump(now)
	}
	return n
}

// Expire rejects held requests past their deadline, in every pool.
func (p *Pools) Expire(now time.Time) int {
	n := 0
	for _, m := range p.models {
		n += p.pools[m].Expire(now)
	}
	return n
}

// Flush answers every held request of every pool with e.
func (p *Pools) Flush(now time.Time, e *apierr.Error) int {
	n := 0
	for _, m := range p.models {
		n += p.pools[m].Flush(now, e)
	}
	return n
}

// Cancel withdraws a held request whose client left (see Region.Cancel).
func (p *Pools) Cancel(req *request.Request) bool {
	if r := p.pools[req.Base]; r != nil {
		return r.Cancel(req)
	}
	return false
}

// Queued is the number of held requests in every pool.
func (p *Pools) Queued() int {
	n := 0
	for _, m := range p.models {
		n += p.pools[m].Queued()
	}
	return n
}

// NextDeadline is the earliest deadline of a held request in any pool.
func (p *Pools) NextDeadline() (time.Time, bool) {
	var at time.Time
	found := false
	for _, m := range p.models {
		if d, ok := p.pools[m].NextDeadline(); ok && (!found || d.Before(at)) {
			at, found = d, true
		}
	}
	return at, found
}

// Digest is the digest of every pool's prefix index (see Region.Digest).
func (p *Pools) Digest() *digest.Digest {
	if len(p.digests.sources) == 0 {
		return nil
	}
	return p.digests.digest()
}

// Load is the region's summary: each pool with replicas under its model
// (Load.Models), and their aggregate (for peers of an earlier release,
// and for reading at a glance).
func (p *Pools) Load() Load {
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
func (p *Pools) distinctReplicas() int {
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
func (p *Pools) ShareDispatches(on bool) {
	p.share = on
	for _, r := range p.pools {
		r.ShareDispatches(on)
	}
}

// TakeDispatches returns every pool's dispatches and ends to tell since
// the last call.
func (p *Pools) TakeDispatches() []SiblingDispatch {
	return byModel(p, (*Region).TakeDispatches, func(d *SiblingDispatch, m string) { d.Model = m })
}

// byModel gathers what each pool's list returns, in model order, each
// item labelled with its model by set.
func byModel[T any](p *Pools, list func(*Region) []T, set func(*T, string)) []T {
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
func (p *Pools) SiblingDispatched(from string, told []SiblingDispatch) {
	for _, d := range told {
		if r := p.pools[d.Model]; r != nil {
			r.SiblingDispatched(from, d)
		}
	}
}

// ForReplica calls fn for the replica named name in every pool it serves.
func (p *Pools) ForReplica(name string, fn func(r *Region, rp *Replica)) {
	for _, m := range p.models {
		r := p.pools[m]
		if rp := r.Replica(name); rp != nil {
			fn(r, rp)
		}
	}
}

// HealthyReplicas counts the replicas in service, one serving two models
// once.
func (p *Pools) HealthyReplicas() int { return p.distinctReplicas() }

// ReplicaStates lists every pool's replicas' bookkeeping, in model order.
func (p *Pools) ReplicaStates() []ReplicaState {
	return byModel(p, (*Region).ReplicaStates, func(s *ReplicaState, m string) { s.Model = m })
}

// Held lists the held requests of every pool.
func (p *Pools) Held(now time.Time) []balancer.HeldRequest {
	var out []balancer.HeldRequest
	for _, m := range p.models {
		out = append(out, p.pools[m].Held(now)...)
	}
	return out
}

// HeldBy calls fn for every (class, tenant) with requests held in a pool.
func (p *Pools) HeldBy(fn func(class request.Class, tenant string, n int)) {
	for _, m := range p.models {
		p.pools[m].HeldBy(fn)
	}
}
