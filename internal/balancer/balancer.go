package balancer

import (
	"time"

	"skywalker/internal/apierr"
	"skywalker/internal/policy"
	"skywalker/internal/request"
)

// Config bounds the queue. DefaultConfig gives the documented defaults.
type Config struct {
	// MaxQueue is the most requests held at once; past it, new requests
	// that would be held are rejected with 429. Default 4096.
	MaxQueue int
	// MaxWait is how long a request may be held when it carries no
	// deadline of its own; past it, it is rejected with 503. Default 30 s.
	MaxWait time.Duration
	// RetryAfter is the Retry-After hint sent with rejections. Default 1 s.
	RetryAfter time.Duration
	// ScanDepth: a pump stops after this many consecutive held requests
	// stay held, bounding the work per state change (later requests are
	// newer and wait behind them anyway). Default 16.
	ScanDepth int
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{MaxQueue: 4096, MaxWait: 30 * time.Second, RetryAfter: time.Second, ScanDepth: 16}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.MaxQueue <= 0 {
		c.MaxQueue = d.MaxQueue
	}
	if c.MaxWait <= 0 {
		c.MaxWait = d.MaxWait
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
}

// Balancer is one region's queue in front of a policy.
type Balancer struct {
	policy       policy.Policy
	cfg          Config
	queue        []*held // ordered by (priority, seq)
	seq          uint64
	nextDeadline time.Time // earliest deadline in queue; zero when empty
}

type held struct {
	req      *request.Request
	since    time.Time
	deadline time.Time
	seq      uint64
	reason   policy.Reason // why it was last held
}

// New returns an empty balancer routing by p.
func New(p policy.Policy, cfg Config) *Balancer {
	return &Balancer{policy: p, cfg: cfg.withDefaults()}
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

// Len returns the number of held requests.
func (b *Balancer) Len() int { return len(b.queue) }

// Submit routes a new request. If the policy can place it now it is
// delivered at once; if the policy holds it, it joins the queue (or is
// rejected with 429 if the queue is full). A request that could start
// locally while others are held joins the queue behind them and a pump
// follows, so nobody is overtaken.
func (b *Balancer) Submit(now time.Time, req *request.Request, env Env) {
	ahead := b.position(req.Priority)
	v := env.View(req)
	v.Local.Queued, v.Local.Held = ahead, len(b.queue)
	d := b.policy.Route(req, v)
	switch {
	case d.Action == policy.Forward, d.Action == policy.Dispatch && ahead == 0:
		env.Deliver(Outcome{Request: req, Decision: d})
		return
	case d.Action == policy.Reject:
		env.Deliver(Outcome{Request: req, Decision: d, Err: b.noRegion(req)})
		return
	}
	if len(b.queue) >= b.cfg.MaxQueue {
		env.Deliver(Outcome{Request: req, Decision: d, Err: &apierr.Error{Code: apierr.QueueFull,
			Message: "the balancer queue is full; retry later", RetryAfter: b.cfg.RetryAfter}})
		return
	}
	deadline := req.Deadline
	if deadline.IsZero() {
		deadline = now.Add(b.cfg.MaxWait)
	}
	b.seq++
	h := &held{req: req, since: now, deadline: deadline, seq: b.seq, reason: d.Reason}
	b.queue = append(b.queue, nil)
	copy(b.queue[ahead+1:], b.queue[ahead:])
	b.queue[ahead] = h
	if b.nextDeadline.IsZero() || deadline.Before(b.nextDeadline) {
		b.nextDeadline = deadline
	}
	if d.Action == policy.Dispatch {
		b.Pump(now, env)
	}
}

// position is the index a request of the given priority joins at: after
// every held request of equal or better (lower) priority.
func (b *Balancer) position(priority int) int {
	lo, hi := 0, len(b.queue)
	for lo < hi {
		mid := (lo + hi) / 2
		if b.queue[mid].req.Priority <= priority {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// Pump re-routes held requests in queue order after a state change (a
// replica freed, fresh load or digests from peers): each is dispatched,
// forwarded, rejected, or stays held with a fresh reason. It first expires
// requests past their deadline. It returns how many requests left.
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
	for i := 0; i < len(b.queue) && stillHeld < max(depth, 1); {
		h := b.queue[i]
		v := env.View(h.req)
		v.Local.Queued, v.Local.Held = i, len(b.queue)
		d := b.policy.Route(h.req, v)
		switch d.Action {
		case policy.Hold:
			h.reason = d.Reason
			stillHeld++
			i++
			continue
		case policy.Reject:
			b.remove(i)
			env.Deliver(Outcome{Request: h.req, Decision: d, Err: b.noRegion(h.req), Waited: now.Sub(h.since)})
		default:
			b.remove(i)
			env.Deliver(Outcome{Request: h.req, Decision: d, Waited: now.Sub(h.since)})
		}
		left++
		stillHeld = 0
	}
	return left
}

// Expire rejects every held request whose deadline is at or before now
// with a 503 and a Retry-After hint, and returns how many it rejected.
func (b *Balancer) Expire(now time.Time, env Env) int {
	if b.nextDeadline.IsZero() || now.Before(b.nextDeadline) {
		return 0
	}
	expired := 0
	kept := b.queue[:0]
	var next time.Time
	for _, h := range b.queue {
		if h.deadline.After(now) {
			kept = append(kept, h)
			if next.IsZero() || h.deadline.Before(next) {
				next = h.deadline
			}
			continue
		}
		expired++
		env.Deliver(Outcome{Request: h.req, Waited: now.Sub(h.since), Err: &apierr.Error{Code: apierr.QueueTimeout,
			Message: "no replica could take the request before its deadline (held: " + string(h.reason) + ")", RetryAfter: b.cfg.RetryAfter}})
	}
	clear(b.queue[len(kept):])
	b.queue = kept
	b.nextDeadline = next
	return expired
}

// NextDeadline returns the earliest deadline of a held request, so the
// driver can schedule a timer to call Expire; ok is false when none is held.
func (b *Balancer) NextDeadline() (deadline time.Time, ok bool) {
	return b.nextDeadline, !b.nextDeadline.IsZero()
}

// Cancel removes a held request without delivering it (its client went
// away) and reports whether it was held.
func (b *Balancer) Cancel(req *request.Request) bool {
	for i, h := range b.queue {
		if h.req == req {
			b.remove(i)
			return true
		}
	}
	return false
}

// HeldRequest describes one held request, for debugging endpoints.
type HeldRequest struct {
	ID       string        `json:"id"`
	Priority int           `json:"priority"`
	Waited   time.Duration `json:"waited_ns"`
	Reason   policy.Reason `json:"reason"`
}

// Held lists held requests in queue order.
func (b *Balancer) Held(now time.Time) []HeldRequest {
	out := make([]HeldRequest, len(b.queue))
	for i, h := range b.queue {
		out[i] = HeldRequest{ID: h.req.ID, Priority: h.req.Priority, Waited: now.Sub(h.since), Reason: h.reason}
	}
	return out
}

func (b *Balancer) remove(i int) {
	copy(b.queue[i:], b.queue[i+1:])
	b.queue[len(b.queue)-1] = nil
	b.queue = b.queue[:len(b.queue)-1]
	if len(b.queue) == 0 {
		b.nextDeadline = time.Time{}
	}
}

func (b *Balancer) noRegion(req *request.Request) *apierr.Error {
	msg := "no region in the mesh may serve this request"
	if req.Residency != "" {
		msg = "no region in the mesh satisfies data residency " + req.Residency
	}
	return &apierr.Error{Code: apierr.Unavailable, Message: msg, RetryAfter: b.cfg.RetryAfter}
}
