package sim

import (
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"skywalker/internal/profile"
	"skywalker/internal/request"

	"skywalker/internal/policy"
	"skywalker/internal/region"
	"skywalker/internal/results"
	"skywalker/internal/workload"
	"skywalker/scenarios"
)

func scenario(t testing.TB, name string) *Scenario {
	t.Helper()
	s, err := Builtin(name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestBuiltInScenariosParse(t *testing.T) {
	for _, name := range scenarios.Names() {
		s := scenario(t, name)
		if _, _, err := s.Build(""); err != nil && !strings.Contains(err.Error(), "trace") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestSameSeedGivesByteIdenticalResults(t *testing.T) {
	s := scenario(t, "quickstart")
	run := func() []byte {
		rep, err := Compare(s, Options{Policies: []string{"skywalker", "consistent-hash"}})
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a, b := run(), run()
	if string(a) != string(b) {
		t.Error("two runs of the same scenario and seed differ")
	}
	// The same policies under another seed: the whole report must differ
	// (its arrivals do), and so must each policy's result.
	same, err := Compare(s, Options{Policies: []string{"skywalker", "consistent-hash"}})
	if err != nil {
		t.Fatal(err)
	}
	other, err := Compare(s, Options{Policies: []string{"skywalker", "consistent-hash"}, Seed: 99})
	if err != nil {
		t.Fatal(err)
	}
	for i := range other.Results {
		x, _ := json.Marshal(same.Results[i])
		y, _ := json.Marshal(other.Results[i])
		if string(x) == string(y) {
			t.Errorf("%s: seed 99 gave the same result as the scenario's seed", other.Results[i].Policy)
		}
	}
}

func TestQuickstartServesEveryRequest(t *testing.T) {
	rep, err := Compare(scenario(t, "quickstart"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != len(policy.Names) {
		t.Fatalf("%d results, want all %d policies", len(rep.Results), len(policy.Names))
	}
	for _, r := range rep.Results {
		if r.Completed+r.Dropped != r.Requests {
			t.Errorf("%s: %d completed + %d dropped != %d requests: something was lost", r.Policy, r.Completed, r.Dropped, r.Requests)
		}
		if (r.Policy == "local" || r.Policy == "local-least-load") && r.CrossRegion != 0 {
			t.Errorf("local served %.1f%% cross-region", 100*r.CrossRegion)
		}
		if r.TTFTP50Ms <= 0 || r.ThroughputTokS <= 0 {
			t.Errorf("%s: empty metrics %+v", r.Policy, r)
		}
		// Wave 4's promise on the first thing a user runs: held work
		// drains, nothing is held past a cold start, a passed objective is
		// served late on a free slot — SkyWalker drops nothing here.
		if r.Policy == "skywalker" && r.Dropped != 0 {
			t.Errorf("skywalker dropped %d requests (%v); the quickstart's fleet serves every one", r.Dropped, r.Drops)
		}
	}
}

// TestUtilizationIsAShareOfTokenCapacity: the utilization series is busy
// time weighted by the token budget each step used — never above the
// region's capacity, rising with the load.
func TestUtilizationIsAShareOfTokenCapacity(t *testing.T) {
	var mean []float64
	for _, rps := range []float64{1, 6} {
		cfg, d := oneRegion(t, "local", 1, rps, 0)
		res := runOne(t, cfg, d)
		s := res.Series
		total, buckets := 0.0, 0
		for b, work := range s.Work[0] {
			share := work.Seconds() / s.Bucket.Seconds()
			if share < 0 || share > 1+1e-9 {
				t.Errorf("%.0f rps, bucket %d: %.3f of the token capacity used", rps, b, share)
			}
			if work > s.Busy[0][b] {
				t.Errorf("%.0f rps, bucket %d: work %v above busy time %v", rps, b, work, s.Busy[0][b])
			}
			total += share
			buckets++
		}
		if buckets == 0 {
			t.Fatalf("%.0f rps: no utilization series", rps)
		}
		mean = append(mean, total/float64(buckets))
	}
	if !(mean[0] > 0 && mean[1] > 2*mean[0]) {
		t.Errorf("mean share of token capacity by load %v: want it positive and rising with the load", mean)
	}
}

// oneRegion is a single-region config with a flat (Poisson) workload.
func oneRegion(t testing.TB, policyName string, replicas int, rps float64, tenants int) (Config, workload.Diurnal) {
	p, _ := profile.Lookup("llama3-8b-a100")
	cfg := Config{Regions: []RegionSpec{{Name: "solo", Replicas: replicas, Profile: p, Jurisdiction: "us"}},
		RTT: [][]time.Duration{{0}}, Policy: policyName, SLO: request.SLO{TTFT: time.Second}, Seed: 5}
	d := workload.Diurnal{Regions: []workload.RegionLoad{{Name: "solo", Jurisdiction: "us"}}, Day: time.Hour, Duration: 10 * time.Minute,
		PeakRPS: rps, ValleyRatio: 1, MeanTurns: 1, Tenants: tenants, TenantPromptTokens: 1024, Lengths: workload.Synthetic(),
		MaxOutputTokens: 256, MaxPromptTokens: 8192, BlockTokens: 128, Seed: 5}
	return cfg, d
}

func runOne(t testing.TB, cfg Config, d workload.Diurnal) *results.Result {
	t.Helper()
	src, err := d.Source()
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(cfg, src, d.Duration, d.BlockTokens)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestQueueingGrowsAsUtilizationApproachesOne: one replica, Poisson
// arrivals; TTFT must grow slowly at low load and explode near capacity.
func TestQueueingGrowsAsUtilizationApproachesOne(t *testing.T) {
	var ttft []float64
	for _, rps := range []float64{1, 3, 5, 7} {
		cfg, d := oneRegion(t, "local", 1, rps, 0)
		ttft = append(ttft, float64(runOne(t, cfg, d).TTFTP90Ms))
	}
	for i := 1; i < len(ttft); i++ {
		if ttft[i] <= ttft[i-1] {
			t.Fatalf("TTFT p90 by load %v: want it increasing", ttft)
		}
	}
	if low, high := ttft[1]-ttft[0], ttft[3]-ttft[2]; high < 5*low {
		t.Errorf("TTFT p90 by load %v: want the growth to accelerate toward saturation", ttft)
	}
}

// TestOneRegionSkywalkerBehavesLikeLocal: with no peers and no shared
// prefixes, skywalker has nothing to exploit and must serve like local.
func TestOneRegionSkywalkerBehavesLikeLocal(t *testing.T) {
	cfgL, d := oneRegion(t, "local", 2, 3, 0)
	cfgS, _ := oneRegion(t, "skywalker", 2, 3, 0)
	l, s := runOne(t, cfgL, d), runOne(t, cfgS, d)
	if s.CrossRegion != 0 || s.Completed != l.Completed {
		t.Fatalf("skywalker completed %d (cross %.2f), local %d", s.Completed, s.CrossRegion, l.Completed)
	}
	if ratio := s.TTFTP50Ms / l.TTFTP50Ms; ratio < 0.9 || ratio > 1.1 {
		t.Errorf("TTFT p50 skywalker %.0f ms vs local %.0f ms: want within 10%%", s.TTFTP50Ms, l.TTFTP50Ms)
	}
}

// TestUnboundedCacheReachesTheTracesReusableFraction replays the Mooncake
// trace into one replica with an unbounded cache: the hit rate must approach
// the share of prompt tokens whose prefix appeared before.
func TestUnboundedCacheReachesTheTracesReusableFraction(t *testing.T) {
	recs, err := workload.LoadTrace("mooncake_conversation.jsonl", "")
	if err != nil {
		t.Fatal(err)
	}
	recs = recs[:4000]
	// Expected: per request, the longest run of leading ids seen before.
	seen := map[uint64]bool{}
	var reusable, total, blocksSeen, blocksTotal float64
	for _, r := range recs {
		k := 0
		for k < len(r.BlockIDs) && seen[r.BlockIDs[k]] {
			k++
		}
		for _, id := range r.BlockIDs {
			if seen[id] {
				blocksSeen++
			}
			seen[id] = true
			blocksTotal++
		}
		reusable += float64(min(k*workload.MooncakeBlockTokens, r.InputTokens-1))
		total += float64(r.InputTokens)
	}
	p, _ := profile.Lookup("llama3-8b-h100")
	p.KVBlocks = 50_000_000 // unbounded for this trace
	cfg := Config{Regions: []RegionSpec{{Name: "solo", Replicas: 1, Profile: p}}, RTT: [][]time.Duration{{0}}, Policy: "local", Seed: 1}
	src, _ := workload.Replay{Records: recs, Regions: []workload.RegionLoad{{Name: "solo"}}, Speedup: 0.25}.Source()
	res, err := Run(cfg, src, time.Hour, workload.MooncakeBlockTokens)
	if err != nil {
		t.Fatal(err)
	}
	want := reusable / total
	t.Logf("hit rate %.3f; reusable prefix tokens %.3f; reused blocks %.3f", res.CacheHitRate, want, blocksSeen/blocksTotal)
	if res.CacheHitRate < want-0.02 || res.CacheHitRate > want+0.005 {
		t.Errorf("hit rate %.3f, want about %.3f", res.CacheHitRate, want)
	}
}

func TestFaultsLoseNothingSilently(t *testing.T) {
	s := scenario(t, "quickstart")
	s.Faults = []ScenarioFault{
		{Kind: "replica-crash", Region: "us-east", Replica: 0, At: 30 * time.Second, Duration: 40 * time.Second},
		{Kind: "region-outage", Region: "eu-west", At: time.Minute, Duration: 30 * time.Second},
		{Kind: "rtt-spike", A: "us-east", B: "eu-west", At: 90 * time.Second, Duration: 30 * time.Second, Ms: 400},
	}
	rep, err := Compare(s, Options{Policies: []string{"skywalker", "local", "least-load"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Results {
		if r.Completed+r.Dropped != r.Requests {
			t.Errorf("%s: %d + %d != %d", r.Policy, r.Completed, r.Dropped, r.Requests)
		}
		if r.Retried == 0 && r.Drops["upstream_error"] == 0 && r.Drops["failed_midstream"] == 0 {
			t.Errorf("%s: crashes mid-run touched no request", r.Policy)
		}
	}
}

func TestParseScenarioRejectsBadInput(t *testing.T) {
	good, _ := scenarios.Get("quickstart")
	tests := []struct{ name, yaml, want string }{
		{"empty", "", "empty"},
		{"unknown field", string(good) + "\nbogus: 1\n", "bogus"},
		{"bad profile", strings.Replace(string(good), "llama3-8b-l4", "tpu-v9", 1), "regions[0].profile"},
		{"bad kind", strings.Replace(string(good), "kind: diurnal", "kind: sinusoid", 1), "workload.kind"},
		{"no slo", strings.Replace(string(good), "slo: {ttft: 2s}", "", 1), "slo.ttft"},
		{"bad rtt region", strings.Replace(string(good), "{a: us-east, b: eu-west, ms: 72}", "{a: us-east, b: mars, ms: 72}", 1), "rtt[0]"},
		{"bad policy", string(good) + "\npolicies: [random]\n", "policies[0]"},
		{"bad fault", string(good) + "\nfaults: [{kind: meteor, at: 1s, duration: 1s}]\n", "faults[0].kind"},
		{"valley", strings.Replace(string(good), "valley_ratio: 0.3", "valley_ratio: 2", 1), "valley_ratio"},
	}
	for _, tc := range tests {
		_, err := ParseScenario([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to mention %q", tc.name, err, tc.want)
		}
	}
}

func FuzzParseScenario(f *testing.F) {
	for _, name := range scenarios.Names() {
		data, _ := scenarios.Get(name)
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseScenario(data)
		if err != nil {
			return
		}
		_, _, _ = s.Build("")
	})
}

// BenchmarkSimulatorEvents reports the simulator's speed in events and
// requests per second under skywalker: on the quickstart scenario (30
// minutes), and on one day of the tuning scenario (the evaluation's unit of
// work).
func BenchmarkSimulatorEvents(b *testing.B) {
	for _, name := range []string{"quickstart", "diurnal-3region"} {
		b.Run(name, func(b *testing.B) {
			s := scenario(b, name)
			if name == "quickstart" {
				s.Workload.Duration, s.Workload.Day = 30*time.Minute, 30*time.Minute
			}
			var events, requests int64
			start := time.Now()
			for b.Loop() {
				rep, err := Compare(s, Options{Policies: []string{"skywalker"}, Parallel: 1})
				if err != nil {
					b.Fatal(err)
				}
				events += rep.Results[0].Events
				requests += int64(rep.Results[0].Requests)
			}
			b.ReportMetric(float64(events)/time.Since(start).Seconds(), "events/s")
			b.ReportMetric(float64(requests)/time.Since(start).Seconds(), "requests/s")
		})
	}
}

// runUntil runs a world's events up to virtual time end.
func runUntil(t *testing.T, w *world, end time.Duration) {
	t.Helper()
	for w.q.len() > 0 && w.q.next() <= end {
		e := w.q.pop()
		w.now = e.at
		if err := w.handle(e); err != nil {
			t.Fatal(err)
		}
	}
	w.now = end
}

// burstWorld is the burst scenario's world under skywalker with
// one-second series buckets and the given faults.
func burstWorld(t *testing.T, faults ...ScenarioFault) *world {
	t.Helper()
	s := scenario(t, "burst")
	s.Faults = faults
	return scenarioWorld(t, s, func(cfg *Config) { cfg.Bucket = time.Second })
}

// scenarioWorld is s's world under skywalker, configured by set, with its
// first arrival queued: a test runs its events (runUntil, loop).
func scenarioWorld(t *testing.T, s *Scenario, set func(*Config)) *world {
	t.Helper()
	cfg, wl, err := s.Build("")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Policy = "skywalker"
	set(&cfg)
	src, err := wl.Source()
	if err != nil {
		t.Fatal(err)
	}
	w, err := newWorld(cfg, src, wl.Span, wl.BlockTokens)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.pullArrival(); err != nil {
		t.Fatal(err)
	}
	return w
}

// forwardsBetween counts requests region r forwarded in [from, to).
func forwardsBetween(w *world, r int, from, to time.Duration) int {
	n := 0
	for b, c := range w.series.Forwarded[r] {
		if at := time.Duration(b) * w.series.Bucket; at >= from && at < to {
			n += c
		}
	}
	return n
}

// TestTheGateIsTheProductsGate: the simulator's regions see an RTT spike
// the way the proxy does, through probes and the mesh's gate with its
// hysteresis, not from the true RTT matrix: forwarding stops within a
// probe of the spike, and resumes only after ReopenSamples good probes.
func TestTheGateIsTheProductsGate(t *testing.T) {
	// The spike covers the middle of us-east's burst, when it forwards most.
	burst := scenario(t, "burst").Workload.Bursts[0]
	burstEnd := burst.At + burst.Duration
	spikeAt, spikeEnd := burst.At+burst.Duration/4, burst.At+burst.Duration*3/5
	w := burstWorld(t,
		ScenarioFault{Kind: "rtt-spike", A: "us-east", B: "eu-west", At: spikeAt, Duration: spikeEnd - spikeAt, Ms: 500},
		ScenarioFault{Kind: "rtt-spike", A: "us-east", B: "ap-east", At: spikeAt, Duration: spikeEnd - spikeAt, Ms: 500})
	cp := w.cfg.Control
	closedBy := spikeAt + cp.ProbeInterval + 500*time.Millisecond + cp.PumpInterval
	runUntil(t, w, spikeAt+cp.ProbeInterval/2)
	if p := w.routers[0].core.Peers(); len(p) != 2 || !p[1].GateOpen {
		t.Fatalf("half a probe into the spike the gate to eu-west is already %+v: the simulator knows more than the proxy", p)
	}
	runUntil(t, w, burstEnd)
	if n := forwardsBetween(w, 0, burst.At, spikeAt); n == 0 {
		t.Fatal("us-east forwarded nothing during its burst before the spike: the test shows nothing")
	}
	if n := forwardsBetween(w, 0, closedBy+time.Second, spikeEnd); n != 0 {
		t.Errorf("us-east forwarded %d requests over 500 ms links after its gates should have closed", n)
	}
	reopened := spikeEnd + time.Duration(cp.ReopenSamples+1)*cp.ProbeInterval
	if n := forwardsBetween(w, 0, spikeEnd, spikeEnd+time.Duration(cp.ReopenSamples-1)*cp.ProbeInterval); n != 0 {
		t.Errorf("us-east forwarded %d requests before %d good probes could reopen its gates", n, cp.ReopenSamples)
	}
	if n := forwardsBetween(w, 0, reopened, burstEnd); n == 0 {
		t.Errorf("us-east never forwarded again between the gates reopening (%v) and the end of its burst (%v)", reopened, burstEnd)
	}
}

// TestALossyLinkClosesTheGateAndStalesItsData: with every packet lost,
// probes time out (closing the gate on loss) and load summaries stop (the
// peer's data goes stale and it counts as unavailable).
func TestALossyLinkClosesTheGateAndStalesItsData(t *testing.T) {
	const lossAt = 12 * time.Minute
	w := burstWorld(t,
		ScenarioFault{Kind: "link-loss", A: "us-east", B: "eu-west", At: lossAt, Duration: time.Hour, Loss: 1},
		ScenarioFault{Kind: "link-loss", A: "us-east", B: "ap-east", At: lossAt, Duration: time.Hour, Loss: 1})
	cp := w.cfg.Control
	runUntil(t, w, lossAt+cp.MaxDataAge+cp.LoadInterval+cp.PumpInterval)
	for _, p := range w.routers[0].core.Peers() {
		if p.Healthy {
			t.Errorf("%s still healthy with data %v old after every summary was lost", p.Region, p.DataAge)
		}
	}
	runUntil(t, w, lossAt+cp.ProbeInterval+3*time.Second+cp.PumpInterval)
	for _, p := range w.routers[0].core.Peers() {
		if p.GateOpen || !strings.Contains(p.Gate, "loss") {
			t.Errorf("gate to %s: open %v (%s), want closed for loss once a probe timed out", p.Region, p.GateOpen, p.Gate)
		}
	}
	runUntil(t, w, 25*time.Minute)
	if n := forwardsBetween(w, 0, lossAt+cp.MaxDataAge+time.Second, 25*time.Minute); n != 0 {
		t.Errorf("us-east forwarded %d requests over links that lose everything", n)
	}
}

// TestPeersSeeTheProductsStaleness: load summaries arrive every
// LoadInterval (or sooner) plus a link delay, and age from their arrival,
// as in the mesh; digests arrive every DigestInterval.
func TestPeersSeeTheProductsStaleness(t *testing.T) {
	w := burstWorld(t)
	cp := w.cfg.Control
	var worstAge time.Duration
	for at := time.Minute; at < 3*time.Minute; at += 37 * time.Millisecond {
		runUntil(t, w, at)
		for _, p := range w.routers[0].table.Peers(w.clock(w.now)) {
			worstAge = max(worstAge, p.DataAge)
			if p.Digest == nil {
				t.Fatalf("no digest from %s after a minute", p.Region)
			}
		}
	}
	if worstAge > cp.LoadInterval+cp.LoadCheck+10*time.Millisecond || worstAge < cp.LoadInterval-cp.LoadCheck-10*time.Millisecond {
		t.Errorf("worst peer data age %v; summaries go out every %v (checked every %v)", worstAge, cp.LoadInterval, cp.LoadCheck)
	}
}

// TestACrashedReplicaIsFoundAsTheProxyFindsIt: the region does not know
// a replica died; its requests fail, dispatches are refused, health checks
// fail, and the passive rule ejects it; after it recovers, two passed
// health checks re-admit it.
func TestACrashedReplicaIsFoundAsTheProxyFindsIt(t *testing.T) {
	const crashAt, back = 5 * time.Minute, 7 * time.Minute
	w := burstWorld(t, ScenarioFault{Kind: "replica-crash", Region: "eu-west", Replica: 1, At: crashAt, Duration: back - crashAt})
	cp := w.cfg.Control
	r, name := w.routers[1], w.routers[1].replicas[1].name
	runUntil(t, w, crashAt-time.Millisecond)
	if !r.core.Healthy(name) {
		t.Fatal("healthy replica ejected before its crash")
	}
	runUntil(t, w, crashAt+time.Duration(region.DefaultEjectAfter)*cp.HealthInterval+cp.HealthInterval/2)
	if r.core.Healthy(name) {
		t.Fatal("a dead replica is still in service after EjectAfter failed health checks")
	}
	runUntil(t, w, back+time.Duration(region.DefaultReadmitAfter+1)*cp.HealthInterval)
	if !r.core.Healthy(name) {
		t.Error("a recovered replica was not re-admitted by its health checks")
	}
}

// TestOneGlobalRouterMakesRemoteClientsPayTheirRTT: with one router in
// us-east, an ap-east client's request crosses to us-east and back before
// anything else, and every region's replicas still serve (and residency
// still holds).
func TestOneGlobalRouterMakesRemoteClientsPayTheirRTT(t *testing.T) {
	s := scenario(t, "quickstart")
	cfg, wl, err := s.Build("")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Policy, cfg.Router = "least-load", "us-east"
	src, _ := wl.Source()
	w, err := newWorld(cfg, src, wl.Span, wl.BlockTokens)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.routers) != 1 || len(w.routers[0].replicas) != 6 {
		t.Fatalf("%d routers with %d replicas: want one router in front of all six", len(w.routers), len(w.routers[0].replicas))
	}
	if err := w.pullArrival(); err != nil {
		t.Fatal(err)
	}
	if err := w.loop(); err != nil {
		t.Fatal(err)
	}
	res := w.result()
	if res.Completed+res.Dropped != res.Requests || res.Completed == 0 {
		t.Fatalf("result %+v", res)
	}
	for name, rs := range res.Regions {
		if rs.ServedLocal+rs.Received == 0 {
			t.Errorf("%s's replicas served nothing under the global router", name)
		}
	}
	apToUS := cfg.RTT[2][0]
	if ap := res.Regions["ap-east"]; float64(ap.TTFTP50Ms) < float64(apToUS.Milliseconds()) {
		t.Errorf("ap-east's clients' TTFT p50 %v ms is below their %v round trip to the router", ap.TTFTP50Ms, apToUS)
	}
	if us := res.Regions["us-east"]; us.TTFTP50Ms >= res.Regions["ap-east"].TTFTP50Ms {
		t.Errorf("us-east's clients (beside the router) p50 %v ms, not below ap-east's %v ms", us.TTFTP50Ms, res.Regions["ap-east"].TTFTP50Ms)
	}
}

// TestClientsGiveUpAtTheSameDeadlineUnderEveryPolicy: past capacity, a
// policy that pushes into engine queues and one that holds in its balancer
// both end every request by the client timeout: served, or counted as
// dropped with an infinite TTFT; none is answered later.
func TestClientsGiveUpAtTheSameDeadlineUnderEveryPolicy(t *testing.T) {
	for _, name := range []string{"local-least-load", "local"} {
		cfg, d := oneRegion(t, name, 1, 12, 0) // three times what one replica serves
		cfg.ClientTimeout = 5 * time.Second
		cfg.Balancer.MaxWait = time.Minute
		res := runOne(t, cfg, d)
		if res.Drops["client_timeout"] == 0 {
			t.Errorf("%s: nobody gave up at three times capacity: %+v", name, res.Drops)
		}
		if float64(res.TTFTMaxMs) > 5000 {
			t.Errorf("%s: a request was answered after %v ms, when its client had left at 5,000", name, res.TTFTMaxMs)
		}
		if !res.TTFTP99Ms.Missed() {
			t.Errorf("%s: TTFT p99 %v with %d of %d requests never answered: drops must count as infinite", name, res.TTFTP99Ms, res.Dropped, res.Requests)
		}
	}
}

// TestComparingASingleRouterDeployment: "policy@region" runs one router in
// that region for every client; an unknown region is refused by name.
func TestComparingASingleRouterDeployment(t *testing.T) {
	s := scenario(t, "quickstart")
	rep, err := Compare(s, Options{Policies: []string{"cache-aware", "cache-aware@us-east"}})
	if err != nil {
		t.Fatal(err)
	}
	per, single := rep.Results[0], rep.Results[1]
	if single.Policy != "cache-aware@us-east" {
		t.Errorf("the single router's result is labelled %q", single.Policy)
	}
	// One router serves everybody: only us-east's clients are local to it,
	// so about two thirds of requests cross the WAN, far more than with a
	// router per region.
	if single.CrossRegion < 0.5 || single.CrossRegion <= per.CrossRegion {
		t.Errorf("cross-region share: single router %.2f, router per region %.2f", single.CrossRegion, per.CrossRegion)
	}
	if _, err := Compare(s, Options{Policies: []string{"cache-aware@mars"}}); err == nil || !strings.Contains(err.Error(), `"mars"`) {
		t.Errorf("an unknown router region: %v", err)
	}
}

// TestCacheTruthTeachesTheRouterTheEnginesRealCache: engines hold a
// quarter of the cache the router believes (unknown-cache). With
// cache-truth feedback at least 90% of the requests routed as holding a
// cached prefix really find it; without, far fewer do, and TTFT is worse.
// On unknown-cache (engines holding a quarter of what the router
// believes), each source of the prefix index predicts better than the one
// before: belief, belief corrected by cache truth, the engines' KV events.
func TestCacheTruthTeachesTheRouterTheEnginesRealCache(t *testing.T) {
	s := scenario(t, "unknown-cache")
	rep, err := Compare(s, Options{CacheSources: CacheSources})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"skywalker (belief)", "skywalker (truth)", "skywalker (events)"} {
		if rep.Results[i].Policy != want {
			t.Fatalf("result %d is %q, want %q", i, rep.Results[i].Policy, want)
		}
	}
	a, b, events := rep.Results[1], rep.Results[0], rep.Results[2]
	t.Logf("events: precision %.3f, recall %.3f, TTFT p99 %v ms", events.PrefixPrecision, events.PrefixRecall, events.TTFTP99Ms)
	if events.PrefixPrecision <= a.PrefixPrecision || events.PrefixRecall <= a.PrefixRecall {
		t.Errorf("KV events: precision %.3f recall %.3f, no better than cache truth's %.3f %.3f", events.PrefixPrecision, events.PrefixRecall, a.PrefixPrecision, a.PrefixRecall)
	}
	t.Logf("precision %.3f vs %.3f, TTFT p99 %v vs %v ms, SLO %.4f vs %.4f", a.PrefixPrecision, b.PrefixPrecision, a.TTFTP99Ms, b.TTFTP99Ms, a.SLOAttainment, b.SLOAttainment)
	if a.PrefixPrecision < 0.9 {
		t.Errorf("with feedback %.1f%% of predicted hits were real, want ≥ 90%%", 100*a.PrefixPrecision)
	}
	if b.PrefixPrecision > 0.75 {
		t.Errorf("without feedback %.1f%% of predicted hits were real: the scenario does not mislead the router", 100*b.PrefixPrecision)
	}
	if a.TTFTP99Ms >= b.TTFTP99Ms {
		t.Errorf("TTFT p99 with feedback %v ms, without %v ms: it should recover", a.TTFTP99Ms, b.TTFTP99Ms)
	}
}

// TestARequestNoRegionMayServeIsCountedApart: in two-models, llama-70b
// is served in us-east and eu-west only, so ap-east's requests for it
// whose data must stay in ap-east's jurisdiction can be served by no
// router: they are counted apart, not as misses of the policy; with a
// 70B pool in ap-east there are none.
func TestARequestNoRegionMayServeIsCountedApart(t *testing.T) {
	for _, apEast70B := range []int{0, 1} {
		s := scenario(t, "two-models")
		s.Workload.Duration = 4 * time.Minute
		for i := range s.Regions {
			if s.Regions[i].Name == "ap-east" {
				s.Regions[i].Pools = append(s.Regions[i].Pools, ScenarioPool{Model: "llama-70b", Replicas: apEast70B})
			}
		}
		cfg, wl, err := s.Build("")
		if err != nil {
			t.Fatal(err)
		}
		cfg.Policy, cfg.Model = "skywalker", "llama-70b"
		src, err := wl.Source()
		if err != nil {
			t.Fatal(err)
		}
		res, err := Run(cfg, src, wl.Span, wl.BlockTokens)
		if err != nil {
			t.Fatal(err)
		}
		if res.Requests == 0 {
			t.Fatalf("ap-east 70B replicas %d: no llama-70b requests counted", apEast70B)
		}
		if apEast70B == 0 && (res.Unservable == 0 || res.Drops["unavailable"] > 0) {
			t.Errorf("no 70B in ap-east: %d unservable, drops %v; want ap-east's resident requests apart, none counted unavailable", res.Unservable, res.Drops)
		}
		if apEast70B == 1 && res.Unservable != 0 {
			t.Errorf("a 70B replica in ap-east: %d unservable, want 0", res.Unservable)
		}
		t.Logf("ap-east 70B replicas %d: %d requests, %d unservable, SLO %.4f, drops %v", apEast70B, res.Requests, res.Unservable, res.SLOAttainment, res.Drops)
	}
}

// TestResponsesChainsStayWhereTheyLive: in responses-chains every later
// turn continues the previous response, which lives in one engine: none
// moves (every policy keeps them home), and the chains living on the
// replica that crashes break (previous_response_not_found) — or, when the
// balancers let them (responses_start_over), start over elsewhere; the
// same sessions as plain chat move between replicas.
func TestResponsesChainsStayWhereTheyLive(t *testing.T) {
	s := scenario(t, "responses-chains")
	s.Workload.Duration = 8 * time.Minute
	s.Faults[0].At = 4 * time.Minute
	for _, tc := range []struct {
		share     float64
		startOver bool
	}{{1, false}, {1, true}, {0, false}} {
		share := tc.share
		sc := *s
		sc.Workload.ResponsesShare = share
		sc.Balancer.ResponsesStartOver = tc.startOver
		rep, err := Compare(&sc, Options{Policies: []string{"skywalker", "least-load"}})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rep.Results {
			broken := r.Drops["previous_response_not_found"] + r.ChainsRestarted
			t.Logf("share %v, start over %v, %s: %d chain turns, %d broken, %d started over, %.1f%% of follow-ups moved, SLO %.4f",
				share, tc.startOver, r.Policy, r.ChainTurns, broken, r.ChainsStartedOver, 100*r.FollowUpsMoved, r.SLOAttainment)
			switch {
			case tc.startOver && (r.ChainTurns == 0 || r.FollowUpsMoved != 0 || r.Drops["previous_response_not_found"] != 0 || r.ChainsStartedOver == 0):
				t.Errorf("%s with chains that may start over: %d chain turns, %.2f%% moved, %d gone, %d started over; want turns, none moved or gone, some started over",
					r.Policy, r.ChainTurns, 100*r.FollowUpsMoved, r.Drops["previous_response_not_found"], r.ChainsStartedOver)
			case tc.startOver:
			case share == 1 && (r.ChainTurns == 0 || r.FollowUpsMoved != 0 || r.Drops["previous_response_not_found"] == 0 || r.ChainsStartedOver != 0):
				t.Errorf("%s with chains: %d chain turns, %.2f%% moved, %d gone with the crashed replica; want turns, none moved, some gone",
					r.Policy, r.ChainTurns, 100*r.FollowUpsMoved, r.Drops["previous_response_not_found"])
			case share == 0 && (r.ChainTurns != 0 || r.FollowUpsMoved == 0):
				t.Errorf("%s as chat: %d chain turns, %.2f%% moved; want none and some", r.Policy, r.ChainTurns, 100*r.FollowUpsMoved)
			}
		}
	}
}

// TestTheRouterHearsEvictionsBeforeTheStepRuns: the simulated engines
// publish their KV events as vLLM does — the blocks scheduling a step
// evicts as soon as it is scheduled (vLLM: at the end of schedule()), the
// prompt blocks a step computed when it ends — so no routing decision is
// made while an engine holds events its router has not been sent. The
// fixture's one replica evicts at nearly every step.
func TestTheRouterHearsEvictionsBeforeTheStepRuns(t *testing.T) {
	data, err := os.ReadFile("testdata/evicting.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s, err := ParseScenario(data)
	if err != nil {
		t.Fatal(err)
	}
	w := scenarioWorld(t, s, func(cfg *Config) { cfg.KVEvents = true })
	unsent := 0
	w.observe = func(e event) {
		for _, r := range w.routers {
			for _, rp := range r.replicas {
				if rp.eng.KVEventsPending() {
					if unsent++; unsent == 1 {
						t.Errorf("at %v, after event kind %d, replica %s holds KV events its router has not been sent", w.now, e.kind, rp.name)
					}
				}
			}
		}
	}
	if err := w.loop(); err != nil {
		t.Fatal(err)
	}
	if unsent > 0 {
		t.Errorf("%d times an engine held KV events its router had not been sent", unsent)
	}
	var evictions int64
	for _, r := range w.routers {
		for _, rp := range r.replicas {
			evictions += rp.eng.Stats().Evictions
		}
	}
	if evictions == 0 {
		t.Fatal("the fixture evicted nothing: it tests nothing")
	}
	t.Logf("%d prefix units evicted", evictions)
}

// TestTheTimeToFirstTokenIsSplitWhereItWent: under twice the quickstart's
// load the fair GeoDNS holds requests in its balancer (hold > 0) and
// never crosses the WAN (its network part is the client's link alone),
// while SkyWalker's forwards add WAN time; every SLO miss is put down to
// a cause.
func TestTheTimeToFirstTokenIsSplitWhereItWent(t *testing.T) {
	rep, err := Compare(scenario(t, "quickstart"), Options{Policies: []string{"local", "skywalker"}, RateScale: 2})
	if err != nil {
		t.Fatal(err)
	}
	local, sky := rep.Find("local"), rep.Find("skywalker")
	for _, r := range []*results.Result{local, sky} {
		tp := r.TimeParts
		if tp == nil {
			t.Fatalf("%s: no time parts", r.Policy)
		}
		misses := 0
		for _, n := range tp.Misses {
			misses += n
		}
		if want := int(math.Round((1 - r.SLOAttainment) * float64(r.Requests))); misses != want {
			t.Errorf("%s: %d misses put down to a cause, want %d (every miss)", r.Policy, misses, want)
		}
		if tp.PrefillMeanMs <= 0 {
			t.Errorf("%s: prefill mean %v ms: the engines' prefill is not measured", r.Policy, tp.PrefillMeanMs)
		}
	}
	if local.TimeParts.HoldMeanMs <= 0 || local.TimeParts.HoldP99Ms <= 0 {
		t.Errorf("local at 2× load: hold mean %v p99 %v ms, want some requests held", local.TimeParts.HoldMeanMs, local.TimeParts.HoldP99Ms)
	}
	clientRTT := scenario(t, "quickstart").ClientRTTMs
	if local.TimeParts.NetworkP99Ms > clientRTT+1 {
		t.Errorf("local's network p99 %v ms is over the client's RTT %v ms: it crossed a WAN it never uses", local.TimeParts.NetworkP99Ms, clientRTT)
	}
	if sky.CrossRegion > 0 && sky.TimeParts.NetworkP99Ms <= local.TimeParts.NetworkP99Ms {
		t.Errorf("skywalker forwarded %.1f%% but its network p99 %v ms is no more than local's %v", 100*sky.CrossRegion, sky.TimeParts.NetworkP99Ms, local.TimeParts.NetworkP99Ms)
	}
}

// TestEveryRegionIsEstimatedWithItsOwnHardware: on regions of three GPU
// generations, every router sees each peer's prefill profile as that
// peer's own (its summary carries it), and its own as its own — no speed
// read anywhere is another region's.
func TestEveryRegionIsEstimatedWithItsOwnHardware(t *testing.T) {
	s := scenario(t, "mixed-gpus")
	w := scenarioWorld(t, s, func(*Config) {})
	runUntil(t, w, 30*time.Second)
	own := map[string]policy.PrefillProfile{}
	for _, r := range s.Regions {
		prof, err := profile.Lookup(r.Profile)
		if err != nil {
			t.Fatal(err)
		}
		own[r.Name] = policy.PrefillOf(prof)
	}
	// Learned speed may scale a profile: compare the per-token terms'
	// order, which three generations apart cannot confuse.
	perToken := func(p policy.PrefillProfile) time.Duration { return p.PerToken }
	for _, r := range w.routers {
		v, _ := r.core.Explain(&request.Request{ID: "probe", PromptTokens: 128, BlockTokens: 128})
		if got, want := perToken(v.Local.Prefill), perToken(own[r.name]); got < want/2 || got > 2*want {
			t.Errorf("%s estimates itself at %v per token, its profile says %v", r.name, got, want)
		}
		if len(v.Peers) != len(s.Regions)-1 {
			t.Fatalf("%s sees %d peers, want %d", r.name, len(v.Peers), len(s.Regions)-1)
		}
		for _, p := range v.Peers {
			if got, want := perToken(p.Prefill), perToken(own[p.Name]); got < want/2 || got > 2*want {
				t.Errorf("%s estimates %s at %v per token, %s's profile says %v", r.name, p.Name, got, p.Name, want)
			}
		}
	}
}
