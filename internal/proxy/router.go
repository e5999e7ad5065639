package proxy

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
// recent decisions. This file holds the lock, the waiting handlers and a
// request's attempts; everything else reaches the core through do
// (peers.go, state.go, pool.go, kvevents.go, responses.go). Every method is
// safe for concurrent use, and the lock is held only for in-memory work.
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

// Answered reports the status the attempt's target answered with, and
// whether an engine gave it (region.Attempt.Answered) and, when firstByte,
// that its first byte is in: when the answer goes on to the client, that
// is the attempt's first token. When the core ends the attempt as failed
// and routes the request again, it waits for the next attempt as Route
// does.
func (r *Router) Answered(ctx context.Context, a *region.Attempt, status int, byEngine, firstByte bool) (routed, region.Next, error) {
	return r.await(ctx, a.Request, func() region.Next {
		r.answeredLocked(a)
		next := a.Answered(r.now(), status, byEngine)
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
