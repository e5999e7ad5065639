package balancer

import (
	"fmt"
	"time"

	"skywalker/internal/apierr"
	"skywalker/internal/policy"
	"skywalker/internal/request"
)

// Config bounds the queue and sets its admission rules. DefaultConfig
// gives the documented defaults.
type Config struct {
	// MaxQueue is the most requests held at once; past it, new requests
	// that would be held are rejected with 429. Default 4096.
	MaxQueue int
	// MaxWait is how long a request may be held when it carries no
	// deadline of its own; past it, it is rejected with 503. Default 30 s.
	MaxWait time.Duration
	// RetryAfter is the Retry-After hint sent with rejections that have no
	// better estimate. Default 1 s.
	RetryAfter time.Duration
	// ScanDepth: a pump stops after this many consecutive held requests
	// stay held, bounding the work per state change (later requests are
	// newer and wait behind them anyway). Default 16.
	ScanDepth int
	// Objectives are the TTFT objectives per class (indexed by
	// request.Class). A request the policy estimates cannot start within
	// its objective anywhere it may be served is refused at once with 429
	// and a Retry-After from the estimate (SLO-aware admission), unless it
	// asked to wait; a held request still waiting when its objective has
	// passed is shed with 429. The zero SLO turns both off for its class
	// (MaxWait still bounds it). Admission uses the policy's estimate:
	// policies that give none (the global baselines) are only bounded by
	// MaxQueue and MaxWait. Default none.
	Objectives [request.NumClasses]request.SLO
	// FIFO turns fair queuing off: requests of one class are held in
	// arrival order whatever their tenant. By default each class is
	// start-time fair queued by tenant, weighted by tokens.
	FIFO bool
	// TenantMaxHeld, if positive, is the most requests one tenant may have
	// held in this balancer; past it its requests are refused with 429.
	TenantMaxHeld int
	// MaxTenants bounds the tenants of a class that have a fair share of
	// their own at once; the requests of further tenants share one
	// (OverflowTenant), so that a client inventing tenant names cannot
	// put each of its requests at the front. Default 64.
	MaxTenants int
}

// OverflowTenant is the flow the requests of tenants beyond MaxTenants
// share.
const OverflowTenant = "\x00overflow"

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{MaxQueue: 4096, MaxWait: 30 * time.Second, RetryAfter: time.Second, ScanDepth: 16, MaxTenants: 64}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.MaxQueue <= 0 {
		c.MaxQueue = d.MaxQueue
	}
	if c.MaxWait <= 0 {
		c.MaxWait = d.MaxWait
	}
	if c.MaxTenants <= 0 {
		c.MaxTenants = d.MaxTenants
	}
	if c.RetryAfter <= 0 {
		c.RetryAfter = d.RetryAfter
	}
	if c.ScanDepth <= 0 {
		c.ScanDepth = d.ScanDepth
	}
	return c
}

// Env is the driver's side of the balancer: the live proxy or the
// simulator. Calls come synchronously from Submit, Pump and Expire.
type Env interface {
	// View returns the routing view for req as of now. It must reflect
	// every outcome already passed to Deliver (a dispatched request
	// occupies its replica), or the balancer will over-dispatch.
	View(req *request.Request) *policy.View
	// Deliver receives the final outcome of a submitted request. Every
	// submitted request is delivered exactly once, unless Cancel removed it.
	Deliver(o Outcome)
}

// Outcome is how a request left the balancer.
type Outcome struct {
	Request  *request.Request
	Decision policy.Decision // Dispatch or Forward when Err is nil
	Err      *apierr.Error   // set when the request was rejected
	Waited   time.Duration   // time spent held (zero if routed at once)
	// Admitted is the policy's estimated time to first token when the
	// request was submitted (zero if it gives none): with the time to the
	// actual first token, it calibrates admission (policy.LocalRegion.TTFTBias).
	Admitted time.Duration
	// Submitted is when the request reached the balancer.
	Submitted time.Time
}

// Balancer is one region's queue in front of a policy. Held requests are
// ordered by class (critical, standard, sheddable), then — within a class
// — by start-time fair queuing over tenants: each request's start tag is
// the later of the class's virtual time and the end of its tenant's
// previous request, and a request's virtual length is its tokens, so a
// tenant that floods the queue waits behind its own backlog while another
// tenant's requests keep their place near the front.
type Balancer struct {
	policy    policy.Policy
	cfg       Config
	queue     []*held // ordered by (class rank, start tag, seq)
	byReq     map[*request.Request]*held
	deadlines deadlineHeap // the same requests, by when they must leave
	seq       uint64
	vtime     [request.NumClasses]float64 // per class: start tag of the last request served
	classHeld [request.NumClasses]int
	flows     map[flowKey]*flow
	// classFlows counts flows per class (at most MaxTenants, and the
	// overflow).
	classFlows [request.NumClasses]int
}

type held struct {
	req      *request.Request
	since    time.Time
	deadline time.Time // MaxWait or the request's own: 503 when passed
	shedAt   time.Time // the objective: shed with 429 when passed; zero for none
	seq      uint64
	rank     int
	start    float64 // fair-queuing start tag
	flow     *flow
	reason   policy.Reason // why it was last held
	hindex   int           // in deadlines
	estimate time.Duration // the policy's estimate at submission
}

// leaveAt is when the request must leave the queue at the latest.
func (h *held) leaveAt() time.Time {
	if !h.shedAt.IsZero() && h.shedAt.Before(h.deadline) {
		return h.shedAt
	}
	return h.deadline
}

// before orders the queue.
func (h *held) before(o *held) bool {
	if h.rank != o.rank {
		return h.rank < o.rank
	}
	if h.start != o.start {
		return h.start < o.start
	}
	return h.seq < o.seq
}

// flowKey is one tenant's flow in one class.
type flowKey struct {
	class  request.Class
	tenant string
}

// flow is a tenant's fair-queuing state in one class.
type flow struct {
	key    flowKey
	finish float64 // virtual finish tag of its last held request
	held   int
}

// New returns an empty balancer routing by p.
func New(p policy.Policy, cfg Config) *Balancer {
	return &Balancer{policy: p, cfg: cfg.withDefaults(), byReq: map[*request.Request]*held{}, flows: map[flowKey]*flow{}}
}

// HeldTokens is the prompt tokens of the held requests.
func (b *Balancer) HeldTokens() int {
	n := 0
	for _, h := range b.queue {
		n += h.req.PromptTokens
	}
	return n
}

// Policy returns the policy the balancer routes by.
func (b *Balancer) Policy() policy.Policy { return b.policy }

// Config returns the balancer's configuration with defaults applied.
func (b *Balancer) Config() Config { return b.cfg }

// Len returns the number of held requests.
func (b *Balancer) Len() int { return len(b.queue) }

// cost is a request's virtual length for fair queuing: its prompt plus
// the output it may generate (256 tokens when it set no limit; at most
// 4096 count), so tenants share by tokens, not by requests.
func cost(req *request.Request) float64 {
	out := req.MaxTokens
	if out <= 0 {
		out = 256
	}
	return float64(max(req.PromptTokens, 1) + min(out, 4096))
}

// objective is the request's TTFT objective; zero for none. Requests that
// stay here have none: the region that forwarded one admitted it against
// this region's estimate, one whose forward failed was admitted here
// already, and neither is shed in favour of new ones.
func (b *Balancer) objective(req *request.Request) time.Duration {
	if req.StaysHere() || int(req.Class) >= len(b.cfg.Objectives) {
		return 0
	}
	return b.cfg.Objectives[req.Class].For(req.PromptTokens)
}

// tag prepares req's queue entry: its class, its fair-queuing start tag
// and its deadlines. Nothing is booked until enqueue.
func (b *Balancer) tag(now time.Time, req *request.Request) *held {
	b.seq++
	h := &held{req: req, since: now, seq: b.seq, rank: req.Class.Rank()}
	h.deadline = req.Deadline
	if h.deadline.IsZero() {
		h.deadline = now.Add(b.cfg.MaxWait)
	}
	if obj := b.objective(req); obj > 0 && !req.Wait {
		h.shedAt = now.Add(obj)
	}
	key := flowKey{class: req.Class}
	if !b.cfg.FIFO {
		key.tenant = req.Tenant
	}
	f := b.flows[key]
	if f == nil && !b.cfg.FIFO && b.classFlows[req.Class] >= b.cfg.MaxTenants {
		key.tenant = OverflowTenant
		f = b.flows[key]
	}
	if f == nil {
		f = &flow{key: key}
	}
	h.flow = f
	if b.cfg.FIFO {
		h.start = 0 // seq orders a class
	} else {
		h.start = max(b.vtime[req.Class], f.finish)
	}
	return h
}

// Submit routes a new request. If the policy can place it now it is
// delivered at once; if the policy holds it, admission decides (see
// Config.Objectives) and it joins the queue at its place (or is rejected
// with 429 if the queue is full). A request that could start locally
// while others are held ahead of it joins the queue and a pump follows,
// so nobody is overtaken.
func (b *Balancer) Submit(now time.Time, req *request.Request, env Env) {
	h := b.tag(now, req)
	ahead := b.position(h)
	v := env.View(req)
	v.Local.Queued, v.Local.Held, v.Local.Waited = ahead, len(b.queue), 0
	v.Local.Objective = b.objective(req)
	d := b.policy.Route(req, v)
	if d.Action == policy.Reject {
		env.Deliver(Outcome{Request: req, Decision: d, Err: b.refusal(req, d)})
		return
	}
	waits := d.Action == policy.Hold || d.Action == policy.Dispatch && ahead > 0
	if e := b.admit(req, v, &d, waits); e != nil {
		env.Deliver(Outcome{Request: req, Decision: d, Err: e})
		return
	}
	if d.Action == policy.Forward || d.Action == policy.Dispatch && ahead == 0 {
		env.Deliver(Outcome{Request: req, Decision: d, Admitted: d.Estimate, Submitted: now})
		return
	}
	if len(b.queue) >= b.cfg.MaxQueue {
		env.Deliver(Outcome{Request: req, Decision: d, Err: &apierr.Error{Code: apierr.QueueFull,
			Message: "the balancer queue is full; retry later", RetryAfter: b.cfg.RetryAfter}})
		return
	}
	h.reason, h.estimate = d.Reason, d.Estimate
	b.enqueue(h, ahead)
	if d.Action == policy.Dispatch {
		b.Pump(now, env)
	}
}

// admit decides whether a request may go where the policy would send it
// (waits: to the queue). A request estimated to get its first token too
// late for its objective, wherever the decision sends it, goes to a peer
// that can meet it (a region under pressure forwards before it sheds) or
// is refused; of those that would wait, a sheddable one is refused and
// one whose tenant is over its limit is refused. Requests that stay here
// (forwarded in, or their forward failed) and those that asked to wait are
// taken as they are. It may turn d into a forward.
func (b *Balancer) admit(req *request.Request, v *policy.View, d *policy.Decision, waits bool) *apierr.Error {
	if req.StaysHere() {
		return nil
	}
	if lim := b.cfg.TenantMaxHeld; waits && lim > 0 && req.Tenant != "" {
		if f := b.flows[flowKey{class: req.Class, tenant: req.Tenant}]; f != nil && f.held >= lim {
			return &apierr.Error{Code: apierr.Overloaded, RetryAfter: b.drain(v),
				Message: fmt.Sprintf("tenant %q already has %d requests queued here, its limit", req.Tenant, f.held)}
		}
	}
	if req.Wait {
		return nil
	}
	if waits && d.Reason == policy.ReasonNoReplica && !anyoneCanServe(req, v) {
		return &apierr.Error{Code: apierr.Unavailable, RetryAfter: b.cfg.RetryAfter,
			Message: "no healthy replica in this region and no peer region to take the request; retry later"}
	}
	if waits && req.Class == request.Sheddable {
		return &apierr.Error{Code: apierr.Overloaded, RetryAfter: b.drain(v),
			Message: "every replica is busy and sheddable requests are not queued; retry later"}
	}
	obj := b.objective(req)
	if obj <= 0 || !waits {
		return nil // a request that can start now is never refused
	}
	// The estimate as recent first tokens bear it out: a region whose
	// estimates ran long (a loaded engine prefills slower than an idle
	// one) refuses sooner, one whose estimates ran short admits more.
	bias := v.Local.TTFTBias
	if bias <= 0 {
		bias = 1
	}
	est := time.Duration(float64(d.Estimate) * bias)
	// Before engines that report nothing have given a first token the
	// estimate is the profile's guess: the region may hold a request per
	// healthy replica (the next to start), no more, until they have shown
	// their speed.
	unmeasured := v.Local.Unmeasured && len(b.queue) >= healthyReplicas(v)
	if est <= obj && !unmeasured {
		return nil
	}
	// The fallback is the peer that starts it soonest among those whose
	// estimate, with its learned error, fits the objective (the policy's
	// reach): it is refused only if nobody within reach can serve it.
	if d.Action != policy.Forward && d.HasFallback {
		*d = policy.Decision{Action: policy.Forward, Peer: d.FallbackPeer, Region: v.Peers[d.FallbackPeer].Name,
			Reason: policy.ReasonOverload, Estimate: d.FallbackEstimate, StartedOver: d.StartedOver}
		return nil
	}
	if unmeasured {
		return &apierr.Error{Code: apierr.Overloaded, RetryAfter: b.cfg.RetryAfter,
			Message: fmt.Sprintf("every replica is busy and none has given a first token yet, so the wait cannot be estimated; the queue already holds one request per healthy replica (%d); retry shortly or ask to wait (X-SkyWalker-Wait: true)",
				healthyReplicas(v))}
	}
	return &apierr.Error{Code: apierr.Overloaded, RetryAfter: max(est-obj, time.Second),
		Message: fmt.Sprintf("no region can start the request within its %v TTFT objective (estimated %v); retry later or ask to wait (X-SkyWalker-Wait: true)",
			obj.Round(time.Millisecond), est.Round(time.Millisecond))}
}

// drain estimates how long the held requests take to leave: the
// Retry-After for a client refused because the region is busy.
func (b *Balancer) drain(v *policy.View) time.Duration {
	return max(time.Duration(len(b.queue)+1)*v.Local.PerRequestWait, b.cfg.RetryAfter)
}

// position is the index h joins the queue at.
func (b *Balancer) position(h *held) int {
	lo, hi := 0, len(b.queue)
	for lo < hi {
		mid := (lo + hi) / 2
		if b.queue[mid].before(h) {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// enqueue books h at index i (its position) and in its tenant's flow.
func (b *Balancer) enqueue(h *held, i int) {
	f := h.flow
	if b.flows[f.key] == nil {
		b.flows[f.key] = f
		b.classFlows[f.key.class]++
	}
	f.held++
	b.classHeld[h.req.Class]++
	if !b.cfg.FIFO {
		f.finish = h.start + cost(h.req)
	}
	b.queue = append(b.queue, nil)
	copy(b.queue[i+1:], b.queue[i:])
	b.queue[i] = h
	b.byReq[h.req] = h
	b.deadlines.push(h)
}

// Pump re-routes held requests in queue order after a state change (a
// replica freed, fresh load or digests from peers): each is dispatched,
// forwarded, rejected, or stays held with a fresh reason. It first expires
// and sheds requests past their deadlines. It returns how many requests
// left.
func (b *Balancer) Pump(now time.Time, env Env) int {
	return b.PumpDepth(now, env, b.cfg.ScanDepth)
}

// PumpDepth is Pump with its own scan depth: after a replica frees one
// slot, depth 1 (hand the slot to the head, stop at the first request that
// stays held) is enough; after peers' state changes, a deeper scan lets
// held requests move elsewhere.
func (b *Balancer) PumpDepth(now time.Time, env Env, depth int) int {
	left := b.Expire(now, env)
	stillHeld := 0
	i := 0
	for i < len(b.queue) && stillHeld < max(depth, 1) {
		h := b.queue[i]
		d, _ := b.routeHeld(now, h, i, env)
		switch d.Action {
		case policy.Hold:
			h.reason = d.Reason
			stillHeld++
			i++
			continue
		case policy.Reject:
			b.remove(i, true)
			env.Deliver(Outcome{Request: h.req, Decision: d, Err: b.refusal(h.req, d), Waited: now.Sub(h.since)})
		default:
			b.leave(now, i, h, d, env)
		}
		left++
		stillHeld = 0
	}
	return left + b.drainTail(now, env, depth, i)
}

// routeHeld routes h, held at index i, as the queue stands at now, and
// returns the decision and the view it was made on.
func (b *Balancer) routeHeld(now time.Time, h *held, i int, env Env) (policy.Decision, *policy.View) {
	v := env.View(h.req)
	v.Local.Queued, v.Local.Held, v.Local.Waited = i, len(b.queue), now.Sub(h.since)
	v.Local.Objective = b.objective(h.req)
	return b.policy.Route(h.req, v), v
}

// leave takes h, held at index i, out of the queue to be served as d
// says.
func (b *Balancer) leave(now time.Time, i int, h *held, d policy.Decision, env Env) {
	b.remove(i, true)
	env.Deliver(Outcome{Request: h.req, Decision: d, Waited: now.Sub(h.since), Admitted: h.estimate, Submitted: h.since})
}

// drainTail re-routes held requests from the back of the queue, up to
// depth in a row that stay, taking only forwards: the requests that
// would wait here longest are the ones a peer with room should take
// (work-conserving pooling), and a pump from the head alone never reaches
// them while the head stays held. It stops at from, where the scan from
// the head stopped (what is before it was just routed). A dispatch is left
// for its turn, so nobody overtakes the queue here. It returns how many
// left.
func (b *Balancer) drainTail(now time.Time, env Env, depth, from int) int {
	left, stayed := 0, 0
	for i := len(b.queue) - 1; i >= from && stayed < max(depth, 1); i-- {
		h := b.queue[i]
		d, v := b.routeHeld(now, h, i, env)
		if !anyPeerOpen(v) {
			return left // nobody to drain to: the view is the same for every request
		}
		if d.Action != policy.Forward {
			stayed++
			continue
		}
		b.leave(now, i, h, d, env)
		left++
		stayed = 0
	}
	return left
}

// anyPeerOpen reports whether some peer in the view is healthy with its
// gate open: whether a drain could send anything anywhere.
func anyPeerOpen(v *policy.View) bool {
	for i := range v.Peers {
		if p := &v.Peers[i]; p.Healthy && p.GateOpen {
			return true
		}
	}
	return false
}

// Expire removes every held request whose deadline is at or before now:
// past its objective it is shed (429 and a Retry-After), past its
// deadline it times out (503 and a Retry-After). It returns how many left.
func (b *Balancer) Expire(now time.Time, env Env) int {
	n := 0
	for len(b.deadlines) > 0 {
		h := b.deadlines[0]
		at := h.leaveAt()
		if at.After(now) {
			break
		}
		shed := at.Equal(h.shedAt) && h.shedAt.Before(h.deadline)
		if shed && b.serveLate(now, h, env) {
			n++
			continue
		}
		b.remove(b.indexOf(h), false)
		n++
		var e *apierr.Error
		if shed {
			e = &apierr.Error{Code: apierr.Shed, RetryAfter: b.cfg.RetryAfter,
				Message: fmt.Sprintf("the request could not start within its %v TTFT objective and was shed (held: %s); retry later", at.Sub(h.since).Round(time.Millisecond), h.reason)}
		} else {
			e = &apierr.Error{Code: apierr.QueueTimeout, RetryAfter: b.cfg.RetryAfter,
				Message: "no replica could take the request before its deadline (held: " + string(h.reason) + ")"}
		}
		env.Deliver(Outcome{Request: h.req, Waited: now.Sub(h.since), Err: e})
	}
	return n
}

// serveLate routes a held request whose objective has just passed once
// more: if the policy can place it now (a replica with room, a peer that
// takes it) it leaves to be served late rather than shed — shedding
// protects the requests behind it from waiting on a hopeless one, and a
// free slot delays nobody. It reports whether the request left.
func (b *Balancer) serveLate(now time.Time, h *held, env Env) bool {
	i := b.indexOf(h)
	d, _ := b.routeHeld(now, h, i, env)
	if d.Action != policy.Dispatch && d.Action != policy.Forward {
		return false
	}
	b.leave(now, i, h, d, env)
	return true
}

// Flush removes every held request, delivering each the error e (a
// shutdown answers what it cannot serve: 503 and a Retry-After), and
// returns how many left.
func (b *Balancer) Flush(now time.Time, env Env, e *apierr.Error) int {
	n := len(b.queue)
	for len(b.queue) > 0 {
		h := b.queue[0]
		b.remove(0, false)
		env.Deliver(Outcome{Request: h.req, Waited: now.Sub(h.since), Err: e})
	}
	return n
}

// NextDeadline returns the earliest time a held request must leave (its
// objective or its deadline), so the driver can schedule a timer to call
// Expire; ok is false when none is held.
func (b *Balancer) NextDeadline() (deadline time.Time, ok bool) {
	if len(b.deadlines) == 0 {
		return time.Time{}, false
	}
	return b.deadlines[0].leaveAt(), true
}

// Cancel removes a held request without delivering it (its client went
// away) and reports whether it was held.
func (b *Balancer) Cancel(req *request.Request) bool {
	h := b.byReq[req]
	if h == nil {
		return false
	}
	b.remove(b.indexOf(h), false)
	return true
}

// HeldRequest describes one held request, for debugging endpoints.
type HeldRequest struct {
	ID       string        `json:"id"`
	Priority string        `json:"priority"`
	Tenant   string        `json:"tenant,omitempty"`
	Waited   time.Duration `json:"waited_ns"`
	Reason   policy.Reason `json:"reason"`
}

// Held lists held requests in queue order.
func (b *Balancer) Held(now time.Time) []HeldRequest {
	out := make([]HeldRequest, len(b.queue))
	for i, h := range b.queue {
		out[i] = HeldRequest{ID: h.req.ID, Priority: h.req.Class.String(), Tenant: h.req.Tenant, Waited: now.Sub(h.since), Reason: h.reason}
	}
	return out
}

// HeldBy calls fn for every (class, tenant) with requests held, with
// their count, for metrics.
func (b *Balancer) HeldBy(fn func(class request.Class, tenant string, n int)) {
	for k, f := range b.flows {
		if f.held > 0 {
			fn(k.class, k.tenant, f.held)
		}
	}
}

// indexOf finds h in the queue: its key is unique, so by bisection.
func (b *Balancer) indexOf(h *held) int {
	i := b.position(h)
	if i < len(b.queue) && b.queue[i] == h {
		return i
	}
	for j, x := range b.queue { // never expected: keys are unique
		if x == h {
			return j
		}
	}
	return -1
}

// remove takes queue[i] out; served says whether it leaves to be served
// (then the class's virtual time advances to its start tag).
func (b *Balancer) remove(i int, served bool) {
	if i < 0 {
		return
	}
	h := b.queue[i]
	copy(b.queue[i:], b.queue[i+1:])
	b.queue[len(b.queue)-1] = nil
	b.queue = b.queue[:len(b.queue)-1]
	delete(b.byReq, h.req)
	b.deadlines.remove(h)
	c := h.req.Class
	if served && h.start > b.vtime[c] {
		b.vtime[c] = h.start
	}
	f := h.flow
	f.held--
	b.classHeld[c]--
	switch {
	case b.classHeld[c] == 0:
		// The class's queue is empty: fair queuing starts afresh (a tenant
		// that flooded it is not held to its backlog once it is gone).
		b.vtime[c] = 0
		for k := range b.flows {
			if k.class == c {
				delete(b.flows, k)
			}
		}
		b.classFlows[c] = 0
	case f.held <= 0 && f.finish <= b.vtime[c]:
		delete(b.flows, f.key) // idle and caught up: forget it
		b.classFlows[c]--
	}
}

// healthyReplicas counts the local replicas in service.
func healthyReplicas(v *policy.View) int {
	n := 0
	for _, r := range v.Local.Replicas {
		if r.Healthy {
			n++
		}
	}
	return n
}

// anyoneCanServe reports whether a local replica is healthy (busy or not)
// or a peer region is healthy with its gate open: whether holding a
// request can end in its being served soon.
func anyoneCanServe(req *request.Request, v *policy.View) bool {
	for _, r := range v.Local.Replicas {
		if r.Healthy {
			return true
		}
	}
	// A closed gate keeps off a request that could stay, not one that
	// cannot (policy.StayingPossible).
	crossGate := !policy.StayingPossible(req, v)
	for _, p := range v.Peers {
		if p.Healthy && (p.GateOpen || crossGate) {
			return true
		}
	}
	return false
}

func (b *Balancer) refusal(req *request.Request, d policy.Decision) *apierr.Error {
	if d.Refusal != nil {
		return d.Refusal
	}
	return b.noRegion(req)
}

func (b *Balancer) noRegion(req *request.Request) *apierr.Error {
	msg := "no region in the mesh may serve this request"
	if req.Residency != "" {
		msg = "no region in the mesh satisfies data residency " + req.Residency
	}
	return &apierr.Error{Code: apierr.Unavailable, Message: msg, RetryAfter: b.cfg.RetryAfter}
}
