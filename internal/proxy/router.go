package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"skywalker/internal/apierr"
	"skywalker/internal/digest"
	"skywalker/internal/mesh"
	"skywalker/internal/policy"
	"skywalker/internal/region"
	"skywalker/internal/request"
)

// PeerSource is the mesh as the router reads it; *mesh.Mesh is one.
type PeerSource interface {
	// Peers returns a consistent snapshot without blocking on the network.
	Peers() []region.Peer
}

// replica is the HTTP side of one local inference server: where it is and
// which models it serves. Its routing state is a region.Replica in the
// pool of each model it serves.
type replica struct {
	host   string // its name in the pools: host:port
	url    *url.URL
	models atomic.Pointer[[]modelCard] // nil until /v1/models answered
	scrape scrapeState                 // owned by the scrape loop (one round at a time)
	// answered is when the replica last answered a scrape (any status),
	// in Unix nanoseconds: the health loop tells slow from down by it.
	answered atomic.Int64
}

func (rp *replica) name() string { return rp.host }

// Router is where a request is routed: one mutex around the region core
// (internal/region: a pool per model, each owning its balancer, its
// replicas' state and prefix index, and the peers' snapshot, and building
// every policy view). The router adds only what HTTP needs: replicas'
// URLs and which models they serve, waiting handlers, and a ring of
// recent decisions. Every method is safe for concurrent use, and the lock
// is held only for in-memory work.
type Router struct {
	mu        sync.Mutex
	lockCount atomic.Int64 // acquisitions of mu, ever (see lock)
	cfg       Config
	core      *region.Node
	replicas  []*replica // sorted by host
	mesh      PeerSource
	waiters   map[*request.Request]*waiter
	// unanswered are the attempts at each replica still waiting for their
	// first byte: when the replica is ejected they are ended at once and
	// retried elsewhere, not left to their own timeout (minutes, for a
	// response that is not streamed).
	unanswered map[string]map[*region.Attempt]context.CancelCauseFunc
	now        func() time.Time

	recent     []Decision // ring of recent decisions, for /debug/skywalker
	recentNext int
	draining   bool                  // the node is shutting down (published in its load summary)
	sharing    bool                  // telling the region's other proxies what is dispatched (region/siblings.go)
	observe    func(*region.Attempt) // every attempt delivered, under mu (metrics, logs)
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
	waited time.Duration
}

// RouterOptions are a router's collaborators.
type RouterOptions struct {
	// Policy routes every model's pool, unless PolicyFor gives a pool
	// its own (its profile's costs).
	Policy    policy.Policy
	PolicyFor func(model string) (policy.Policy, error)
	Peers     PeerSource       // nil for a single region; SetPeers attaches it later
	Clock     func() time.Time // default time.Now
	// Observe, if set, sees every attempt the core delivers, once, with
	// the router's lock held: it must not call back into the router.
	Observe func(*region.Attempt)
	// OnDistrust, if set, is told when a peer region becomes distrusted
	// (region.Config.OnDistrust), with the router's lock held.
	OnDistrust func(peer, reason string)
}

// NewRouter returns a router for cfg (validated) with no replicas.
func NewRouter(cfg Config, opts RouterOptions) (*Router, error) {
	r := &Router{cfg: cfg, mesh: opts.Peers, waiters: map[*request.Request]*waiter{}, unanswered: map[string]map[*region.Attempt]context.CancelCauseFunc{}, now: opts.Clock, recent: make([]Decision, 64),
		observe: opts.Observe}
	if r.now == nil {
		r.now = time.Now
	}
	policyFor := opts.PolicyFor
	if policyFor == nil {
		if opts.Policy == nil {
			return nil, errors.New("router: a policy is required")
		}
		policyFor = func(string) (policy.Policy, error) { return opts.Policy, nil }
	}
	r.core = region.NewNode(func(model string) region.Config {
		rc := cfg.RegionConfigFor(model)
		rc.OnDistrust = opts.OnDistrust
		return rc
	}, policyFor, r.delivered)
	return r, nil
}

// SetReplicas makes the pool exactly urls (sorted by host), keeping the
// state of replicas that stay and forgetting those that left; each goes
// to the pools of the models it serves (see placeReplicas).
func (r *Router) SetReplicas(urls []*url.URL) error {
	urls = slices.Clone(urls)
	slices.SortFunc(urls, func(a, b *url.URL) int { return strings.Compare(a.Host, b.Host) })
	urls = slices.CompactFunc(urls, func(a, b *url.URL) bool { return a.Host == b.Host })
	r.lock()
	defer r.mu.Unlock()
	byHost := map[string]*replica{}
	for _, rp := range r.replicas {
		byHost[rp.host] = rp
	}
	r.replicas = r.replicas[:0]
	for _, u := range urls {
		rp := byHost[u.Host]
		if rp == nil {
			rp = &replica{host: u.Host}
		}
		rp.url = u
		r.replicas = append(r.replicas, rp)
	}
	return r.placeReplicas()
}

// placeReplicas puts every replica in the pool of each model it serves:
// those the operator pinned it to (model_pools), else the base models its
// /v1/models lists (an adapter's card names its base as parent); a
// replica whose models are not known yet goes to the pool of the unnamed
// model "", which serves what no known pool does. Called with mu held,
// after the replicas or their models changed.
func (r *Router) placeReplicas() error {
	byModel := map[string][]region.ReplicaSpec{}
	for _, rp := range r.replicas {
		for _, m := range r.modelsOf(rp) {
			byModel[m] = append(byModel[m], region.ReplicaSpec{Name: rp.host})
		}
	}
	return r.core.SetReplicas(byModel)
}

// modelsOf is the base models rp serves (see placeReplicas).
func (r *Router) modelsOf(rp *replica) []string {
	var out []string
	for model, urls := range r.cfg.ModelPools {
		for _, u := range urls {
			if pu, err := url.Parse(u); err == nil && pu.Host == rp.host {
				out = append(out, model)
			}
		}
	}
	if len(out) > 0 {
		slices.Sort(out)
		return out
	}
	cards := rp.models.Load()
	if cards == nil {
		return []string{""}
	}
	for _, c := range *cards {
		if c.Parent == "" {
			out = append(out, c.ID)
		}
	}
	if len(out) == 0 {
		return []string{""}
	}
	return out
}

// modelsLearned places the replicas again after rp's /v1/models answered
// with a different list.
func (r *Router) modelsLearned() error {
	r.lock()
	defer r.mu.Unlock()
	return r.placeReplicas()
}

// do runs fn on the router's node, under the router's lock: the one way
// code outside this file reaches the core. fn must not block or call
// back into the router.
func (r *Router) do(fn func(n *region.Node)) {
	r.lock()
	defer r.mu.Unlock()
	fn(r.core)
}

// lock takes the router's lock, counting how often (lockCount: a served
// request's budget is held by a test). Every acquisition is in this file
// (internal/arch holds that).
func (r *Router) lock() {
	r.mu.Lock()
	r.lockCount.Add(1)
}

// replicaOf returns the HTTP side of a core replica. Called with r.mu held.
func (r *Router) replicaOf(name string) *replica {
	i, ok := slices.BinarySearchFunc(r.replicas, name, func(rp *replica, host string) int { return strings.Compare(rp.host, host) })
	if !ok {
		return nil
	}
	return r.replicas[i]
}

// routed is a delivered attempt, with what the proxy needs to run it.
type routed struct {
	*region.Attempt
	replica *replica // Dispatch
	// ctx is the attempt's own context, under the client's: cancelled
	// (cancel) when its first byte is overdue, when its replica is ejected
	// while it waits (errReplicaEjected), when its stream stalls, and when
	// it ends. Nil for a rejection.
	ctx    context.Context
	cancel context.CancelCauseFunc
	// timeout is the core's first-token timeout as the attempt was
	// delivered (region.Attempt.FirstTokenTimeout).
	timeout time.Duration
}

// Route submits req to the balancer and waits until it is dispatched,
// forwarded or rejected, or ctx ends (then the request is withdrawn).
func (r *Router) Route(ctx context.Context, req *request.Request) (routed, error) {
	o, _, err := r.await(ctx, req, func() region.Next {
		r.core.Submit(r.now(), req)
		return region.Next{Retry: true} // its attempt is delivered
	})
	return o, err
}

// Answered reports the status the attempt's target answered with
// (region.Attempt.Answered) and, when firstByte, that its first byte is
// in: when the answer goes on to the client, that is the attempt's first
// token. When the core ends the attempt as failed and routes the request
// again, it waits for the next attempt as Route does.
func (r *Router) Answered(ctx context.Context, a *region.Attempt, status int, firstByte bool) (routed, region.Next, error) {
	return r.await(ctx, a.Request, func() region.Next {
		r.answeredLocked(a)
		next := a.Answered(r.now(), status)
		if next == (region.Next{}) && firstByte {
			a.FirstToken(r.now())
		}
		r.endUnansweredIfEjected(a.Replica)
		return next
	})
}

// End ends the attempt a with how (region.Attempt.End). When the core
// routes the request again, End waits for the next attempt as Route does
// and returns it; otherwise the zero routed and what the core said.
func (r *Router) End(ctx context.Context, a *region.Attempt, how region.Outcome) (routed, region.Next, error) {
	if how != region.ReplicaFailed && how != region.TimedOut { // never retried: no waiter needed
		r.settle(a, how, 0, false)
		return routed{}, region.Next{}, nil
	}
	return r.await(ctx, a.Request, func() region.Next {
		r.answeredLocked(a)
		next := a.End(r.now(), how)
		r.endUnansweredIfEjected(a.Replica)
		return next
	})
}

// settle ends an attempt that is not retried (how is Served,
// BrokeMidStream or Released) with the cached prompt tokens its engine
// reported, when it did (cache-truth feedback): the path every served
// request takes, one lock.
func (r *Router) settle(a *region.Attempt, how region.Outcome, cachedTokens int, reported bool) {
	r.lock()
	defer r.mu.Unlock()
	r.answeredLocked(a)
	if reported {
		a.CacheReported(cachedTokens)
	}
	a.End(r.now(), how)
	r.endUnansweredIfEjected(a.Replica)
}

// Continue ends the attempt a, whose stream broke after it reached the
// client, and waits for the attempt that continues it
// (region.Attempt.Continue).
func (r *Router) Continue(ctx context.Context, a *region.Attempt) (routed, region.Next, error) {
	return r.await(ctx, a.Request, func() region.Next { return a.Continue(r.now()) })
}

// clockOffset is peer region's wall clock less ours as the mesh measured
// it from its load summaries (zero if unknown).
func (r *Router) clockOffset(peer string) (offset time.Duration) {
	r.do(func(n *region.Node) {
		for _, p := range n.Peers() {
			if p.Region == peer {
				offset = p.ClockOffset
				return
			}
		}
	})
	return offset
}

// errReplicaEjected ends the attempts still waiting at a replica the
// region has just ejected.
var errReplicaEjected = errors.New("the replica was ejected while the request waited for its first byte")

// endUnansweredIfEjected ends the attempts waiting for their first byte at
// replica if it is no longer in service: they are retried elsewhere at
// once, not left to their own timeout (minutes, for a response that is
// not streamed). Called with mu held.
func (r *Router) endUnansweredIfEjected(replica string) {
	if replica == "" || r.core.Healthy(replica) {
		return
	}
	for _, cancel := range r.unanswered[replica] {
		cancel(errReplicaEjected)
	}
	delete(r.unanswered, replica)
}

// answeredLocked takes a's attempt off its replica's unanswered list.
// Called with mu held.
func (r *Router) answeredLocked(a *region.Attempt) {
	if waiting := r.unanswered[a.Replica]; waiting != nil {
		delete(waiting, a)
		if len(waiting) == 0 {
			delete(r.unanswered, a.Replica)
		}
	}
}

// waiter is a handler waiting for its request's next attempt.
type waiter struct {
	ch  chan routed
	ctx context.Context // the client's: the attempt's context derives from it
}

// await runs act under the lock with a waiter registered for req; when act
// says the request was routed (again), it waits for the attempt to be
// delivered, or for ctx to end (then the request is withdrawn).
func (r *Router) await(ctx context.Context, req *request.Request, act func() region.Next) (routed, region.Next, error) {
	w := &waiter{ch: make(chan routed, 1), ctx: ctx}
	r.lock()
	r.waiters[req] = w
	next := act()
	if !next.Retry {
		delete(r.waiters, req)
		r.mu.Unlock()
		return routed{}, next, nil
	}
	r.mu.Unlock()
	select {
	case o := <-w.ch:
		if o.Err != nil {
			return o, next, o.Err
		}
		return o, next, nil
	case <-ctx.Done():
		r.lock()
		defer r.mu.Unlock()
		delete(r.waiters, req)
		if r.core.Cancel(req) {
			return routed{}, next, ctx.Err()
		}
		// Delivered just as the client left: take it, release it.
		select {
		case o := <-w.ch:
			r.releaseLocked(o)
		default:
		}
		return routed{}, next, ctx.Err()
	}
}

// delivered receives the core's attempts. Called with r.mu held.
func (r *Router) delivered(a *region.Attempt) {
	out := routed{Attempt: a}
	if a.Replica != "" {
		out.replica = r.replicaOf(a.Replica)
	}
	r.record(a)
	if r.observe != nil {
		r.observe(a)
	}
	w, ok := r.waiters[a.Request]
	if !ok {
		r.releaseLocked(out) // nobody waits (cannot happen while handlers hold their requests)
		return
	}
	delete(r.waiters, a.Request)
	if a.Err == nil {
		out = r.arm(out, w.ctx)
	}
	w.ch <- out
}

// arm gives a delivered attempt its context and first-token timeout and,
// at a replica, registers it among the replica's attempts awaiting their
// first byte (ended with errReplicaEjected if the replica is ejected
// meanwhile). Called with mu held.
func (r *Router) arm(o routed, parent context.Context) routed {
	o.ctx, o.cancel = context.WithCancelCause(parent)
	o.timeout = o.FirstTokenTimeout()
	if o.Replica == "" {
		return o
	}
	if !r.core.Healthy(o.Replica) {
		o.cancel(errReplicaEjected)
		return o
	}
	if r.unanswered[o.Replica] == nil {
		r.unanswered[o.Replica] = map[*region.Attempt]context.CancelCauseFunc{}
	}
	r.unanswered[o.Replica][o.Attempt] = o.cancel
	return o
}

func (r *Router) record(a *region.Attempt) {
	rec := Decision{At: r.now(), ID: a.Request.ID, Action: a.Decision.Action.String(), Region: a.Decision.Region, Reason: string(a.Decision.Reason),
		waited: a.Waited}
	if a.Waited > 0 {
		rec.Waited = a.Waited.String()
	}
	switch {
	case a.Err != nil:
		rec.Action, rec.Error = "reject", a.Err.Message
	case a.Replica != "":
		rec.Target = a.Replica
	}
	r.recent[r.recentNext%len(r.recent)] = rec
	r.recentNext++
}

// firstTokenTimeout is the core's first-token timeout for the attempt as
// of now (region.Attempt.FirstTokenTimeout): read again while an attempt
// waits long.
func (r *Router) firstTokenTimeout(a *region.Attempt) time.Duration {
	r.lock()
	defer r.mu.Unlock()
	return a.FirstTokenTimeout()
}

// releaseLocked ends a delivered attempt nobody will use. Called with r.mu
// held.
func (r *Router) releaseLocked(o routed) {
	if o.Attempt == nil {
		return
	}
	if o.cancel != nil {
		o.cancel(nil)
	}
	r.answeredLocked(o.Attempt)
	o.End(r.now(), region.Released)
}

// Pump refreshes the peers' snapshot from the mesh and re-routes held
// requests: every PumpInterval and after every scrape round.
func (r *Router) Pump() {
	var peers []region.Peer
	r.lock()
	src := r.mesh
	r.mu.Unlock()
	share := false
	if src != nil {
		peers = grantJurisdictions(src.Peers(), r.cfg.PeerJurisdictions)
		if s, ok := src.(interface{ Siblings() int }); ok {
			share = s.Siblings() > 0 // other proxies of this region: tell them what is dispatched
		}
	}
	r.lock()
	defer r.mu.Unlock()
	if share != r.sharing {
		r.sharing = share
		r.core.ShareDispatches(share)
	}
	r.core.SetPeers(peers)
	r.core.Pump(r.now())
}

// TakeDispatches implements mesh.DispatchSharer: what this proxy
// dispatched (and what ended) since the last call, for the other proxies
// of its region.
func (r *Router) TakeDispatches() []region.SiblingDispatch {
	r.lock()
	defer r.mu.Unlock()
	return r.core.TakeDispatches()
}

// SiblingDispatched implements mesh.DispatchSharer: what another proxy of
// this region told.
func (r *Router) SiblingDispatched(from string, told []region.SiblingDispatch) {
	r.lock()
	defer r.mu.Unlock()
	r.core.SiblingDispatched(from, told)
}

// grantJurisdictions is peers (a snapshot it does not modify) with each
// region's jurisdiction as the operator granted it, whatever it claimed:
// none for a region not granted one.
func grantJurisdictions(peers []region.Peer, granted map[string]string) []region.Peer {
	out := make([]region.Peer, len(peers))
	for i, p := range peers {
		p.Jurisdiction = granted[p.Region]
		out[i] = p
	}
	return out
}

// setPeerSource attaches the mesh once it exists (it needs the router).
func (r *Router) setPeerSource(p PeerSource) {
	r.lock()
	r.mesh = p
	r.mu.Unlock()
}

// ObserveScrape records one scrape of the named replica, in every pool it
// serves: the status and body of its /metrics answer (status 0: the
// scrape failed). A page without vLLM or SGLang names leaves the engine's
// queue unknown. It reports whether the engine exposed queue metrics.
func (r *Router) ObserveScrape(replica string, mark region.ScrapeMark, status int, page io.Reader) bool {
	var m region.Metrics
	if status == http.StatusOK && page != nil {
		m, _ = parseEngineMetrics(page)
	}
	r.lock()
	defer r.mu.Unlock()
	r.core.Scraped(replica, m, mark)
	return m.Known
}

// MarkScrape is called as a scrape of the named replica begins; its mark
// goes to ObserveScrape.
func (r *Router) MarkScrape(replica string) region.ScrapeMark {
	r.lock()
	defer r.mu.Unlock()
	return r.core.MarkScrape(replica)
}

// ObserveHealth records one health check of the named replica.
func (r *Router) ObserveHealth(replica string, ok bool) {
	r.lock()
	defer r.mu.Unlock()
	r.core.HealthChecked(replica, ok)
	r.endUnansweredIfEjected(replica)
}

// View returns a copy of the view the policy would route req by now (in
// the pool of its base model; empty if there is none).
func (r *Router) View(req *request.Request) policy.View {
	r.lock()
	defer r.mu.Unlock()
	v, _ := r.core.Explain(req)
	return v
}

// ReplicaStates is the core's bookkeeping of every replica.
func (r *Router) ReplicaStates() []region.ReplicaState {
	r.lock()
	defer r.mu.Unlock()
	return r.core.Snapshot(r.now()).Replicas
}

// snapshot is a consistent copy of the router's state, for the readers
// that need all of it (the debug endpoint, the metrics collector, the
// server's accessors); replicaSides is the cheap part. With the request
// path's methods, they are the only places that take the router's lock.
type snapshot struct {
	region.Snapshot
	policy   string
	replicas []*replica // the HTTP sides, in the core's order
	recent   []Decision // oldest first
	sharing  bool       // telling the region's other proxies what is dispatched
}

// replicaSides is the replicas' HTTP sides, in the core's order: the cheap
// part of a snapshot, for the request path (the model check) and the
// pool's loops.
func (r *Router) replicaSides() []*replica {
	r.lock()
	defer r.mu.Unlock()
	return slices.Clone(r.replicas)
}

func (r *Router) snapshot() snapshot {
	r.lock()
	defer r.mu.Unlock()
	out := snapshot{Snapshot: r.core.Snapshot(r.now()), policy: r.cfg.Policy, replicas: slices.Clone(r.replicas), sharing: r.sharing}
	for i := range len(r.recent) {
		if d := r.recent[(r.recentNext+i)%len(r.recent)]; d.ID != "" {
			out.recent = append(out.recent, d)
		}
	}
	return out
}

// Decide returns the decision the policy would make for req now, without
// routing it (a rejection when no pool serves its model here).
func (r *Router) Decide(req *request.Request) policy.Decision {
	r.lock()
	defer r.mu.Unlock()
	_, d := r.core.Explain(req)
	return d
}

// Load implements mesh.Source: this node's load summary.
func (r *Router) Load() region.Load {
	r.lock()
	defer r.mu.Unlock()
	l := r.core.Load()
	l.Draining = r.draining
	return l
}

// drain marks the router draining: its load summary says so, and peers
// stop forwarding to this node.
func (r *Router) drain() {
	r.lock()
	defer r.mu.Unlock()
	r.draining = true
}

// flushHeld answers every held request with e and returns how many.
func (r *Router) flushHeld(e *apierr.Error) int {
	r.lock()
	defer r.mu.Unlock()
	return r.core.Flush(r.now(), e)
}

// Digest implements mesh.Source: the digest of the prefix index.
func (r *Router) Digest() *digest.Digest {
	r.lock()
	defer r.mu.Unlock()
	return r.core.Digest()
}

// healthyReplicas counts replicas in service.
func (r *Router) healthyReplicas() int {
	r.lock()
	defer r.mu.Unlock()
	return r.core.Load().Replicas
}

// queued is the number of held requests.
func (r *Router) queued() int {
	r.lock()
	defer r.mu.Unlock()
	return r.core.Load().Queued
}

// modelCards returns the union of the replicas' model cards, one per id
// (the first replica's, in pool order), sorted by id, and whether any
// replica reported its models yet.
func (r *Router) modelCards() ([]modelCard, bool) {
	seen := map[string]bool{}
	known := false
	var out []modelCard
	for _, rp := range r.replicaSides() {
		cards := rp.models.Load()
		if cards == nil {
			continue
		}
		known = true
		for _, m := range *cards {
			if !seen[m.ID] {
				seen[m.ID] = true
				out = append(out, m)
			}
		}
	}
	slices.SortFunc(out, func(a, b modelCard) int { return strings.Compare(a.ID, b.ID) })
	return out, known
}

var (
	_ mesh.Source         = (*Router)(nil)
	_ mesh.DispatchSharer = (*Router)(nil)
)
