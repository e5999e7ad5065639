package balancer

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"skywalker/internal/apierr"
	"skywalker/internal/policy"
	"skywalker/internal/request"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fakeRegion is a deterministic Env: replicas with a dispatch cap, one
// optional peer, and a log of every outcome.
type fakeRegion struct {
	replicas []policy.Replica
	peer     *policy.PeerRegion
	perWait  time.Duration
	bias     float64 // the region's TTFTBias; 0 is none
	outcomes []Outcome
}

func newFakeRegion(replicas, capacity int) *fakeRegion {
	f := &fakeRegion{perWait: 25 * time.Millisecond}
	for i := range replicas {
		f.replicas = append(f.replicas, policy.Replica{Name: fmt.Sprint(i), Healthy: true, MaxInFlight: capacity})
	}
	return f
}

func (f *fakeRegion) View(*request.Request) *policy.View {
	v := &policy.View{Local: policy.LocalRegion{Name: "us-east", Jurisdiction: "us",
		Replicas: append([]policy.Replica(nil), f.replicas...), PerRequestWait: f.perWait,
		Prefill: policy.PrefillProfile{PerToken: 20 * time.Microsecond}, TTFTBias: f.bias}}
	if f.peer != nil {
		v.Peers = []policy.PeerRegion{*f.peer}
	}
	return v
}

func (f *fakeRegion) Deliver(o Outcome) {
	f.outcomes = append(f.outcomes, o)
	if o.Err == nil && o.Decision.Action == policy.Dispatch {
		f.replicas[o.Decision.Replica].InFlight++
	}
}

// finish frees one slot on replica i.
func (f *fakeRegion) finish(i int) { f.replicas[i].InFlight-- }

func (f *fakeRegion) ids() []string {
	var out []string
	for _, o := range f.outcomes {
		out = append(out, o.Request.ID)
	}
	return out
}

func req(id string) *request.Request {
	return &request.Request{ID: id, Region: "us-east", PromptTokens: 1000, BlockTokens: 128}
}

func newSkywalker() *Balancer {
	return New(policy.NewSkywalker(policy.DefaultSkywalkerConfig()), Config{MaxQueue: 8, MaxWait: 10 * time.Second})
}

func TestHoldsWhileReplicasAreBusyAndDispatchesInOrder(t *testing.T) {
	env := newFakeRegion(2, 1)
	b := newSkywalker()
	for i := range 5 {
		b.Submit(t0, req(fmt.Sprint(i)), env)
	}
	if got := fmt.Sprint(env.ids()); got != "[0 1]" {
		t.Fatalf("dispatched %s at once, want the two that fit", got)
	}
	if b.Len() != 3 {
		t.Fatalf("held %d, want 3", b.Len())
	}
	env.finish(1)
	b.Pump(t0.Add(time.Second), env)
	env.finish(0)
	b.Pump(t0.Add(2*time.Second), env)
	if got := fmt.Sprint(env.ids()); got != "[0 1 2 3]" {
		t.Errorf("dispatch order %s, want FIFO [0 1 2 3]", got)
	}
	if o := env.outcomes[2]; o.Decision.Replica != 1 || o.Waited != time.Second {
		t.Errorf("request 2 went to replica %d after %v; want the freed replica 1 after 1s", o.Decision.Replica, o.Waited)
	}
}

func TestANewRequestDoesNotOvertakeHeldOnes(t *testing.T) {
	env := newFakeRegion(1, 1)
	b := newSkywalker()
	b.Submit(t0, req("a"), env)
	b.Submit(t0, req("b"), env) // held
	env.finish(0)               // a slot frees, but nobody pumped yet
	b.Submit(t0, req("c"), env)
	if got := fmt.Sprint(env.ids()); got != "[a b]" {
		t.Errorf("got %s: the held request b must take the free slot before c", got)
	}
}

func TestPriorityOrdersTheQueue(t *testing.T) {
	env := newFakeRegion(1, 1)
	b := newSkywalker()
	b.Submit(t0, req("running"), env)
	low, high, body := req("low"), req("high"), req("body-priority")
	high.Class = request.Critical
	body.Priority = -1_000_000 // vLLM's field: passed to the engine, never used to jump the queue
	b.Submit(t0, low, env)
	b.Submit(t0, body, env)
	b.Submit(t0, high, env)
	env.finish(0)
	b.Pump(t0, env)
	env.finish(0)
	b.Pump(t0, env)
	if got := fmt.Sprint(env.ids()); got != "[running high low]" {
		t.Errorf("got %s, want the critical request first, then the standard ones in order", got)
	}
}

func TestReroutesAHeldRequestToAPeerWhenTheLocalEstimateDegrades(t *testing.T) {
	env := newFakeRegion(1, 1)
	env.peer = &policy.PeerRegion{Name: "eu-west", Jurisdiction: "eu", Healthy: true, RTT: 72 * time.Millisecond,
		GateOpen: true, QueueWait: 200 * time.Millisecond, Replicas: 2, Slots: 2, Outstanding: 2,
		Prefill: policy.PrefillProfile{PerToken: 20 * time.Microsecond}}
	// Estimates alone: both regions are equally loaded, so the congestion
	// term would only add the same amount to both scores.
	cfg := policy.DefaultSkywalkerConfig()
	cfg.CongestionWeight = 0
	b := New(policy.NewSkywalker(cfg), Config{MaxQueue: 8, MaxWait: 10 * time.Second})
	b.Submit(t0, req("running"), env)
	b.Submit(t0, req("held"), env)
	if b.Len() != 1 {
		t.Fatalf("want the second request held while local looks better")
	}
	env.perWait = time.Second // the local queue drains far slower than thought
	b.Pump(t0.Add(100*time.Millisecond), env)
	last := env.outcomes[len(env.outcomes)-1]
	if last.Request.ID != "held" || last.Decision.Action != policy.Forward || last.Decision.Region != "eu-west" {
		t.Errorf("got %+v, want the held request forwarded to eu-west", last)
	}
	if b.Len() != 0 {
		t.Errorf("queue still holds %d", b.Len())
	}
}

func TestExpiresAtTheDeadlineWithATypedReason(t *testing.T) {
	env := newFakeRegion(1, 1)
	b := newSkywalker()
	b.Submit(t0, req("running"), env)
	own := req("own-deadline")
	own.Deadline = t0.Add(2 * time.Second)
	b.Submit(t0, own, env)
	b.Submit(t0, req("default-deadline"), env)
	if d, ok := b.NextDeadline(); !ok || !d.Equal(t0.Add(2*time.Second)) {
		t.Errorf("NextDeadline = %v %v, want the request's own deadline", d, ok)
	}
	b.Pump(t0.Add(2*time.Second), env)
	b.Pump(t0.Add(10*time.Second), env)
	if len(env.outcomes) != 3 {
		t.Fatalf("outcomes %v", env.ids())
	}
	for _, o := range env.outcomes[1:] {
		if o.Err == nil || o.Err.Code != apierr.QueueTimeout || o.Err.Status() != 503 || o.Err.RetryAfter <= 0 {
			t.Errorf("%s: got %+v, want a 503 queue timeout with Retry-After", o.Request.ID, o.Err)
		}
	}
	if env.outcomes[1].Request.ID != "own-deadline" || env.outcomes[1].Waited != 2*time.Second {
		t.Errorf("first expiry %s after %v", env.outcomes[1].Request.ID, env.outcomes[1].Waited)
	}
}

func TestAFullQueueRejectsWith429(t *testing.T) {
	env := newFakeRegion(1, 1)
	b := New(policy.NewSkywalker(policy.DefaultSkywalkerConfig()), Config{MaxQueue: 2})
	for i := range 4 {
		b.Submit(t0, req(fmt.Sprint(i)), env)
	}
	last := env.outcomes[len(env.outcomes)-1]
	if last.Request.ID != "3" || last.Err == nil || last.Err.Status() != 429 || last.Err.RetryAfter <= 0 {
		t.Errorf("got %+v, want request 3 rejected with 429 and Retry-After", last)
	}
}

func TestResidencyNobodyCanServeIsRejectedAtOnce(t *testing.T) {
	env := newFakeRegion(1, 1)
	b := newSkywalker()
	r := req("eu-only")
	r.Residency = "eu"
	b.Submit(t0, r, env)
	if len(env.outcomes) != 1 || env.outcomes[0].Err == nil || env.outcomes[0].Err.Status() != 503 {
		t.Errorf("got %+v, want an immediate 503", env.outcomes)
	}
}

func TestCancelRemovesWithoutDelivering(t *testing.T) {
	env := newFakeRegion(1, 1)
	b := newSkywalker()
	b.Submit(t0, req("running"), env)
	gone := req("gone")
	b.Submit(t0, gone, env)
	if !b.Cancel(gone) || b.Len() != 0 || b.Cancel(gone) {
		t.Error("Cancel should remove a held request exactly once")
	}
	if len(b.Held(t0)) != 0 {
		t.Error("Held lists a cancelled request")
	}
}

// TestNothingIsLostSilently drives random submissions, completions and
// pumps through every policy and checks that each request is delivered
// exactly once, or is still held.
func TestNothingIsLostSilently(t *testing.T) {
	for _, name := range policy.Names {
		t.Run(name, func(t *testing.T) {
			p, _ := policy.New(name, policy.DefaultConfig())
			rng := rand.New(rand.NewPCG(9, 9))
			env := newFakeRegion(3, 2)
			env.peer = &policy.PeerRegion{Name: "eu-west", Jurisdiction: "eu", Healthy: true, RTT: 72 * time.Millisecond,
				GateOpen: true, QueueWait: 300 * time.Millisecond, Replicas: 2, Slots: 4, Outstanding: 3}
			b := New(p, Config{MaxQueue: 20, MaxWait: 5 * time.Second, ScanDepth: 4, TenantMaxHeld: 4,
				Objectives: [request.NumClasses]request.SLO{request.Standard: {TTFT: 2 * time.Second}, request.Critical: {TTFT: 3 * time.Second}}})
			now := t0
			submitted := map[string]bool{}
			for i := range 3000 {
				now = now.Add(time.Duration(rng.IntN(200)) * time.Millisecond)
				switch rng.IntN(3) {
				case 0:
					r := req(fmt.Sprint(i))
					r.Class = request.Classes[rng.IntN(3)]
					r.Tenant = fmt.Sprint("t", rng.IntN(4))
					r.Wait = rng.IntN(5) == 0
					if rng.IntN(10) == 0 {
						r.Residency = []string{"us", "eu", "ap"}[rng.IntN(3)]
					}
					submitted[r.ID] = true
					b.Submit(now, r, env)
				case 1:
					if j := rng.IntN(3); env.replicas[j].InFlight > 0 {
						env.finish(j)
					}
					b.Pump(now, env)
				default:
					env.replicas[rng.IntN(3)].Healthy = rng.IntN(4) > 0
					b.Pump(now, env)
				}
			}
			delivered := map[string]int{}
			for _, o := range env.outcomes {
				delivered[o.Request.ID]++
				if o.Err == nil && o.Decision.Action != policy.Dispatch && o.Decision.Action != policy.Forward {
					t.Fatalf("%s delivered with action %s and no error", o.Request.ID, o.Decision.Action)
				}
			}
			for _, h := range b.Held(now) {
				delivered[h.ID]++
			}
			for id := range submitted {
				if delivered[id] != 1 {
					t.Fatalf("request %s accounted for %d times, want exactly once", id, delivered[id])
				}
			}
		})
	}
}
