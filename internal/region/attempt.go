package region

import (
	"slices"
	"time"

	"skywalker/internal/apierr"
	"skywalker/internal/balancer"
	"skywalker/internal/policy"
)

// A request's life in the core, the same for every driver:
//
//	Submit ──► Attempt (dispatch to a replica, or forward to a peer)
//	              │ Answered(now, status)  the target's answer began: pass it on, start the
//	              │                        chain over there, or (ended as failed) Next
//	              │ FirstToken(now)        its first token (the proxy: byte) reached the driver
//	              │ CacheReported(tokens)  the engine said how much it had cached
//	              ▼ End(now, how) ──► Next: done, the client's error, or Retry
//	                                   (routed again: the next Attempt is
//	                                   delivered as the first was)
//
// or a rejection: an Attempt with Err set and nothing to end. End books
// the outcome (the service time, the replica's failure streak), frees the
// slot or the in-flight forward, pumps the queue into what it freed,
// applies the retry bound (Config.Retries) and the serve-here rule: a
// request whose forward failed is routed again with request.ServeHere set
// and served in this region. The drivers keep only what is theirs: the
// proxy its lock, waiting handlers and HTTP; the simulator its events.

// Attempt is one try at serving a request, handed to the driver when the
// core delivers a decision. Its methods must be called in order, from the
// driver that holds the region (they are not safe for concurrent use,
// like the Node): FirstToken at most once, CacheReported before End, End
// (or Continue) exactly once. An ended attempt ignores further calls.
type Attempt struct {
	balancer.Outcome
	// Replica names the local replica, for a Dispatch. Its slot is taken
	// until End.
	Replica string
	// Peer is the peer region as the decision saw it, for a Forward. It
	// counts as in flight there until End.
	Peer *Peer
	// PrefixBlocks is how many leading blocks of the request the chosen
	// replica was believed to hold.
	PrefixBlocks int
	// Number is 1 for a request's first attempt, n+1 for its n-th retry.
	Number int

	r        *pool
	rp       *replica      // the replica named Replica
	failedOn []*replica    // the replicas that failed the request's earlier attempts
	sent     time.Time     // when the decision was delivered
	timeout  time.Duration // FirstTokenTimeout's last answer
	first    bool          // FirstToken was reported
	ended    bool
}

// Outcome says how an attempt ended.
type Outcome int

// The outcomes of an attempt.
const (
	// Served: the target answered in full (or answered a client error that
	// went to the client as it was); for a replica, the service time
	// (from dispatch to the end) feeds the queue-wait estimate and its
	// failure streak ends.
	Served Outcome = iota
	// ReplicaFailed: the target failed before anything reached the
	// client (refused, reset, a 5xx, no first byte in time). It counts
	// toward the replica's passive ejection, and the request is routed
	// again while Config.Retries allows — served here if it was a
	// forward that failed.
	ReplicaFailed
	// TimedOut: no first token came within the attempt's
	// FirstTokenTimeout. It is evidence about the replica (see
	// pool.timedOut): its wait is learned, its dispatch cap drops if it
	// had others in flight, and it counts toward ejection only if the
	// replica gave nobody a first token meanwhile. The request is routed
	// again like ReplicaFailed, but never back to a replica it timed out
	// on: with no other replica in the region it ends with the error.
	TimedOut
	// BrokeMidStream: the target failed after its stream reached the
	// client. It counts against the replica like ReplicaFailed; End does
	// not retry it (Continue does, for a driver that can resume a stream).
	BrokeMidStream
	// Released: ended for a reason that says nothing of the target: the
	// client left, or the proxy is shutting down.
	Released
)

// Next is what End (or Answered) says comes next.
type Next struct {
	// StartOver (from Answered only): the target is the home replica of a
	// Responses chain whose engine no longer holds the previous response,
	// and the chain may start over: the driver sends it again, to the same
	// replica, as a new chain (request.Request.WithoutPrevious). The
	// attempt goes on.
	StartOver bool
	// Retry: the request was routed again. Its next attempt is delivered
	// to the driver as the first was, possibly before End returns.
	Retry bool
	// Err is what the client is told when the attempt failed and nothing
	// is retried: no retry was left, or the stream broke midway. Nil when
	// the request is done (served or released) or retried.
	Err *apierr.Error
}

// Errors End gives when it does not retry.
var (
	errExhausted = apierr.Error{Code: apierr.Upstream, Message: "no replica or region could serve the request", RetryAfter: time.Second}
	errMidStream = apierr.Error{Code: apierr.Upstream, Message: "the upstream stream failed midway"}
	errTimedOut  = apierr.Error{Code: apierr.Unavailable, Message: "the region's only replica that could serve the request gave no first token in time", RetryAfter: time.Second}
)

// Dispatched reports whether the attempt runs on a local replica.
func (a *Attempt) Dispatched() bool { return a.Err == nil && a.rp != nil }

// Forwarded reports whether the attempt was forwarded to a peer region.
func (a *Attempt) Forwarded() bool { return a.Err == nil && a.Peer != nil }

// FirstToken records that the attempt's first token reached the driver at
// now (the proxy: the first body byte). For a dispatch, its prefill no
// longer delays the replica's next requests and the time it took
// calibrates admission (pool.ttftBias).
func (a *Attempt) FirstToken(now time.Time) {
	if a.ended || a.first || a.Err != nil {
		return
	}
	a.first = true
	a.r.at(now)
	switch {
	case a.rp != nil:
		a.r.firstToken(now, a.Request)
	case a.Peer != nil:
		decrement(a.r.awaiting, a.Peer.Region)
		a.r.told(a.Peer.Region, a.r.peerFirstToken(now, a))
	}
}

// FirstTokenTimeout is how long, from when it was sent, the driver waits
// for the attempt's first token before it ends it TimedOut: for a
// dispatch, learned from the replica's recent first tokens (see
// FirstTokenFactor) — and read again while the attempt waits, since the
// region keeps learning (a hung replica's first attempts are sent before
// anything is known, with InitialFirstTokenTimeout, and are timed out as
// soon as other replicas' first tokens say how long is too long); for a
// forward, FirstTokenFactor × what was estimated for that peer (its
// queue, prefill and RTT, the decision's estimate) made as late as this
// node's forwards there have run nine times in ten (the peer's learned
// error), also read again while it waits. Never below
// MinFirstTokenTimeout.
func (a *Attempt) FirstTokenTimeout() time.Duration {
	if b := a.r.bookings[a.Request]; a.rp != nil && b != nil && b.rp == a.rp {
		a.timeout = a.r.firstTokenTimeout(b)
	} else if a.Peer != nil {
		a.timeout = a.r.forwardTimeout(a)
	} else if a.timeout == 0 {
		a.timeout = min(max(MinFirstTokenTimeout, FirstTokenFactor*a.Decision.Estimate), MaxFirstTokenTimeout)
	}
	return a.timeout
}

// CacheReported records the prompt tokens the engine reported cached
// (usage.prompt_tokens_details.cached_tokens): for a dispatch, cache-truth
// feedback for the prefix index; for a forward, a check of the cached
// prefix the peer's digest claimed (see peerCacheReported).
func (a *Attempt) CacheReported(cachedTokens int) {
	switch {
	case a.ended || a.Err != nil:
	case a.rp != nil:
		a.r.cacheReported(a.Request, cachedTokens)
	case a.Peer != nil:
		a.r.told(a.Peer.Region, a.r.peerCacheReported(a, cachedTokens))
	}
}

// End ends the attempt at now with how, and says what comes next (see
// the package's life of a request). A second End, or End of a rejection,
// does nothing and returns the zero Next.
func (a *Attempt) End(now time.Time, how Outcome) Next {
	if !a.finish(now, how) {
		return Next{}
	}
	switch how {
	case ReplicaFailed, TimedOut:
		return a.r.retry(now, a, how)
	case BrokeMidStream:
		e := errMidStream
		return Next{Err: &e}
	}
	return Next{}
}

// Answered reports the status the target's answer began with (an HTTP
// status; the simulator's engine answers 200, or 404 for a chain whose
// previous response it lost; a peer's refusal its error's status), before
// anything of it reached the client, and decides what it means — the
// rule both drivers follow:
//   - below 400, and an engine's 4xx (a replica's here, or byEngine: the
//     engine that served a forward at the peer — its word on the client's
//     request, which no other region would answer otherwise), and any 4xx
//     of a chain's home region (no other region can serve the chain: the
//     previous response is gone, the home is overloaded): the answer goes
//     to the client; Answered returns the zero Next and the attempt goes
//     on;
//   - a replica's 404 to a chain that may start over (request.StartOver)
//     and has not yet: Next.StartOver, and the attempt goes on;
//   - a 5xx, and a peer proxy's own 4xx (its refusal — its model set, its
//     limits, its overload — is never the client's fault: this node checked
//     the request already): the attempt ends ReplicaFailed, and Next says
//     what follows (a failed forward is served here).
func (a *Attempt) Answered(now time.Time, status int, byEngine bool) Next {
	if a.ended || a.Err != nil {
		return Next{}
	}
	req := a.Request
	switch {
	case a.rp != nil && status == 404 && req.StartOver && !req.Home.IsZero() && !req.StartedOver:
		req.StartedOver = true
		return Next{StartOver: true}
	case status < 400, status < 500 && (a.rp != nil || byEngine || a.Decision.Reason == policy.ReasonHome):
		return Next{}
	}
	return a.End(now, ReplicaFailed)
}

// Continue ends an attempt whose stream broke after it reached the client
// (as BrokeMidStream) and routes the request again, for a driver that
// continues the client's stream from another target (mid-stream
// failover); the retry bound applies as for a failure before the first
// token.
func (a *Attempt) Continue(now time.Time) Next {
	if !a.finish(now, BrokeMidStream) {
		return Next{}
	}
	return a.r.retry(now, a, BrokeMidStream)
}

// finish books the attempt's end once, frees what it took and pumps the
// queue; it reports whether it did (false for a rejection or a second
// end).
func (a *Attempt) finish(now time.Time, how Outcome) bool {
	if a.ended || a.Err != nil {
		return false
	}
	a.ended = true
	r := a.r
	r.at(now)
	switch {
	case a.rp != nil:
		var service time.Duration
		if !a.sent.IsZero() {
			service = now.Sub(a.sent)
		}
		r.end(a.Request, how, service)
	case a.Peer != nil:
		r.forwardDone(a.Peer.Region)
		if !a.first {
			decrement(r.awaiting, a.Peer.Region)
		}
		if how == TimedOut && !a.sent.IsZero() {
			r.peerTimedOut(a, now.Sub(a.sent))
		}
		r.told(a.Peer.Region, r.peerEnded(now, a.Peer.Region, how))
	}
	r.bal.PumpDepth(now, r, 1)
	return true
}

// retry routes a's request again, unless it has had its Retries: a
// request whose forward failed is then served here. A request that timed
// out at a replica is not sent back to it (that would only wait again):
// without another healthy replica it ends with errTimedOut.
func (r *pool) retry(now time.Time, a *Attempt, how Outcome) Next {
	if a.Number > r.cfg.Retries {
		e := errExhausted
		return Next{Err: &e}
	}
	if how == TimedOut && a.rp != nil && !r.healthyBesides(append(a.failedOn, a.rp)) {
		e := errTimedOut
		return Next{Err: &e}
	}
	if a.Peer != nil {
		a.Request.ServeHere = true
	}
	again := retried{attempts: a.Number, failedOn: a.failedOn}
	if a.rp != nil {
		again.failedOn = append(again.failedOn, a.rp)
	}
	r.retries[a.Request] = again
	r.bal.Submit(now, a.Request, r)
	return Next{Retry: true}
}

// healthyBesides reports whether a replica not in these is in service.
func (r *pool) healthyBesides(these []*replica) bool {
	for _, rp := range r.replicas {
		if rp.healthy && !slices.Contains(these, rp) {
			return true
		}
	}
	return false
}

// retried is a request routed again and not yet delivered: its attempts
// so far, and the replicas that failed it.
type retried struct {
	attempts int
	failedOn []*replica
}

// avoid takes the replicas that failed a request out of its view (as not
// healthy), while another replica is healthy: its retry goes elsewhere
// rather than back to the replica that just failed it, which prefix
// affinity would choose again until the replica is ejected. With no other
// healthy replica it may go back (the failure may have been transient).
func avoid(view []policy.Replica, replicas []*replica, failedOn []*replica) {
	failed := func(i int) bool { return slices.Contains(failedOn, replicas[i]) }
	other := false
	for i := range view {
		other = other || (view[i].Healthy && !failed(i))
	}
	if !other {
		return
	}
	for i := range view {
		if failed(i) {
			view[i].Healthy = false
		}
	}
}

// Deliver implements balancer.Env: a dispatch takes a slot on its replica
// and teaches the prefix index (and so the next digest) that the replica
// now holds the request's prefix; a forward counts as in flight at the
// peer. Then the driver gets the attempt.
func (r *pool) Deliver(o balancer.Outcome) {
	again := r.retries[o.Request]
	a := &Attempt{Outcome: o, r: r, Number: again.attempts + 1, failedOn: again.failedOn}
	delete(r.retries, o.Request)
	if !o.Submitted.IsZero() {
		a.sent = o.Submitted.Add(o.Waited)
	}
	if o.Err == nil {
		if o.Decision.StartedOver {
			o.Request.StartedOver = true // its home is gone: policy.Homing sent it as a new chain
		}
		switch o.Decision.Action {
		case policy.Dispatch:
			a.rp = r.replicas[o.Decision.Replica]
			a.Replica = a.rp.name
			a.PrefixBlocks = r.view.Local.Replicas[o.Decision.Replica].PrefixBlocks
			r.book(o, a.rp, a.PrefixBlocks)
		case policy.Forward:
			p := r.peers[o.Decision.Peer]
			a.Peer = &p
			if len(r.replicas) == 0 && o.Decision.Reason != policy.ReasonResidency && o.Decision.Reason != policy.ReasonHome {
				a.Decision.Reason = policy.ReasonNotServed // not a race the peer won: nothing here could serve it
			}
			a.PrefixBlocks = r.view.Peers[o.Decision.Peer].PrefixBlocks // what its digest claims
			r.forwarding[p.Region]++
			r.awaiting[p.Region]++
		}
	}
	r.deliver(a)
}

var _ balancer.Env = (*pool)(nil)
