package balancer

import (
	"fmt"
	"testing"
	"time"

	"skywalker/internal/apierr"
	"skywalker/internal/policy"
	"skywalker/internal/request"
)

// overloadedRegion is one replica, busy, whose queue drains at perWait
// per request: skywalker's estimate for a held request grows with it.
func overloadedRegion(perWait time.Duration) *fakeRegion {
	env := newFakeRegion(1, 1)
	env.perWait = perWait
	env.replicas[0].InFlight = 1
	return env
}

func withObjective(ttft time.Duration) *Balancer {
	return New(policy.NewSkywalker(policy.DefaultSkywalkerConfig()), Config{MaxQueue: 64, MaxWait: 30 * time.Second,
		Objectives: [request.NumClasses]request.SLO{request.Standard: {TTFT: ttft}, request.Critical: {TTFT: ttft}}})
}

func lastOutcome(env *fakeRegion) Outcome { return env.outcomes[len(env.outcomes)-1] }

func TestARequestThatCannotStartInTimeIsRefusedAtOnce(t *testing.T) {
	// Each held request waits a slot (500 ms) plus 500 ms per request
	// ahead: the fourth would start after 2 s.
	env := overloadedRegion(500 * time.Millisecond)
	b := withObjective(2 * time.Second)
	for i := range 3 {
		b.Submit(t0, req(fmt.Sprint("early", i)), env)
	}
	if b.Len() != 3 || len(env.outcomes) != 0 {
		t.Fatalf("held %d, delivered %d: the first three fit within 2 s", b.Len(), len(env.outcomes))
	}
	late := req("late")
	b.Submit(t0, late, env)
	o := lastOutcome(env)
	if o.Request != late || o.Err == nil || o.Err.Code != apierr.Overloaded || o.Err.Status() != 429 {
		t.Fatalf("got %+v, want the fourth refused with 429 overloaded", o)
	}
	if s := o.Err.RetryAfterSeconds(); s < 1 {
		t.Errorf("Retry-After %d s, want an integer ≥ 1", s)
	}
	patient := req("patient")
	patient.Wait = true
	b.Submit(t0, patient, env)
	if b.Len() != 4 {
		t.Errorf("a client that asked to wait must be held: %d held", b.Len())
	}
}

func TestARegionUnderPressureForwardsBeforeItSheds(t *testing.T) {
	env := overloadedRegion(time.Second)
	// A peer whose estimate is worse than local by the policy's score (it
	// is loaded), but within the objective.
	env.peer = &policy.PeerRegion{Name: "eu-west", Jurisdiction: "eu", Healthy: true, RTT: 72 * time.Millisecond,
		GateOpen: true, QueueWait: 900 * time.Millisecond, Replicas: 2, Slots: 2, Outstanding: 4,
		Prefill: policy.PrefillProfile{PerToken: 20 * time.Microsecond}}
	b := withObjective(1500 * time.Millisecond)
	b.Submit(t0, req("a"), env)
	b.Submit(t0, req("b"), env)
	o := lastOutcome(env)
	if o.Err != nil || o.Decision.Action != policy.Forward || o.Decision.Reason != policy.ReasonOverload {
		t.Errorf("got %+v, want b forwarded to the peer that meets its objective", o)
	}
}

func TestSheddableRequestsAreNotQueuedUnderPressure(t *testing.T) {
	env := overloadedRegion(100 * time.Millisecond)
	b := withObjective(10 * time.Second)
	low := req("sheddable")
	low.Class = request.Sheddable
	b.Submit(t0, low, env)
	if o := lastOutcome(env); o.Err == nil || o.Err.Code != apierr.Overloaded {
		t.Errorf("got %+v, want a sheddable request refused while every replica is busy", o)
	}
	env.replicas[0].InFlight = 0
	free := req("sheddable-free")
	free.Class = request.Sheddable
	b.Submit(t0, free, env)
	if o := lastOutcome(env); o.Err != nil || o.Decision.Action != policy.Dispatch {
		t.Errorf("got %+v, want a sheddable request served when a replica is free", o)
	}
}

func TestAHeldRequestIsShedWhenItsObjectivePasses(t *testing.T) {
	env := overloadedRegion(100 * time.Millisecond)
	b := withObjective(2 * time.Second)
	b.Submit(t0, req("waits"), env)
	if d, ok := b.NextDeadline(); !ok || !d.Equal(t0.Add(2*time.Second)) {
		t.Errorf("next deadline %v, want the objective at 2 s", d)
	}
	b.Pump(t0.Add(2*time.Second), env)
	o := lastOutcome(env)
	if o.Err == nil || o.Err.Code != apierr.Shed || o.Err.Status() != 429 || o.Err.RetryAfterSeconds() < 1 {
		t.Fatalf("got %+v, want it shed with 429 and a Retry-After", o)
	}
	// A forwarded request has no objective here: only its deadline.
	fwd := req("forwarded")
	fwd.Forwarded = true
	b.Submit(t0, fwd, env)
	b.Pump(t0.Add(20*time.Second), env)
	if b.Len() != 1 {
		t.Errorf("a forwarded request was shed by the receiver")
	}
	b.Pump(t0.Add(31*time.Second), env)
	if o := lastOutcome(env); o.Request != fwd || o.Err == nil || o.Err.Code != apierr.QueueTimeout {
		t.Errorf("got %+v, want the forwarded request to time out at its deadline (503)", o)
	}
}

func TestFairQueuingKeepsATenantsBurstBehindItself(t *testing.T) {
	for _, fifo := range []bool{false, true} {
		env := newFakeRegion(1, 1)
		b := New(policy.NewSkywalker(policy.DefaultSkywalkerConfig()), Config{MaxQueue: 100, MaxWait: time.Minute, FIFO: fifo})
		b.Submit(t0, req("running"), env)
		for i := range 20 {
			r := req(fmt.Sprint("noisy", i))
			r.Tenant = "noisy"
			b.Submit(t0, r, env)
		}
		quiet := req("quiet")
		quiet.Tenant = "quiet"
		b.Submit(t0, quiet, env)
		pos := heldAt(b, "quiet")
		switch {
		case !fifo && pos > 1:
			t.Errorf("fair queuing: the quiet tenant's request is %d requests deep behind the noisy tenant's burst", pos)
		case fifo && pos != 20:
			t.Errorf("FIFO: the quiet tenant's request is at %d, want behind all 20", pos)
		}
	}
}

// TestInventedTenantsShareOneFlow: a client that names a new tenant for
// every request gets a fair share of its own for the first MaxTenants
// only; the rest share one flow, so a tenant that was there keeps its
// place near the front.
func TestInventedTenantsShareOneFlow(t *testing.T) {
	env := newFakeRegion(1, 1)
	b := New(policy.NewSkywalker(policy.DefaultSkywalkerConfig()), Config{MaxQueue: 1000, MaxWait: time.Minute, MaxTenants: 4})
	b.Submit(t0, req("running"), env)
	quiet := req("quiet-1")
	quiet.Tenant = "quiet"
	b.Submit(t0, quiet, env)
	for i := range 100 {
		r := req(fmt.Sprint("flood", i))
		r.Tenant = fmt.Sprint("invented-", i)
		b.Submit(t0, r, env)
	}
	again := req("quiet-2")
	again.Tenant = "quiet"
	b.Submit(t0, again, env)
	pos := heldAt(b, "quiet-2")
	// Its share: behind its first request, one from each of the three
	// tenants that got their own flow and the overflow's.
	if pos < 0 || pos > 6 {
		t.Errorf("the quiet tenant's second request is %d deep behind 100 invented tenants; want within the first 6", pos)
	}
	flows := map[string]bool{}
	b.HeldBy(func(_ request.Class, tenant string, _ int) { flows[tenant] = true })
	if len(flows) != 5 || !flows[OverflowTenant] {
		t.Errorf("flows %v: want the quiet tenant, 3 invented ones and the overflow", flows)
	}
}

func TestATenantOverItsLimitIsRefused(t *testing.T) {
	env := overloadedRegion(10 * time.Millisecond)
	b := New(policy.NewSkywalker(policy.DefaultSkywalkerConfig()), Config{MaxQueue: 100, TenantMaxHeld: 2})
	for i := range 3 {
		r := req(fmt.Sprint(i))
		r.Tenant = "greedy"
		b.Submit(t0, r, env)
	}
	if o := lastOutcome(env); b.Len() != 2 || o.Err == nil || o.Err.Code != apierr.Overloaded {
		t.Errorf("held %d, last %+v: want the third refused with 429", b.Len(), o)
	}
	other := req("other")
	other.Tenant = "modest"
	b.Submit(t0, other, env)
	if b.Len() != 3 {
		t.Error("another tenant must still be held")
	}
}

// BenchmarkSubmitWith10kQueued is the cost of admitting and fair-queuing
// one request while 10,000 are held (from 100 tenants), and of pumping it
// out again.
func BenchmarkSubmitWith10kQueued(b *testing.B) {
	env := newFakeRegion(4, 1)
	for i := range env.replicas {
		env.replicas[i].InFlight = 1
	}
	bal := New(policy.NewSkywalker(policy.DefaultSkywalkerConfig()), Config{MaxQueue: 1 << 20, MaxWait: time.Hour,
		Objectives: [request.NumClasses]request.SLO{request.Standard: {TTFT: time.Hour}}})
	mk := func(i int) *request.Request {
		r := req(fmt.Sprint(i))
		r.Tenant = fmt.Sprint("tenant-", i%100)
		return r
	}
	for i := range 10_000 {
		bal.Submit(t0, mk(i), env)
	}
	if bal.Len() != 10_000 {
		b.Fatalf("held %d", bal.Len())
	}
	reqs := make([]*request.Request, b.N)
	for i := range reqs {
		reqs[i] = mk(10_000 + i)
	}
	b.ResetTimer()
	for i := range b.N {
		bal.Submit(t0, reqs[i], env)
		bal.Cancel(reqs[i])
	}
}

// heldAt is the position of the request id among the held, or -1.
func heldAt(b *Balancer, id string) int {
	for i, h := range b.Held(t0) {
		if h.ID == id {
			return i
		}
	}
	return -1
}

func TestAHeldRequestIsServedLateRatherThanShedWhenAReplicaHasRoom(t *testing.T) {
	env := overloadedRegion(100 * time.Millisecond)
	b := withObjective(2 * time.Second)
	b.Submit(t0, req("waits"), env)
	b.Submit(t0, req("behind"), env)
	env.replicas[0].InFlight = 0 // a slot frees just as the objectives pass
	b.Expire(t0.Add(2*time.Second), env)
	o := env.outcomes[0]
	if o.Err != nil || o.Decision.Action != policy.Dispatch || o.Request.ID != "waits" {
		t.Fatalf("got %+v, want the first served late on the free slot, not shed", o)
	}
	if o := lastOutcome(env); o.Request.ID != "behind" || o.Err == nil || o.Err.Code != apierr.Shed {
		t.Errorf("got %+v, want the second shed: the slot is taken", o)
	}
}

func TestALocalBiasDoesNotKeepAPeerThatFitsFromTakingTheRequest(t *testing.T) {
	// The region's own estimates run 3× late (its bias); the peer's
	// estimate is its own, within reach of a 1.5 s objective by the
	// peer's learned error: the request goes there rather than being
	// refused.
	env := overloadedRegion(time.Second)
	env.bias = 3
	env.peer = &policy.PeerRegion{Name: "eu-west", Jurisdiction: "eu", Healthy: true, RTT: 72 * time.Millisecond,
		GateOpen: true, QueueWait: 900 * time.Millisecond, Replicas: 2, Slots: 2, Outstanding: 4,
		Prefill: policy.PrefillProfile{PerToken: 20 * time.Microsecond}}
	b := withObjective(1500 * time.Millisecond)
	b.Submit(t0, req("a"), env)
	o := lastOutcome(env)
	if o.Err != nil || o.Decision.Action != policy.Forward {
		t.Errorf("got %+v (%v), want it forwarded to the peer that meets its objective", o.Decision, o.Err)
	}
}

func TestThePumpDrainsTheBackOfTheQueueToAPeerWithRoom(t *testing.T) {
	// Without its congestion term the policy compares estimates alone:
	// the head of the queue starts here within about a second, the tail
	// waits longer here than a forward 600 ms away takes. The peer comes
	// up once ten requests are held; a pump whose scan from the head
	// stops after three that stay must still reach the tail.
	cfg := policy.DefaultSkywalkerConfig()
	cfg.CongestionWeight = 0
	b := New(policy.NewSkywalker(cfg), Config{MaxQueue: 64, MaxWait: time.Minute, ScanDepth: 3})
	env := overloadedRegion(200 * time.Millisecond)
	for i := range 10 {
		b.Submit(t0, req(fmt.Sprint("q", i)), env)
	}
	if b.Len() != 10 {
		t.Fatalf("held %d, want 10", b.Len())
	}
	env.peer = &policy.PeerRegion{Name: "eu-west", Jurisdiction: "eu", Healthy: true, RTT: 600 * time.Millisecond,
		GateOpen: true, Replicas: 4, Slots: 32, Prefill: policy.PrefillProfile{PerToken: 20 * time.Microsecond}}
	b.Pump(t0.Add(10*time.Millisecond), env)
	var moved []string
	for _, o := range env.outcomes {
		if o.Err == nil && o.Decision.Action == policy.Forward {
			moved = append(moved, o.Request.ID)
		}
	}
	if len(moved) == 0 || b.Len()+len(moved) != 10 {
		t.Fatalf("forwarded %v, %d still held: want the back of the queue drained", moved, b.Len())
	}
	for _, id := range moved {
		if id == "q0" || id == "q1" || id == "q2" {
			t.Errorf("%s, at the head, was sent away: it starts here sooner", id)
		}
	}
}
