package region

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"skywalker/internal/digest"
)

// trustRegion is a region whose one replica is busy and whose peer
// eu-west looks idle, so every request is forwarded while the peer's gate
// is open; what OnDistrust is told is collected.
func trustRegion(t *testing.T) (*pool, *[]*Attempt, *[]string) {
	r, got := newTestRegion(t, 1)
	r.Scraped(r.Replicas()[0], Metrics{Known: true, Waiting: 5, Running: 4})
	var told []string
	r.cfg.OnDistrust = func(peer, why string) { told = append(told, peer+": "+why) }
	r.SetPeers([]Peer{{Region: "eu-west", Jurisdiction: "eu", Healthy: true, GateOpen: true, RTT: 70 * time.Millisecond,
		Load: Load{Replicas: 64, Slots: 4096}}})
	return r, got, &told
}

// offer submits a request at now and returns its attempt if it was
// forwarded; one kept here is withdrawn, so that it cannot be forwarded
// later by a pump.
func offer(t *testing.T, r *pool, got *[]*Attempt, id string, now time.Time) *Attempt {
	t.Helper()
	rq := req(id, 1)
	n := len(*got)
	r.Submit(now, rq)
	if len(*got) > n && last(t, got).Request == rq && last(t, got).Forwarded() {
		return last(t, got)
	}
	r.Cancel(rq)
	return nil
}

// firstForwards offers six requests at once to a peer that has delivered
// nothing and returns those forwarded: EjectAfter of them.
func firstForwards(t *testing.T, r *pool, got *[]*Attempt, prefix string) []*Attempt {
	t.Helper()
	var sent []*Attempt
	for i := range 6 {
		if a := offer(t, r, got, fmt.Sprint(prefix, i), t0); a != nil {
			sent = append(sent, a)
		}
	}
	if len(sent) != r.cfg.EjectAfter {
		t.Fatalf("%d forwards at once to a peer that has delivered nothing, want %d", len(sent), r.cfg.EjectAfter)
	}
	return sent
}

func gateOf(r *pool) (bool, string) {
	p := r.View(req("probe", 1)).Peers[0]
	return p.GateOpen, p.GateReason
}

// TestAPeerIsTrustedByWhatItDelivers: a peer that has delivered nothing
// yet takes at most EjectAfter forwards at once; when they all fail it is
// distrusted (and the driver told) for PeerProbation; back on probation it
// takes one forward at a time, and one more failure distrusts it for twice
// as long; a served forward restores it.
func TestAPeerIsTrustedByWhatItDelivers(t *testing.T) {
	r, got, told := trustRegion(t)
	sent := firstForwards(t, r, got, "burst")
	if open, why := gateOf(r); open || !strings.Contains(why, "unproven") {
		t.Errorf("with %d forwards awaiting a first token: gate open %v (%q), want closed as unproven", len(sent), open, why)
	}
	failAt := t0.Add(5 * time.Second) // each timed out
	for _, a := range sent {
		a.End(failAt, ReplicaFailed)
	}
	if len(*told) != 1 || !strings.Contains((*told)[0], "3 forwards in a row failed") {
		t.Fatalf("told %q, want eu-west distrusted once, for its failed forwards", *told)
	}
	r.Pump(failAt.Add(PeerProbation - time.Millisecond))
	if open, why := gateOf(r); open || !strings.Contains(why, "distrusted") {
		t.Errorf("within its probation: gate open %v (%q), want closed as distrusted", open, why)
	}

	back := failAt.Add(PeerProbation + time.Millisecond)
	first := offer(t, r, got, "probation-1", back)
	if first == nil || offer(t, r, got, "probation-2", back) != nil {
		t.Fatalf("back from probation: want exactly one forward in flight")
	}
	first.End(back.Add(time.Second), ReplicaFailed)
	if len(*told) != 2 {
		t.Fatalf("told %q: a failure on probation must distrust it again", *told)
	}
	r.Pump(back.Add(time.Second + PeerProbation + time.Millisecond))
	if open, _ := gateOf(r); open {
		t.Error("the second distrust lasts twice as long; the gate reopened after one probation")
	}
	again := back.Add(time.Second + 2*PeerProbation + time.Millisecond)
	a := offer(t, r, got, "proof", again)
	if a == nil {
		t.Fatal("after the doubled probation: no forward")
	}
	a.FirstToken(again.Add(100 * time.Millisecond))
	a.End(again.Add(time.Second), Served)
	n := 0
	for i := range 6 {
		if offer(t, r, got, fmt.Sprint("trusted", i), again.Add(2*time.Second)) != nil {
			n++
		}
	}
	if n != 6 {
		t.Errorf("a peer that delivered took %d of 6 forwards at once, want all", n)
	}
}

// TestAPeerThatSwallowsForwardsIsDistrusted: a member that advertises idle
// capacity and never answers lets every forward run out its first-byte
// timeout (TimedOut): the third in a row distrusts it, the driver is told
// once, and no forward goes there during its probation.
func TestAPeerThatSwallowsForwardsIsDistrusted(t *testing.T) {
	r, got, told := trustRegion(t)
	sent := firstForwards(t, r, got, "swallowed")
	cut := t0.Add(5 * time.Second) // each cut at its first-byte timeout
	for i, a := range sent {
		a.End(cut, TimedOut)
		if i < len(sent)-1 && len(*told) != 0 {
			t.Fatalf("distrusted after %d timeouts, want %d", i+1, len(sent))
		}
	}
	if len(*told) != 1 || !strings.Contains((*told)[0], "eu-west: 3 forwards in a row failed") {
		t.Fatalf("told %q, want eu-west distrusted once, after its third first-byte timeout", *told)
	}
	for i := range 3 {
		if a := offer(t, r, got, fmt.Sprint("during-probation", i), cut.Add(time.Second)); a != nil {
			t.Errorf("forward %d went to the distrusted peer during its probation", i)
		}
	}
}

// TestAPeerThatDoesNotDeliverItsClaimsIsDistrusted: first tokens that
// come far later than the estimate the forwards were chosen on, EjectAfter
// times in a row, distrust the peer; one on time resets the count.
func TestAPeerThatDoesNotDeliverItsClaimsIsDistrusted(t *testing.T) {
	r, got, told := trustRegion(t)
	now := t0
	firstToken := func(late bool) {
		a := offer(t, r, got, fmt.Sprint("claim", now.UnixNano()), now)
		if a == nil {
			t.Fatal("not forwarded")
		}
		if a.Decision.Estimate <= 0 {
			t.Fatalf("the forward carries no estimate: %+v", a.Decision)
		}
		ttft := a.Decision.Estimate
		if late {
			ttft = ClaimFactor*a.Decision.Estimate + a.Peer.RTT + 2*time.Second
		}
		a.FirstToken(now.Add(ttft))
		a.End(now.Add(ttft+time.Second), Served)
		now = now.Add(ttft + 2*time.Second)
	}
	firstToken(true)
	firstToken(true)
	firstToken(false) // on time: the run of misses ends
	firstToken(true)
	firstToken(true)
	if len(*told) != 0 {
		t.Fatalf("told %q after misses broken by one on time, want nothing yet", *told)
	}
	firstToken(true)
	if len(*told) != 1 || !strings.Contains((*told)[0], "over 4× its estimate") {
		t.Errorf("told %q, want eu-west distrusted for first tokens far over its estimate", *told)
	}
	if open, _ := gateOf(r); open {
		t.Error("a distrusted peer's gate is open")
	}
}

// TestAPeerWhoseDigestClaimsACacheItLacksIsDistrusted: forwards chosen
// on a digest that claims the prompt's prefix cached, whose engine then
// reports far less cached, EjectAfter times in a row, distrust the peer;
// one that finds the cache as claimed resets the count.
func TestAPeerWhoseDigestClaimsACacheItLacksIsDistrusted(t *testing.T) {
	r, got, told := trustRegion(t)
	blocks := []uint64{11, 12, 13, 14, 15, 16, 17, 18}
	d := digest.New("eu-west", "eu-west-1", 1, 1000, 0.01)
	for _, b := range blocks {
		d.Add(b)
	}
	p := r.peers[0]
	p.Digest = d.Clone()
	r.SetPeers([]Peer{p})
	now := t0
	forward := func(cached int) {
		t.Helper()
		rq := req(fmt.Sprint("cached", now.UnixNano()), blocks...)
		r.Submit(now, rq)
		a := last(t, got)
		if a.Request != rq || !a.Forwarded() || a.PrefixBlocks != len(blocks) {
			t.Fatalf("got %+v, want a forward chosen on the digest's claim of %d blocks", a, len(blocks))
		}
		a.FirstToken(now.Add(50 * time.Millisecond))
		a.CacheReported(cached)
		a.End(now.Add(time.Second), Served)
		now = now.Add(2 * time.Second)
	}
	claimed := req("x", blocks...).CachedTokens(len(blocks))
	forward(0)
	forward(0)
	forward(claimed) // found as claimed: the run ends
	forward(claimed / 4)
	forward(0)
	if len(*told) != 0 {
		t.Fatalf("told %q after lies broken by one truth, want nothing yet", *told)
	}
	forward(0)
	if len(*told) != 1 || !strings.Contains((*told)[0], "cached prefix its digest claimed") {
		t.Errorf("told %q, want eu-west distrusted for claiming a cache it lacks", *told)
	}
}
