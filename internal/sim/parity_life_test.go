package sim

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"skywalker/internal/apierr"
	"skywalker/internal/engine"
	"skywalker/internal/policy"
	"skywalker/internal/region"
	"skywalker/internal/request"
)

// The drivers' parity of lifecycles: both drivers run one fault script —
// a failure before the first byte and its retry, a failed forward served
// here, a client that leaves, a replica that dies with one stream past
// its first token and others before theirs, a peer's 429 (its refusal:
// served here), a chain whose home engine lost its previous response
// (started over there), and a hung engine (its dispatch times out by the
// learned first-token timeout and goes elsewhere) — each the way it meets
// the fault (the proxy through its Router as its relay calls it, the
// simulator through its own event handlers), and must book the same: the
// same replicas' in-flight, failure streaks and health, the same load
// summary (forwards in flight, queue), the same attempts. Booking any
// step differently in either driver fails it. (Mid-stream failover,
// Attempt.Continue, is the proxy's alone and is tested in the region.)
func TestProxyAndSimulatorLiveARequestAlike(t *testing.T) {
	p := newParity(t)
	ctx := context.Background()
	proxyAttempt := map[string]*region.Attempt{} // by request ID, the current one
	sims := map[string]*simRequest{}

	booked := func(when string) {
		t.Helper()
		if ps, ss := p.router.ReplicaStates(), p.us.core.Snapshot(p.us.now()).Replicas; !reflect.DeepEqual(ps, ss) {
			t.Errorf("%s: replicas booked differently\nproxy %+v\nsim   %+v", when, ps, ss)
		}
		if pl, sl := p.router.Load(), p.us.core.Load(); !reflect.DeepEqual(pl, sl) {
			t.Errorf("%s: load summaries differ\nproxy %+v\nsim   %+v", when, pl, sl)
		}
	}
	target := func(a *region.Attempt) string {
		switch {
		case a == nil:
			return "none"
		case a.Err != nil:
			return "rejected " + string(a.Err.Code)
		case a.Replica != "":
			return fmt.Sprintf("dispatch to %s (attempt %d, %s)", a.Replica, a.Number, a.Decision.Reason)
		default:
			return fmt.Sprintf("forward to %s (attempt %d)", a.Peer.Region, a.Number)
		}
	}
	same := func(when, id string) {
		t.Helper()
		if pt, st := target(proxyAttempt[id]), target(sims[id].attempt); sims[id].forward != nil {
			st = target(sims[id].forward)
			if pt != st {
				t.Errorf("%s: %s is %s at the proxy, %s in the simulator", when, id, pt, st)
			}
		} else if pt != st {
			t.Errorf("%s: %s is %s at the proxy, %s in the simulator", when, id, pt, st)
		}
	}
	arrive := func(id string, req *request.Request) {
		t.Helper()
		p.step(time.Millisecond)
		preq, sreq := *req, *req
		preq.ID, sreq.ID = id, id
		o, err := p.router.Route(ctx, &preq)
		if err != nil {
			t.Fatalf("proxy: %s not routed: %v", id, err)
		}
		proxyAttempt[id] = o.Attempt
		sr := &simRequest{req: &sreq, client: 0, ingress: 0, at: -1, forwardedTo: -1, arrival: p.w.now, firstToken: -1}
		sims[id] = sr
		mustHandle(t, p.w, event{kind: evArrival, router: 0, req: sr})
		same("on arrival", id)
	}
	// endProxy ends id's proxy attempt as the relay would, keeping the
	// attempt the core routes next.
	endProxy := func(id string, how region.Outcome) region.Next {
		t.Helper()
		next, n, err := p.router.End(ctx, proxyAttempt[id], how)
		if err != nil {
			t.Fatalf("proxy: ending %s: %v", id, err)
		}
		proxyAttempt[id] = next.Attempt
		return n
	}

	// 1. A dispatched request's replica fails before the first byte: it
	// counts against the replica and the request is routed again.
	arrive("a", probe("short, nothing cached", 2, ""))
	if proxyAttempt["a"].Replica == "" {
		t.Fatalf("the script needs a dispatched: %s", target(proxyAttempt["a"]))
	}
	if n := endProxy("a", region.ReplicaFailed); !n.Retry {
		t.Fatalf("proxy: a's failure was not retried: %+v", n)
	}
	sa := sims["a"]
	sa.replica.eng.Abort(sa.seq) // the engine failed it
	p.step(time.Millisecond)
	p.us.failedBeforeFirstByte(sa)
	booked("after a failed before its first byte")
	same("a's retry", "a")

	// 2. A forward whose peer answers 503 is routed again and served here.
	arrive("b", probe("long, cached at eu-west", 24, "", p.shared...))
	if proxyAttempt["b"].Peer == nil {
		t.Fatalf("the script needs b forwarded: %s", target(proxyAttempt["b"]))
	}
	booked("with b forwarded")
	if n := endProxy("b", region.ReplicaFailed); !n.Retry {
		t.Fatalf("proxy: b's failed forward was not retried: %+v", n)
	}
	p.step(time.Millisecond)
	p.w.forwardFailed(sims["b"], p.us, &apierr.Error{Code: apierr.Unavailable, Message: "peer overloaded"})
	booked("after b's forward failed")
	same("b served here", "b")
	if pa, sa := proxyAttempt["b"], sims["b"].attempt; pa == nil || sa == nil || pa.Decision.Reason == policy.ReasonForwarded ||
		!pa.Request.ServeHere || !sa.Request.ServeHere || sa.Request.Forwarded {
		t.Errorf("b after its failed forward: proxy %s, sim %s; want served here with the local rule's reason", target(pa), target(sa))
	}

	// 3. A client leaves while its request runs.
	arrive("c", probe("cached on a local replica", 10, "", 1, 2, 3, 4))
	endProxy("c", region.Released)
	p.step(time.Millisecond)
	p.w.giveUp(sims["c"])
	booked("after c's client left")

	// 4. A replica dies holding a stream past its first token and
	// requests before theirs: the first breaks midway, the others are
	// routed again.
	arrive("d", probe("short again", 3, ""))
	arrive("e", probe("another short one", 2, ""))
	sd := sims["d"]
	if sd.seq == nil {
		t.Fatalf("the script needs d running: %s", target(sd.attempt))
	}
	rp := sd.replica
	p.step(time.Millisecond)
	sink{rp: rp}.FirstToken(sd.seq, p.now())
	if _, n, _ := p.router.Answered(ctx, proxyAttempt["d"], 200, true, true); n != (region.Next{}) { // its first byte, as the relay hears it
		t.Fatalf("proxy: d's 200 gave %+v, want it passed on", n)
	}
	var lost []string
	var background []*engine.Sequence // the world's own load (prepare), no request of the router's
	rp.eng.ForEach(func(s *engine.Sequence) {
		if s.Data == nil {
			background = append(background, s)
		} else {
			lost = append(lost, s.ID)
		}
	})
	for _, s := range background {
		rp.eng.Abort(s)
	}
	p.step(time.Millisecond)
	for _, id := range lost {
		how := region.ReplicaFailed
		if sims[id].firstToken >= 0 {
			how = region.BrokeMidStream
		}
		endProxy(id, how)
	}
	p.us.crash(rp)
	booked(fmt.Sprintf("after %s died holding %v", rp.name, lost))
	for _, id := range lost {
		if id != "d" {
			same("a retry after the crash", id)
		}
	}
	if sd.gone != true || proxyAttempt["d"] != nil {
		t.Errorf("d broke midway: the simulator dropped it %v, the proxy has a next attempt %s", sd.gone, target(proxyAttempt["d"]))
	}

	// 5. A peer refuses a forward with 429: its refusal is never the
	// client's fault (region.Attempt.Answered); the request is served
	// here on both sides.
	arrive("f", probe("long, cached at eu-west, again", 24, "", p.shared...))
	if proxyAttempt["f"].Peer == nil {
		t.Fatalf("the script needs f forwarded: %s", target(proxyAttempt["f"]))
	}
	p.step(time.Millisecond)
	next, n, err := p.router.Answered(ctx, proxyAttempt["f"], 429, false, true)
	if err != nil || !n.Retry {
		t.Fatalf("proxy: a peer's 429 gave %+v (%v), want the forward failed and f routed again", n, err)
	}
	proxyAttempt["f"] = next.Attempt
	p.w.forwardFailed(sims["f"], p.us, &apierr.Error{Code: apierr.Overloaded, Message: "over its share"})
	booked("after the peer refused f with 429")
	same("f served here", "f")
	if sims["f"].gone {
		t.Error("the simulator passed the peer's 429 to f's client; the proxy serves f here")
	}

	// 6. A chain's home engine restarted and lost the previous response:
	// it answers 404, and the chain, which may start over, starts over at
	// its home on both sides.
	var home *replica
	for _, rp := range p.us.replicas {
		if rp.down == 0 {
			home = rp // one the crash above left up
		}
	}
	chain := probe("a chain's next turn", 4, "")
	chain.Session, chain.PreviousResponse = "s-1", "resp_previous"
	p.w.cfg.ResponsesStartOver = true
	p.w.chains.last = map[string]request.Home{"s-1": {Region: "us-east", Replica: home.name}}
	p.w.chains.epochs = map[string]uint32{"s-1": home.epoch + 1} // an earlier incarnation served it
	pchain := *chain
	pchain.Home, pchain.Resent, pchain.StartOver = request.Home{Region: "us-east", Replica: home.name}, true, true
	pchain.ID = "g"
	p.step(time.Millisecond)
	o, err := p.router.Route(ctx, &pchain)
	if err != nil || o.Replica != home.name {
		t.Fatalf("proxy: the chain's turn went to %s (%v), want its home %s", target(o.Attempt), err, home.name)
	}
	proxyAttempt["g"] = o.Attempt
	if _, n, _ := p.router.Answered(ctx, o.Attempt, 404, true, true); !n.StartOver {
		t.Fatalf("proxy: the home's 404 gave %+v, want the chain started over", n)
	}
	if _, n, _ := p.router.Answered(ctx, o.Attempt, 200, true, false); n != (region.Next{}) {
		t.Fatalf("proxy: the started-over chain's 200 gave %+v, want it passed on", n)
	}
	sg := &simRequest{req: chain, client: 0, ingress: 0, at: -1, forwardedTo: -1, arrival: p.w.now, firstToken: -1}
	chain.ID = "g"
	sims["g"] = sg
	mustHandle(t, p.w, event{kind: evArrival, router: 0, req: sg})
	same("the chain's turn", "g")
	booked("after the chain started over")
	if !pchain.StartedOver || !chain.StartedOver || sg.gone || sg.seq == nil {
		t.Errorf("the chain started over: proxy %v, simulator %v (dropped %v, running %v); want both, running at home",
			pchain.StartedOver, chain.StartedOver, sg.gone, sg.seq != nil)
	}

	// 7. An engine hangs: it takes the request and gives no token. The
	// learned first-token timeout ends the attempt TimedOut on both sides
	// (the simulator by its own timer) and the request goes elsewhere.
	arrive("h", probe("one more short one", 2, ""))
	sh := sims["h"]
	if sh.replica == nil || proxyAttempt["h"].Replica != sh.replica.name {
		t.Fatalf("the script needs h dispatched alike: %s", target(proxyAttempt["h"]))
	}
	sh.replica.hung++
	limit := proxyAttempt["h"].FirstTokenTimeout()
	p.step(limit)
	mustHandle(t, p.w, event{kind: evFirstTokenCheck, router: 0, req: sh, payload: sh.attempt})
	if n := endProxy("h", region.TimedOut); !n.Retry {
		t.Fatalf("proxy: h's timeout was not retried: %+v", n)
	}
	booked(fmt.Sprintf("after h timed out at %s after %v", sh.replica.name, limit))
	same("h's retry", "h")
	if p.w.timeouts != 1 {
		t.Errorf("the simulator ended %d attempts TimedOut, want 1 (h's)", p.w.timeouts)
	}
}
