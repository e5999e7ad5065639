package region

import (
	"fmt"
	"math"
	"testing"
	"time"

	"skywalker/internal/balancer"
	"skywalker/internal/policy"
	"skywalker/internal/request"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// newTestRegion returns a region of n replicas routing by skywalker whose
// deliveries are collected.
func newTestRegion(t *testing.T, n int) (*pool, *[]*Attempt) {
	t.Helper()
	var got []*Attempt
	r, err := newPool(Config{Name: "us-east", Jurisdiction: "us", Node: "us-1", MaxInFlight: 4, Retries: 2,
		Prefill: policy.PrefillProfile{PerToken: 100 * time.Microsecond}}, policy.NewSkywalker(policy.DefaultSkywalkerConfig()),
		func(d *Attempt) { got = append(got, d) })
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("r%d", i)
	}
	if err := r.SetReplicas(Specs(names...)); err != nil {
		t.Fatal(err)
	}
	return r, &got
}

func req(id string, blocks ...uint64) *request.Request {
	return &request.Request{ID: id, Region: "us-east", PromptTokens: 128 * max(len(blocks), 1), BlockTokens: 128, Blocks: blocks, MaxTokens: 8}
}

func TestNewRefusesWhatItCannotRun(t *testing.T) {
	pol := policy.LocalLeastLoad{}
	deliver := func(*Attempt) {}
	for _, tc := range []struct {
		name    string
		cfg     Config
		pol     policy.Policy
		deliver func(*Attempt)
	}{
		{"no name", Config{}, pol, deliver},
		{"no policy", Config{Name: "x"}, nil, deliver},
		{"no delivery", Config{Name: "x"}, pol, nil},
	} {
		if _, err := newPool(tc.cfg, tc.pol, tc.deliver); err == nil {
			t.Errorf("%s: New accepted it", tc.name)
		}
	}
}

func TestDispatchTakesASlotAndTeachesTheIndex(t *testing.T) {
	r, got := newTestRegion(t, 2)
	r.Submit(t0, req("a", 1, 2, 3))
	if len(*got) != 1 || (*got)[0].rp == nil || (*got)[0].Decision.Action != policy.Dispatch {
		t.Fatalf("deliveries %+v: want one dispatch", *got)
	}
	d := (*got)[0]
	if d.rp.InFlight() != 1 || d.PrefixBlocks != 0 {
		t.Errorf("in flight %d, prefix %d: want 1 and 0 (nothing was cached yet)", d.rp.InFlight(), d.PrefixBlocks)
	}
	// The same prefix again: the index now says that replica holds it.
	r.end(d.Request, Served, 100*time.Millisecond)
	r.Submit(t0, req("b", 1, 2, 3, 4))
	d2 := (*got)[1]
	if d2.Replica != d.Replica || d2.PrefixBlocks != 3 {
		t.Errorf("second request on %s with %d cached blocks, want %s with 3", d2.Replica, d2.PrefixBlocks, d.Replica)
	}
	if r.IndexedBlocks(d.rp) != 4 {
		t.Errorf("indexed blocks %d, want 4", r.IndexedBlocks(d.rp))
	}
}

func TestEjectAndReadmitRule(t *testing.T) {
	steps := []struct {
		name        string
		do          func(r *pool, rp *replica)
		wantHealthy bool
	}{
		{"two failures keep it", func(r *pool, rp *replica) {
			r.end(dispatched(r, rp), ReplicaFailed, 0)
			r.end(dispatched(r, rp), ReplicaFailed, 0)
		}, true},
		{"a success resets the streak", func(r *pool, rp *replica) { r.end(dispatched(r, rp), Served, time.Second) }, true},
		{"a failed check and two failed requests eject", func(r *pool, rp *replica) {
			r.HealthChecked(rp, false)
			r.end(dispatched(r, rp), ReplicaFailed, 0)
			r.end(dispatched(r, rp), ReplicaFailed, 0)
		}, false},
		{"one passed check is not enough", func(r *pool, rp *replica) { r.HealthChecked(rp, true) }, false},
		{"a failed check restarts the count", func(r *pool, rp *replica) { r.HealthChecked(rp, false); r.HealthChecked(rp, true) }, false},
		{"the second pass in a row re-admits", func(r *pool, rp *replica) { r.HealthChecked(rp, true) }, true},
		// Healthy to /health, failing requests (an engine that hangs):
		// re-admitted on probation, it is ejected at its first failure,
		// and kept out twice as long.
		{"on probation one failure ejects", func(r *pool, rp *replica) { r.end(dispatched(r, rp), ReplicaFailed, 0) }, false},
		{"a second ejection takes twice the passes", func(r *pool, rp *replica) {
			for range 3 {
				r.HealthChecked(rp, true)
			}
		}, false},
		{"the fourth pass re-admits", func(r *pool, rp *replica) { r.HealthChecked(rp, true) }, true},
		{"serving a request ends probation", func(r *pool, rp *replica) {
			r.end(dispatched(r, rp), Served, time.Second)
			r.end(dispatched(r, rp), ReplicaFailed, 0)
		}, true},
	}
	r, _ := newTestRegion(t, 1)
	rp := r.Replicas()[0]
	r.index.Insert(rp.target, []uint64{7, 8}, nil)
	for _, s := range steps {
		s.do(r, rp)
		if rp.Healthy() != s.wantHealthy {
			t.Fatalf("%s: healthy=%v, want %v", s.name, rp.Healthy(), s.wantHealthy)
		}
		if !s.wantHealthy && r.IndexedBlocks(rp) != 0 {
			t.Fatalf("%s: an ejected replica keeps %d indexed blocks; its cache may be gone", s.name, r.IndexedBlocks(rp))
		}
	}
	if rp.InFlight() != 0 {
		t.Errorf("in flight %d after releases, want never below 0", rp.InFlight())
	}
}

func TestViewTakesConcurrencyFromRunningOrInFlight(t *testing.T) {
	tests := []struct {
		name              string
		running, inFlight []int
		want              time.Duration // PerRequestWait for a 1.2 s service time
	}{
		{"idle: one per replica", []int{0, 0, 0}, []int{0, 0, 0}, 400 * time.Millisecond},
		{"engines report more than we sent", []int{6, 6, 0}, []int{1, 0, 0}, 1200 * time.Millisecond / 13},
		{"we sent more than the last scrape saw", []int{0, 0, 0}, []int{4, 2, 0}, 1200 * time.Millisecond / 7},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := newTestRegion(t, 3)
			r.service.Observe(1200 * time.Millisecond)
			for i, rp := range r.Replicas() {
				r.Scraped(rp, Metrics{Known: true, Running: tc.running[i]})
				rp.inFlight = tc.inFlight[i]
			}
			if got := r.View(req("x")).Local.PerRequestWait; got != tc.want {
				t.Errorf("PerRequestWait %v, want %v", got, tc.want)
			}
			if got := r.Load(); got.Outstanding != tc.inFlight[0]+tc.inFlight[1] || got.Replicas != 3 || got.Slots != 12 {
				t.Errorf("load %+v", got)
			}
		})
	}
}

func TestForwardsCountAtThePeerUntilDone(t *testing.T) {
	r, got := newTestRegion(t, 1)
	for _, rp := range r.Replicas() {
		r.Scraped(rp, Metrics{Known: true, Waiting: 5, Running: 4}) // busy: hold
	}
	peer := Peer{Region: "eu-west", Jurisdiction: "eu", Healthy: true, GateOpen: true, RTT: 70 * time.Millisecond,
		Load: Load{Replicas: 4, Slots: 256, Outstanding: 10}}
	r.SetPeers([]Peer{peer})
	r.Submit(t0, req("a", 1))
	if len(*got) != 1 || (*got)[0].Peer == nil || (*got)[0].Peer.Region != "eu-west" {
		t.Fatalf("deliveries %+v: want a forward to eu-west", *got)
	}
	if r.forwardingTo("eu-west") != 1 {
		t.Fatalf("forwarding %d, want 1", r.forwardingTo("eu-west"))
	}
	if v := r.View(req("b")); v.Peers[0].Outstanding != 11 {
		t.Errorf("peer outstanding in the view %d, want the summary's 10 plus our 1 forward", v.Peers[0].Outstanding)
	}
	r.forwardDone("eu-west")
	r.forwardDone("eu-west") // never below zero
	if v := r.View(req("c")); r.forwardingTo("eu-west") != 0 || v.Peers[0].Outstanding != 10 {
		t.Errorf("after the forward ended: forwarding %d, outstanding %d", r.forwardingTo("eu-west"), v.Peers[0].Outstanding)
	}
}

func TestDigestPublisher(t *testing.T) {
	r, _ := newTestRegion(t, 2)
	first := r.Digest()
	if again := r.Digest(); again != first {
		t.Error("nothing changed, yet a new digest was published")
	}
	rp := r.Replicas()[0]
	r.Deliver(deliveryFor(r, "a", 0, 11, 12, 13))
	second := r.Digest()
	if second.Generation <= first.Generation || second.MatchLength([]uint64{11, 12, 13}) != 3 {
		t.Fatalf("after learning blocks: generation %d (was %d), match %d", second.Generation, first.Generation, second.MatchLength([]uint64{11, 12, 13}))
	}
	if first.MatchLength([]uint64{11, 12, 13}) != 0 {
		t.Error("a published digest changed afterwards")
	}
	// Ejection forgets the replica's blocks: the next digest is rebuilt
	// without them.
	for range 3 {
		r.end(dispatched(r, rp), ReplicaFailed, 0)
	}
	third := r.Digest()
	if third.Generation <= second.Generation || third.MatchLength([]uint64{11, 12, 13}) != 0 {
		t.Errorf("after ejection: generation %d, match %d: the stale blocks must go", third.Generation, third.MatchLength([]uint64{11, 12, 13}))
	}
	// The filter is sized for twice the replicas' KV capacity and grows
	// when the engines report a larger cache.
	before := third.Bits()
	r.Scraped(rp, Metrics{Known: true, KVBlocks: 100_000, BlockSize: 16})
	if grown := r.Digest(); grown.Bits() <= before {
		t.Errorf("digest of %d bits after the cache grew 25×, was %d", grown.Bits(), before)
	}
}

// dispatched books a dispatch of a fresh request to rp and returns it.
func dispatched(r *pool, rp *replica) *request.Request {
	for i, x := range r.Replicas() {
		if x == rp {
			o := deliveryFor(r, fmt.Sprint("d", len(r.bookings)), i, 99)
			r.Deliver(o)
			return o.Request
		}
	}
	panic("no such replica")
}

// deliveryFor delivers a dispatch of a request with blocks to replica i.
func deliveryFor(r *pool, id string, i int, blocks ...uint64) balancer.Outcome {
	rq := req(id, blocks...)
	r.View(rq)
	return balancer.Outcome{Request: rq, Decision: policy.Decision{Action: policy.Dispatch, Replica: i, Region: r.cfg.Name}}
}

func TestLoadPublisherSendsOnIntervalOrSignificantChange(t *testing.T) {
	p := LoadPublisher{Interval: 250 * time.Millisecond}
	steps := []struct {
		at      time.Duration
		load    Load
		wantDue bool
	}{
		{0, Load{Replicas: 4}, true},                                      // the first summary
		{50 * time.Millisecond, Load{Replicas: 4, Queued: 3}, false},      // small change, interval not over
		{100 * time.Millisecond, Load{Replicas: 4, Queued: 9}, true},      // queue moved by more than 4
		{150 * time.Millisecond, Load{Replicas: 3, Queued: 9}, true},      // a replica went
		{300 * time.Millisecond, Load{Replicas: 3, Queued: 9}, false},     // 150 ms since the last
		{400 * time.Millisecond, Load{Replicas: 3, Queued: 10}, true},     // interval over
		{450 * time.Millisecond, Load{Replicas: 3, Outstanding: 8}, true}, // queue emptied: 10 → 0
	}
	var lastSeq uint64
	for i, s := range steps {
		seq, due := p.Due(t0.Add(s.at), s.load)
		if due != s.wantDue {
			t.Fatalf("step %d: due=%v, want %v", i, due, s.wantDue)
		}
		if due {
			if seq <= lastSeq {
				t.Fatalf("step %d: sequence %d not above %d", i, seq, lastSeq)
			}
			lastSeq = seq
		}
	}
}

func TestPolicyDefaultsAgreeWithTheControlPlane(t *testing.T) {
	cp, sw := DefaultControlPlane(), policy.DefaultSkywalkerConfig()
	if sw.MaxDataAge != cp.MaxDataAge || sw.MaxWANRTT != cp.MaxWANRTT {
		t.Errorf("policy data age %v / WAN threshold %v, control plane %v / %v: one default each", sw.MaxDataAge, sw.MaxWANRTT, cp.MaxDataAge, cp.MaxWANRTT)
	}
	if got := (ControlPlane{}).WithDefaults(); got != cp {
		t.Errorf("zero control plane with defaults %+v, want %+v", got, cp)
	}
}

func TestSetReplicasKeepsStateOfThoseThatStay(t *testing.T) {
	r, _ := newTestRegion(t, 2)
	a := r.Replica("r0")
	a.inFlight = 3
	if err := r.SetReplicas(Specs("r2", "r0")); err != nil {
		t.Fatal(err)
	}
	if r.Replica("r1") != nil || r.Replica("r0") != a || a.InFlight() != 3 || r.Replicas()[0].Name() != "r2" {
		t.Errorf("replicas %v: want r2 then r0, r0 with its state", names(r.Replicas()))
	}
	many := make([]string, 70)
	for i := range many {
		many[i] = fmt.Sprint("m", i)
	}
	if err := r.SetReplicas(Specs(many...)); err == nil || len(r.Replicas()) != 64 {
		t.Errorf("70 replicas: err %v, %d tracked; want an error naming the 6 not tracked", err, len(r.Replicas()))
	}
}

func names(rs []*replica) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Name())
	}
	return out
}

func TestBookingsTrackPrefillAndTokensUntilTheEnd(t *testing.T) {
	r, _ := newTestRegion(t, 1)
	rp := r.Replicas()[0]
	r.Deliver(deliveryFor(r, "a", 0, 1, 2, 3)) // 384 tokens, nothing cached yet
	req := &request.Request{ID: "b", PromptTokens: 1000, BlockTokens: 128, Blocks: []uint64{1, 2, 3, 4}}
	r.View(req)
	r.Deliver(balancer.Outcome{Request: req, Decision: policy.Decision{Action: policy.Dispatch, Replica: 0}})
	v := r.View(probeReq())
	if got := v.Local.Replicas[0]; got.InFlight != 2 || got.QueuedTokens != 384+1000 || got.PrefillTokens != 384+1000-384 {
		t.Fatalf("after two dispatches: %+v; want 2 in flight, 1,384 prompt tokens, 1,000 to prefill (3 of b's blocks cached)", got)
	}
	r.firstToken(t0, req)
	r.firstToken(t0, req) // once only
	if got := r.View(probeReq()).Local.Replicas[0]; got.PrefillTokens != 384 {
		t.Errorf("after b's first token: prefill %d, want a's 384", got.PrefillTokens)
	}
	r.end(req, Served, time.Second)
	r.end(req, Served, time.Second) // a second end is ignored
	if got := r.View(probeReq()).Local.Replicas[0]; got.InFlight != 1 || got.QueuedTokens != 384 || rp.InFlight() != 1 {
		t.Errorf("after b ended: %+v", got)
	}
}

func probeReq() *request.Request { return req("probe", 77) }

// TestHeldRequestsCalibrateTheTTFTBias: a request held with an estimate
// of 1 s that took 2 s to its first token pulls the bias above 1; one
// dispatched at once (not held) does not move it.
func TestHeldRequestsCalibrateTheTTFTBias(t *testing.T) {
	r, _ := newTestRegion(t, 1)
	if r.ttftBias(probeReq()) != 1 {
		t.Fatalf("bias %v before any sample, want 1", r.ttftBias(probeReq()))
	}
	at := t0
	for i := range minFirstTokenSamples { // alone on the replica: they teach it the engine's speed
		fast := &request.Request{ID: fmt.Sprint("fast", i), PromptTokens: 100, BlockTokens: 128}
		r.View(fast)
		r.Deliver(balancer.Outcome{Request: fast, Decision: policy.Decision{Action: policy.Dispatch}, Admitted: time.Second, Submitted: at})
		r.firstToken(at.Add(5*time.Second), fast)
		r.end(fast, Served, 6*time.Second)
	}
	if r.ttftBias(probeReq()) != 1 {
		t.Errorf("a request that was not held moved the bias to %v", r.ttftBias(probeReq()))
	}
	if r.speed() <= 1 {
		t.Fatalf("speed %v after first tokens far slower than the profile, want it learned", r.speed())
	}
	// Held since before the engine's speed was learned: its estimate erred
	// by the speed, not the queue.
	early := &request.Request{ID: "early", PromptTokens: 100, BlockTokens: 128}
	r.View(early)
	r.Deliver(balancer.Outcome{Request: early, Decision: policy.Decision{Action: policy.Dispatch}, Admitted: time.Second, Submitted: at.Add(-time.Second), Waited: time.Second})
	r.firstToken(at.Add(20*time.Second), early)
	r.end(early, Served, time.Second)
	if r.ttftBias(probeReq()) != 1 {
		t.Errorf("an estimate made before the speed was known moved the bias to %v", r.ttftBias(probeReq()))
	}
	at = at.Add(time.Minute)
	for i := range 200 {
		held := &request.Request{ID: fmt.Sprint("held", i), PromptTokens: 100, BlockTokens: 128}
		r.View(held)
		r.Deliver(balancer.Outcome{Request: held, Decision: policy.Decision{Action: policy.Dispatch}, Admitted: time.Second,
			Submitted: at, Waited: 1500 * time.Millisecond})
		r.firstToken(at.Add(2*time.Second), held)
		r.end(held, Served, 3*time.Second)
	}
	if b := r.ttftBias(probeReq()); b < 1.9 || b > 2.1 {
		t.Errorf("bias %v after estimates of 1 s that took 2 s, want about 2", b)
	}
	if v := r.View(probeReq()); v.Local.TTFTBias != r.ttftBias(probeReq()) {
		t.Errorf("the view carries bias %v, the region %v", v.Local.TTFTBias, r.ttftBias(probeReq()))
	}
}

// TestARequestThatEndsDuringAScrapeIsNotCountedRunning: a scrape that
// began before a request ended may land after it (milliseconds on a busy
// machine); the request must not make its replica look busy.
func TestARequestThatEndsDuringAScrapeIsNotCountedRunning(t *testing.T) {
	r, got := newTestRegion(t, 1)
	rp := r.Replicas()[0]
	r.Submit(time.Unix(0, 0), req("a", 1, 2))
	if len(*got) != 1 {
		t.Fatalf("%d deliveries, want the request dispatched", len(*got))
	}
	mark := r.MarkScrape(rp)                                   // the scrape leaves ...
	r.end((*got)[0].Request, Served, 0)                        // ... the request ends ...
	r.ScrapedSince(rp, Metrics{Known: true, Running: 1}, mark) // ... the engine's answer still counts it
	if running := r.View(req("b")).Local.Replicas[0].Running; running != 0 {
		t.Errorf("running %d after the only request ended during the scrape, want 0", running)
	}
	// A request that ended before the scrape began is the engine's to count.
	r.Submit(time.Unix(1, 0), req("c", 3))
	r.end((*got)[1].Request, Served, 0)
	r.ScrapedSince(rp, Metrics{Known: true, Running: 1}, r.MarkScrape(rp))
	if running := r.View(req("d")).Local.Replicas[0].Running; running != 1 {
		t.Errorf("running %d: a scrape begun after the end reports the engine's own count, want 1", running)
	}
}

// TestAdmissionKnowsWhatRequestsInFlightOccupyFromTheFirst: with two
// slots, a decode step of 70 ms and 24 requests of max_tokens 200 (14 s
// each) arriving at once, the two that fit are dispatched and the other 22
// are refused at once, before any request has ended, instead of being held
// for their whole objective; short requests that can start within their
// objective are held, not refused — when the engine reports metrics (the
// profile is taken to be its hardware). An engine that reports nothing has
// one request held on the profile's guess until it gives a first token;
// the rest are refused at once.
func TestAdmissionKnowsWhatRequestsInFlightOccupyFromTheFirst(t *testing.T) {
	for _, tc := range []struct {
		maxTokens, n             int
		noMetrics                bool
		wantDispatched, wantRefd int
	}{
		{maxTokens: 200, n: 24, wantDispatched: 2, wantRefd: 22},
		{maxTokens: 5, n: 8, wantDispatched: 2, wantRefd: 0},
		{maxTokens: 5, n: 8, noMetrics: true, wantDispatched: 2, wantRefd: 5},
	} {
		t.Run(fmt.Sprintf("max_tokens=%d,no_metrics=%v", tc.maxTokens, tc.noMetrics), func(t *testing.T) {
			var got []*Attempt
			var objectives [request.NumClasses]request.SLO
			objectives[request.Standard] = request.SLO{TTFT: 2 * time.Second}
			r, err := newPool(Config{Name: "us-east", Jurisdiction: "us", Node: "us-1", MaxInFlight: 2,
				Prefill: policy.PrefillProfile{Fixed: 70 * time.Millisecond, PerToken: 220 * time.Microsecond}, DecodeStep: 70 * time.Millisecond,
				Balancer: balancer.Config{Objectives: objectives}},
				policy.NewSkywalker(policy.DefaultSkywalkerConfig()), func(d *Attempt) { got = append(got, d) })
			if err != nil {
				t.Fatal(err)
			}
			if err := r.SetReplicas(Specs("r0")); err != nil {
				t.Fatal(err)
			}
			r.Scraped(r.Replicas()[0], Metrics{Known: !tc.noMetrics})
			for i := range tc.n {
				q := req(fmt.Sprint("q", i), uint64(1000+i))
				q.Class, q.MaxTokens = request.Standard, tc.maxTokens
				r.Submit(t0, q)
			}
			dispatched, refused := 0, 0
			for _, d := range got {
				switch {
				case d.Err != nil:
					refused++
				case d.Decision.Action == policy.Dispatch:
					dispatched++
				}
			}
			if dispatched != tc.wantDispatched || refused != tc.wantRefd || r.Queued() != tc.n-tc.wantDispatched-tc.wantRefd {
				t.Errorf("%d requests of max_tokens %d at once: %d dispatched, %d refused, %d held; want %d, %d, %d",
					tc.n, tc.maxTokens, dispatched, refused, r.Queued(), tc.wantDispatched, tc.wantRefd, tc.n-tc.wantDispatched-tc.wantRefd)
			}
		})
	}
}

// The summary tells peers what a forward would evict: the most cache any
// healthy replica has free, and the share of prompt tokens served from
// cache (decayed per dispatch by ServiceAlpha).
func TestTheSummaryCarriesWhatAForwardWouldEvict(t *testing.T) {
	var got []*Attempt
	r, err := newPool(Config{Name: "us-east", Jurisdiction: "us", Node: "us-1", MaxInFlight: 4, DefaultReplicaTokens: 10 * 128,
		Prefill: policy.PrefillProfile{PerToken: 100 * time.Microsecond}}, policy.NewSkywalker(policy.DefaultSkywalkerConfig()),
		func(d *Attempt) { got = append(got, d) })
	if err != nil {
		t.Fatal(err)
	}
	if err := r.SetReplicas(Specs("r0", "r1")); err != nil {
		t.Fatal(err)
	}
	if l := r.Load(); l.FreeCacheTokens != 1280 || l.HitShare != 0 {
		t.Fatalf("empty region: free %d, hit share %v; want 1280 and 0", l.FreeCacheTokens, l.HitShare)
	}
	r.Submit(t0, req("cold", 1, 2, 3, 4))
	r.end(got[0].Request, Served, 100*time.Millisecond)
	r.Submit(t0, req("warm", 1, 2, 3, 4))
	if got[1].PrefixBlocks != 4 {
		t.Fatalf("the second request found %d cached blocks, want 4", got[1].PrefixBlocks)
	}
	a := DefaultServiceAlpha
	if l, want := r.Load(), 1/(2-a); math.Abs(l.HitShare-want) > 1e-9 || r.hitShare() != l.HitShare {
		t.Errorf("hit share %v (region %v), want %v: one cold and one warm dispatch", l.HitShare, r.hitShare(), want)
	}
	r.Submit(t0, req("doc", 11, 12, 13, 14, 15, 16, 17, 18, 19, 20)) // fills the other replica
	if got[2].Replica == got[1].Replica {
		t.Fatalf("the 10-block document went to %s, which holds the 4 blocks; want the other replica", got[2].Replica)
	}
	if l := r.Load(); l.FreeCacheTokens != 1280-4*128 {
		t.Errorf("free cache %d, want %d: one replica full, the other holding 4 blocks", l.FreeCacheTokens, 1280-4*128)
	}
}

// TestASessionStaysOnItsReplicaWhileItMay: a request whose session
// (prompt_cache_key, the session header) was served on a replica goes
// back there though the index knows nothing of it — not while that
// replica is out of service or far busier than the others.
func TestASessionStaysOnItsReplicaWhileItMay(t *testing.T) {
	r, got := newTestRegion(t, 3)
	turn := func(id string, block uint64) *Attempt {
		rq := req(id, block)
		rq.Affinity = "thread-7"
		r.Submit(t0, rq)
		return (*got)[len(*got)-1]
	}
	first := turn("t1", 100)
	home := first.rp
	r.end(first.Request, Served, time.Second)
	r.index.Forget(home.target) // the index lost what the session sent (another proxy served it, a restart)
	second := turn("t2", 200)
	if second.rp != home || second.Decision.Reason != policy.ReasonSession {
		t.Fatalf("second turn on %s for %q, want the session's %s", second.Replica, second.Decision.Reason, home.Name())
	}
	r.end(second.Request, Served, time.Second)
	for range 4 { // the session's replica far busier than the others
		dispatched(r, home)
	}
	if busy := turn("t3", 300); busy.rp == home {
		t.Errorf("third turn followed the session to %s with %d in flight there: affinity must be soft", home.Name(), home.InFlight())
	}
}

// TestTheRegionLearnsHowItsEstimatesErrHereAndAtEachPeer: every
// dispatch's first token against its estimate teaches the region's error
// (the view's Local.Error); every forward's first token against the
// estimate it was chosen on teaches that peer's (Peers[i].Error), which
// the policy's reach and drain read.
func TestTheRegionLearnsHowItsEstimatesErrHereAndAtEachPeer(t *testing.T) {
	r, got := newTestRegion(t, 1)
	at := t0
	for i := range minFirstTokenSamples + policy.MinErrorSamples {
		q := &request.Request{ID: fmt.Sprint("local", i), PromptTokens: 100, BlockTokens: 128}
		r.View(q)
		r.Deliver(balancer.Outcome{Request: q, Decision: policy.Decision{Action: policy.Dispatch, Estimate: 100 * time.Millisecond},
			Admitted: 100 * time.Millisecond, Submitted: at})
		r.firstToken(at.Add(300*time.Millisecond), q)
		r.end(q, Served, time.Second)
		at = at.Add(time.Second)
	}
	if e := r.View(probeReq()).Local.Error; !e.Known || e.P50 != 200*time.Millisecond {
		t.Errorf("local error %+v after first tokens 200 ms later than estimated, want P50 200 ms", e)
	}
	peer := Peer{Region: "eu-west", Jurisdiction: "eu", Healthy: true, GateOpen: true, RTT: 70 * time.Millisecond,
		Load: Load{Replicas: 4, Slots: 256, Outstanding: 0}}
	r.SetPeers([]Peer{peer})
	if e := r.View(probeReq()).Peers[0].Error; e.Known {
		t.Fatalf("peer error %+v before any forward", e)
	}
	for _, rp := range r.Replicas() {
		r.Scraped(rp, Metrics{Known: true, Waiting: 5, Running: 4}) // busy: forward
	}
	for i := range policy.MinErrorSamples {
		*got = (*got)[:0]
		r.Submit(at, req(fmt.Sprint("fwd", i), 1))
		if len(*got) != 1 || (*got)[0].Peer == nil {
			t.Fatalf("deliveries %+v: want a forward", *got)
		}
		a := (*got)[0]
		a.FirstToken(at.Add(a.Decision.Estimate / 2))
		a.End(at.Add(time.Second), Served)
	}
	if e := r.View(probeReq()).Peers[0].Error; !e.Known || e.P50 >= 0 {
		t.Errorf("peer error %+v after first tokens in half their estimates, want them early", e)
	}
}
