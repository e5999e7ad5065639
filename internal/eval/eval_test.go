package eval

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"skywalker/internal/results"
	"skywalker/internal/sim"
)

// twoRegionSpec is testdata/two-regions.yaml: a day small enough to
// evaluate in a test.
func twoRegionSpec(t *testing.T) *sim.Scenario {
	t.Helper()
	data, err := os.ReadFile("testdata/two-regions.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sc, err := sim.ParseScenario(data)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func TestSummarize(t *testing.T) {
	inf := math.Inf(1)
	for _, tc := range []struct {
		name            string
		xs              []float64
		mean, low, high float64
	}{
		{"one seed has no interval", []float64{7}, 7, 7, 7},
		// sd 1, t(2 df) = 4.303: half width 4.303/√3.
		{"three seeds", []float64{1, 2, 3}, 2, 2 - 4.303/math.Sqrt(3), 2 + 4.303/math.Sqrt(3)},
		{"equal seeds", []float64{5, 5, 5, 5, 5}, 5, 5, 5},
		{"an infinite seed makes the mean infinite", []float64{1, inf, 3}, inf, inf, inf},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Summarize(tc.xs)
			if s.N != len(tc.xs) || !near(s.Mean, tc.mean) || !near(s.Low, tc.low) || !near(s.High, tc.high) {
				t.Errorf("Summarize(%v) = %+v, want mean %v in [%v, %v]", tc.xs, s, tc.mean, tc.low, tc.high)
			}
		})
	}
	if s := Summarize(nil); s.N != 0 || s.Format(1) != "-" {
		t.Errorf("no samples: %+v formats as %q", s, s.Format(1))
	}
}

func near(a, b float64) bool {
	if math.IsInf(a, 0) || math.IsInf(b, 0) {
		return a == b
	}
	return math.Abs(a-b) < 1e-9
}

func TestTiesAreOverlappingIntervals(t *testing.T) {
	a := Summarize([]float64{10, 11, 12})
	for _, tc := range []struct {
		name string
		b    Stat
		want bool
	}{
		{"overlapping", Summarize([]float64{11, 12, 13}), true},
		{"apart", Summarize([]float64{30, 30.5, 31}), false},
		{"infinite against finite", Summarize([]float64{math.Inf(1)}), false},
	} {
		if got := a.Ties(tc.b); got != tc.want || tc.b.Ties(a) != tc.want {
			t.Errorf("%s: %+v ties %+v = %v, want %v both ways", tc.name, a, tc.b, got, tc.want)
		}
	}
	inf := Summarize([]float64{math.Inf(1)})
	if !inf.Ties(inf) || inf.Format(0) != "∞" {
		t.Errorf("two infinite stats must tie and print ∞: %q", inf.Format(0))
	}
	data, err := json.Marshal(inf)
	if err != nil || !strings.Contains(string(data), `"mean":null`) {
		t.Errorf("an infinite mean must marshal as null: %s %v", data, err)
	}
}

func TestVariantLabelsRoundTrip(t *testing.T) {
	sc := twoRegionSpec(t)
	for _, tc := range []struct {
		label string
		ok    bool
	}{
		{"skywalker", true},
		{"cache-aware@east", true},
		{"gorgo@west", true},
		{"cache-aware@mars", false},
		{"nonsense", false},
		{"cache-aware@pooled", true},
		{"skywalker@pooled", false}, // a router per region cannot be one router over the pool

	} {
		v := ParseVariant(tc.label)
		if v.Label() != tc.label {
			t.Errorf("%q parses to %+v, labelled %q", tc.label, v, v.Label())
		}
		if err := v.check(sc); (err == nil) != tc.ok {
			t.Errorf("%q: check error %v, want ok=%v", tc.label, err, tc.ok)
		}
	}
}

func TestPlaceByWeight(t *testing.T) {
	sc := &sim.Scenario{Regions: []sim.ScenarioRegion{{Name: "a"}, {Name: "b"}, {Name: "c"}}}
	weights := map[string]float64{"a": 6, "b": 3, "c": 1}
	for _, n := range []int{1, 3, 4, 10, 11, 25} {
		got := placeByWeight(sc, weights, n)
		total := 0
		for name, k := range got {
			if k < 1 {
				t.Errorf("n=%d: %s gets %d, want at least one", n, name, k)
			}
			total += k
		}
		if total != max(n, 3) || got["a"] < got["b"] || got["b"] < got["c"] {
			t.Errorf("n=%d: %v, want %d replicas in the weights' order", n, got, max(n, 3))
		}
	}
}

// thresholdEvaluator meets the target iff a run has at least need
// replicas, and counts the runs.
func thresholdEvaluator(need int) (*evaluator, *[]job) {
	var mu sync.Mutex
	var jobs []job
	e := &evaluator{opt: Options{Target: 0.99}, sem: make(chan struct{}, 1)}
	e.run = func(_ context.Context, j job) (*results.Result, error) {
		mu.Lock()
		jobs = append(jobs, j)
		mu.Unlock()
		r := &results.Result{SLOAttainment: 0.5, Stopped: j.stopEarly}
		if j.replicas >= need {
			r.SLOAttainment, r.Stopped = 1, false
		}
		return r, nil
	}
	return e, &jobs
}

func TestSearchFindsTheSmallestReservation(t *testing.T) {
	p := &scenarioPlan{sc: twoRegionSpec(t), planned: 10}
	for _, tc := range []struct {
		name string
		need int
		want int
	}{
		{"below the plan", 6, 6},
		{"at the plan", 10, 10},
		{"above the plan", 13, 13},
		{"at the cap", 20, 20},
		{"one region's floor", 1, 2},
		{"beyond the cap", 21, 21},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, jobs := thresholdEvaluator(tc.need)
			n, res, err := e.search(context.Background(), p, Variant{Policy: "skywalker"}, 1)
			if err != nil || n != tc.want || res == nil {
				t.Fatalf("search = %d, %v, %v; want %d with its result", n, res, err, tc.want)
			}
			if tc.need > p.cap() {
				last := (*jobs)[len(*jobs)-1]
				if last.replicas != p.cap() || last.stopEarly {
					t.Errorf("a miss at the cap must end with a full run at the cap, not %+v", last)
				}
				return
			}
			if res.SLOAttainment < 0.99 {
				t.Errorf("the result returned is not the one that met the target: %+v", res)
			}
			if len(*jobs) > 8 {
				t.Errorf("%d runs for a search over %d..%d", len(*jobs), 2, p.cap())
			}
		})
	}
}

// TestRunIsDeterministicAndComplete evaluates a small scenario twice: the
// report has every variant, curve point and seed, and is identical.
func TestRunIsDeterministicAndComplete(t *testing.T) {
	opt := func() Options {
		return Options{
			Entries:  []Entry{{Scenario: "two-regions", Role: Evaluation, Spec: twoRegionSpec(t)}},
			Variants: []Variant{{Policy: "skywalker"}, {Policy: "local"}, {Policy: "cache-aware", Router: "east"}},
			Seeds:    2, Loads: []float64{0.5, 1}, Sizes: []float64{1, 1.5}, Parallel: 2,
		}
	}
	a, err := Run(context.Background(), opt())
	if err != nil {
		t.Fatal(err)
	}
	s := a.Scenarios[0]
	if s.Planned < 2 || s.Cap != 2*s.Planned || len(s.Variants) != 3 || len(s.Targets) == 0 {
		t.Fatalf("scenario result %+v", s)
	}
	for _, v := range s.Variants {
		if v.MinReplicas.N != 2 || len(v.Load) != 2 || len(v.Size) != 2 {
			t.Errorf("%s: %d seeds, %d load points, %d size points; want 2, 2, 2", v.Variant, v.MinReplicas.N, len(v.Load), len(v.Size))
		}
		if v.Missed == 0 && v.AtMin.SLOAttainment.Mean < 0.99 {
			t.Errorf("%s: SLO attainment %v at its smallest reservation, below the target", v.Variant, v.AtMin.SLOAttainment.Mean)
		}
		if v.Size[0].Replicas != s.Planned || v.Load[1].Replicas != s.Planned {
			t.Errorf("%s: curves not at the planned fleet: %+v %+v", v.Variant, v.Size[0], v.Load[1])
		}
	}
	// Run again, one variant only (a third of the work): its results are
	// the same, whatever else was evaluated beside it.
	again := opt()
	again.Variants = again.Variants[:1]
	b, err := Run(context.Background(), again)
	if err != nil {
		t.Fatal(err)
	}
	ja, _ := json.Marshal(a.Scenarios[0].Variants[0])
	jb, _ := json.Marshal(b.Scenarios[0].Variants[0])
	if string(ja) != string(jb) {
		t.Errorf("two runs of the same evaluation differ for %s: the evaluation is not deterministic per seed", a.Scenarios[0].Variants[0].Variant)
	}
}

func TestTheTuningSetIsNamedAndApart(t *testing.T) {
	var tuning []string
	for _, e := range Set {
		if e.Role == Tuning {
			tuning = append(tuning, e.Scenario)
		}
	}
	if strings.Join(tuning, ",") != "diurnal-3region" || RoleOf("diurnal-3region") != Tuning || RoleOf("burst") != Evaluation {
		t.Errorf("tuning set %v: want diurnal-3region alone", tuning)
	}
}

func TestTargetsReportAMissWithItsReason(t *testing.T) {
	p := &scenarioPlan{sc: twoRegionSpec(t), loads: []float64{1}}
	pt := func(slo, p50 float64) Point {
		return Point{X: 1, Replicas: 4, Metrics: Metrics{SLOAttainment: Summarize([]float64{slo}),
			RemoteP50: Summarize([]float64{p50}), Goodput: Summarize([]float64{1}), CacheHit: Summarize([]float64{0.5})}}
	}
	res := &ScenarioResult{Variants: []*VariantResult{
		{Variant: "skywalker", MinReplicas: Summarize([]float64{5, 5}), Load: []Point{pt(1, 100)}, Size: []Point{pt(1, 100)}},
		{Variant: "local", MinReplicas: Summarize([]float64{6, 6}), Load: []Point{pt(1, 90)}, Size: []Point{pt(1, 90)}},
		{Variant: "cache-aware@east", MinReplicas: Summarize([]float64{4, 4}), Load: []Point{pt(1, 120)}, Size: []Point{pt(1, 120)}},
	}}
	all := targets(res, p, 0.99)
	for prefix, want := range map[string]bool{
		"needs the fewest": false, // cache-aware@east needs 4
		"≥ 25% fewer":      false, // 5 vs 6 is 16.7%
		"TTFT p50 ≥ 1.5×":  false, // 1.2×
		"at every load":    true,
	} {
		var tg Target
		ok := false
		for _, x := range all {
			if strings.HasPrefix(x.Goal, prefix) {
				tg, ok = x, true
			}
		}
		if !ok || tg.Met != want || tg.Detail == "" {
			t.Errorf("goal %q: %+v, want met=%v with a detail", prefix, tg, want)
		}
	}
}

// The pooled variant runs one router before the whole fleet with no
// distance anywhere; it is the bound, not a rival: it names the scenario's
// limit and gives the "within 10%" goal, and never the "fewest replicas"
// or "best other" ones.
func TestThePoolingBoundIsTheLimitNotARival(t *testing.T) {
	cfg := sim.Config{ClientRTT: 37 * time.Millisecond, Jitter: time.Millisecond,
		RTT: [][]time.Duration{{0, 72 * time.Millisecond}, {72 * time.Millisecond, 0}}}
	pool(&cfg, "east")
	if cfg.Router != "east" || cfg.ClientRTT != 0 || cfg.Jitter != 0 || cfg.RTT[0][1] != 0 || cfg.RTT[1][0] != 0 {
		t.Errorf("pooled config %+v: want one router in east and no RTT anywhere", cfg)
	}
	p := &scenarioPlan{sc: twoRegionSpec(t), loads: []float64{1}}
	pt := Point{X: 1, Replicas: 4, Metrics: Metrics{SLOAttainment: Summarize([]float64{1}), Goodput: Summarize([]float64{1}), CacheHit: Summarize([]float64{0.5})}}
	res := &ScenarioResult{Variants: []*VariantResult{
		{Variant: "skywalker", MinReplicas: Summarize([]float64{5, 5}), Load: []Point{pt}},
		{Variant: "local", MinReplicas: Summarize([]float64{6, 6}), Load: []Point{pt}},
		{Variant: "cache-aware@pooled", MinReplicas: Summarize([]float64{4, 4}), Load: []Point{pt}},
		{Variant: "gorgo@pooled", MinReplicas: Summarize([]float64{4.4, 4.6}), Load: []Point{pt}},
	}}
	res.Bound = pickBound(res.Variants)
	if res.Bound != "cache-aware@pooled" || res.BoundResult() != res.Variants[2] {
		t.Fatalf("bound %q, want cache-aware@pooled", res.Bound)
	}
	goals := map[string]Target{}
	for _, tg := range targets(res, p, 0.99) {
		goals[strings.Fields(tg.Goal)[0]+" "+strings.Fields(tg.Goal)[1]] = tg
	}
	if g := goals["needs the"]; !g.Met || strings.Contains(g.Detail, "pooled") {
		t.Errorf("fewest replicas: %+v, want met against local, the bound left out", g)
	}
	if g := goals["within 10%"]; g.Met || !strings.Contains(g.Detail, "25.0% over") {
		t.Errorf("bound goal: %+v, want missed, 25.0%% over (5 vs 4)", g)
	}
	res.Variants[0].MinReplicas = Summarize([]float64{4.3, 4.3})
	for _, tg := range targets(res, p, 0.99) {
		if strings.HasPrefix(tg.Goal, "within 10%") && !tg.Met {
			t.Errorf("4.3 against a bound of 4 is within 10%%: %+v", tg)
		}
	}
}

// A fleet of mixed hardware and prices is sized in money: each policy's
// fleet has a monthly cost that grows with its size; a fleet of one kind
// without prices stays in replicas.
func TestAMixedFleetIsSizedInMoney(t *testing.T) {
	p, err := newScenarioPlan(Entry{Scenario: "priced-fleet", Role: Evaluation}, Options{Seeds: 1, Loads: []float64{1}, Sizes: []float64{1}})
	if err != nil {
		t.Fatal(err)
	}
	if p.monthly == nil {
		t.Fatal("priced-fleet: no monthly cost per fleet")
	}
	for _, sharing := range []bool{true, false} {
		for n := 3; n < 10; n++ {
			if a, b := p.monthly(n, sharing), p.monthly(n+1, sharing); b <= a {
				t.Errorf("sharing %v: %d replicas cost $%.0f, %d cost $%.0f: a larger fleet must cost more", sharing, n, a, n+1, b)
			}
		}
	}
	// The cheapest all-day reservation leans on eu-west's A100s ($0.54 a
	// request/s-hour against the H100's $0.59 and Tokyo's $0.65).
	if placed := p.place(8, true); placed["eu-west"] <= placed["ap-northeast"] {
		t.Errorf("a sharing fleet of 8 placed %v: want eu-west's cheaper capacity to carry the most", placed)
	}
	uniform, err := newScenarioPlan(Entry{Scenario: "diurnal-3region", Role: Tuning}, Options{Seeds: 1, Loads: []float64{1}, Sizes: []float64{1}})
	if err != nil {
		t.Fatal(err)
	}
	if uniform.monthly != nil {
		t.Error("diurnal-3region (one kind of GPU, no prices) is sized in money")
	}
}
