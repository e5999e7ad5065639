package report

import (
	"compress/gzip"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"skywalker/internal/eval"
)

// evalFixture is a hand-made evaluation: skywalker meets the SLO at 5
// replicas; round-robin misses it at the cap on one seed of two, with an
// infinite p99 at the highest load.
func evalFixture() *eval.Report {
	st := func(xs ...float64) eval.Stat { return eval.Summarize(xs) }
	point := func(x float64, n int, slo, p99 float64) eval.Point {
		return eval.Point{X: x, Replicas: n, Metrics: eval.Metrics{SLOAttainment: st(slo, slo), TTFTP50: st(100, 110),
			TTFTP90: st(200, 210), TTFTP99: st(p99, p99), Goodput: st(3, 3), CacheHit: st(0.6, 0.6), CrossRegion: st(0.1, 0.1)}}
	}
	atCap := point(1, 12, 0.93, math.Inf(1)).Metrics
	return &eval.Report{Target: 0.99, Seeds: 2, Loads: []float64{1, 1.5}, Sizes: []float64{1, 1.5}, Tuning: []string{"diurnal-3region"},
		Scenarios: []*eval.ScenarioResult{{
			Name: "paper-l4", Role: eval.Evaluation, Description: "A fixture.", SLO: "3s", Planned: 6, Cap: 12,
			Placement: map[string]int{"a": 3, "b": 3}, Isolated: 8,
			Variants: []*eval.VariantResult{
				{Variant: "skywalker", MinReplicas: st(5, 5), AtMin: point(1, 5, 0.995, 900).Metrics,
					Load: []eval.Point{point(1, 6, 0.999, 800), point(1.5, 6, 0.97, 2500)},
					Size: []eval.Point{point(6, 6, 0.999, 800), point(9, 9, 1, 500)}},
				{Variant: "round-robin@a", MinReplicas: st(11, 13), Missed: 1, AtMin: point(1, 11, 0.99, 1900).Metrics, AtCap: &atCap,
					Load: []eval.Point{point(1, 6, 0.8, 5000), point(1.5, 6, 0.4, math.Inf(1))},
					Size: []eval.Point{point(6, 6, 0.8, 5000), point(9, 9, 0.95, 3000)}},
			},
			Targets: []eval.Target{{Goal: "needs the fewest replicas of all policies", Met: true, Detail: "skywalker 5"},
				{Goal: "a goal it misses", Met: false, Detail: "why"}},
		}},
	}
}

func TestEvalDirWritesTheReportTheDataAndTheFigures(t *testing.T) {
	dir := t.TempDir()
	paths, err := EvalDir(dir, evalFixture())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"results.json.gz", "report.md", "paper-l4_slo_vs_load.svg", "paper-l4_p99_vs_load.svg", "paper-l4_slo_vs_size.svg", "paper-l4_p99_vs_size.svg"}
	for _, name := range want {
		info, err := os.Stat(filepath.Join(dir, name))
		if err != nil || info.Size() == 0 {
			t.Errorf("%s: %v (paths %v)", name, err, paths)
		}
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		"**Tuning set: diurnal-3region.**",
		"| policy | paper-l4 |", // the summary across scenarios
		"| *planned fleet* | *6* |",
		"misses SLO (93.0% at 12) on 1 of 2 seeds", // a miss says by how much, never a ratio
		"| skywalker | 5.0 |",
		"∞",                                  // the infinite p99 of a load point
		"a goal it misses — **missed**: why", // a missed goal is reported
		"The paper's own claim",              // beside the testbed scenario
		"![paper-l4_slo_vs_load](paper-l4_slo_vs_load.svg)",
	} {
		if !strings.Contains(string(md), s) {
			t.Errorf("report.md lacks %q:\n%s", s, md)
		}
	}
	zf, err := os.Open(filepath.Join(dir, "results.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer zf.Close()
	zr, err := gzip.NewReader(zf)
	if err != nil {
		t.Fatalf("results.json.gz is not gzip: %v", err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Scenarios []struct {
			Variants []struct {
				Variant string `json:"variant"`
			} `json:"variants"`
		} `json:"scenarios"`
	}
	if err := json.Unmarshal(data, &back); err != nil || len(back.Scenarios) != 1 || len(back.Scenarios[0].Variants) != 2 {
		t.Errorf("results.json.gz does not read back: %v %+v", err, back)
	}
}

func TestAnEvaluationRendersAgainFromItsResults(t *testing.T) {
	dir := t.TempDir()
	if _, err := EvalDir(dir, evalFixture()); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, "results.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	back, err := eval.ReadReport(f)
	if err != nil {
		t.Fatal(err)
	}
	var first, second strings.Builder
	if err := EvalMarkdown(&first, evalFixture(), nil); err != nil {
		t.Fatal(err)
	}
	if err := EvalMarkdown(&second, back, nil); err != nil {
		t.Fatal(err)
	}
	if first.String() != second.String() {
		t.Errorf("the report rendered from results.json differs from the original:\n%s\n----\n%s", first.String(), second.String())
	}
}

func TestReadReportRejectsBadInput(t *testing.T) {
	for name, in := range map[string]string{
		"not JSON":           "{",
		"no scenarios":       `{"scenarios": []}`,
		"unnamed scenario":   `{"scenarios": [{"variants": []}]}`,
		"unnamed variant":    `{"scenarios": [{"scenario": "x", "variants": [{}]}]}`,
		"miss without a cap": `{"scenarios": [{"scenario": "x", "variants": [{"variant": "v", "seeds_missing_at_cap": 1}]}]}`,
		"negative seeds":     `{"scenarios": [{"scenario": "x", "variants": [{"variant": "v", "min_replicas": {"seeds": -1}}]}]}`,
	} {
		if _, err := eval.ReadReport(strings.NewReader(in)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// FuzzEvalReport: any results.json ReadReport accepts renders without
// panicking.
func FuzzEvalReport(f *testing.F) {
	var b strings.Builder
	if err := JSON(&b, evalFixture()); err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(b.String()))
	f.Add([]byte(`{"scenarios": [{"scenario": "x", "variants": [{"variant": "v", "load_curve": [{"x": 1}]}]}], "loads": [1, 2]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		rep, err := eval.ReadReport(strings.NewReader(string(data)))
		if err != nil {
			return
		}
		if err := EvalMarkdown(io.Discard, rep, nil); err != nil {
			t.Fatal(err)
		}
	})
}

// A policy that misses at every point has no finite p99: its figures
// cannot be drawn (a log scale over nothing panicked), but the run's data
// and report are still written, with the figures that can be.
func TestAnEvaluationWhoseEveryP99IsInfiniteIsStillWritten(t *testing.T) {
	rep := evalFixture()
	s := rep.Scenarios[0]
	s.Variants = s.Variants[:1]
	for _, pts := range [][]eval.Point{s.Variants[0].Load, s.Variants[0].Size} {
		for i := range pts {
			pts[i].TTFTP99 = eval.Summarize([]float64{math.Inf(1), math.Inf(1)})
		}
	}
	dir := t.TempDir()
	if _, err := EvalDir(dir, rep); err != nil {
		t.Fatalf("EvalDir: %v", err)
	}
	for name, want := range map[string]bool{"results.json.gz": true, "report.md": true, "paper-l4_slo_vs_load.svg": true,
		"paper-l4_slo_vs_size.svg": true, "paper-l4_p99_vs_load.svg": false, "paper-l4_p99_vs_size.svg": false} {
		if _, err := os.Stat(filepath.Join(dir, name)); (err == nil) != want {
			t.Errorf("%s written = %v, want %v", name, err == nil, want)
		}
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(md), "p99_vs_load.svg") {
		t.Error("report.md links a figure that was not drawn")
	}
}

// A scenario sized in money shows each policy's monthly cost to the SLO
// and its ratio to the pooling bound's; one sized in replicas does not.
func TestTheHeadlineSpeaksInMoneyForAPricedFleet(t *testing.T) {
	s := evalFixture().Scenarios[0]
	if table := HeadlineTable(s); strings.Contains(table, "$/month") {
		t.Errorf("a fleet in replicas shows money:\n%s", table)
	}
	priced := *s
	cost := func(x float64) *eval.Stat { st := eval.Summarize([]float64{x, x}); return &st }
	sky, rr := *s.Variants[0], *s.Variants[1]
	sky.MinMonthlyCost, rr.MinMonthlyCost = cost(10200), cost(20400)
	bound := eval.VariantResult{Variant: "skywalker@pooled", MinReplicas: eval.Summarize([]float64{4, 4}), MinMonthlyCost: cost(8500)}
	priced.Variants = []*eval.VariantResult{&sky, &rr, &bound}
	priced.Bound = bound.Variant
	table := HeadlineTable(&priced)
	for _, want := range []string{"| $/month to meet the SLO | × the bound's cost |", "| $10200 | 1.20× |", "| > $20400 | 2.40× |", "| $8500 | 1.00× |"} {
		if !strings.Contains(table, want) {
			t.Errorf("the headline does not say %q:\n%s", want, table)
		}
	}
}
