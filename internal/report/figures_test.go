package report

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"skywalker/internal/plan"
	"skywalker/internal/sim"
)

// TestEveryFigureFitsItsCanvas renders every figure the reports write —
// the evaluation's curves, a simulation's bars, series and sweep, the
// plan's day — and checks that no label overflows the canvas or collides
// with another, that report.md links every figure, and that the plan's
// axes cover zero and the whole day.
func TestEveryFigureFitsItsCanvas(t *testing.T) {
	dir := t.TempDir()
	evalPaths, err := EvalDir(filepath.Join(dir, "eval"), evalFixture())
	if err != nil {
		t.Fatal(err)
	}
	sc, err := sim.Builtin("quickstart")
	if err != nil {
		t.Fatal(err)
	}
	var points []SweepPoint
	for _, scale := range []float64{0.5, 1} {
		rep, err := sim.Compare(sc, sim.Options{RateScale: scale})
		if err != nil {
			t.Fatal(err)
		}
		points = append(points, SweepPoint{RateScale: scale, Report: rep})
	}
	simPaths, err := SimDir(filepath.Join(dir, "sim"), points)
	if err != nil {
		t.Fatal(err)
	}
	in, err := plan.FromScenario(sc)
	if err != nil {
		t.Fatal(err)
	}
	in.Capacity = 1
	res, err := plan.Solve(in)
	if err != nil {
		t.Fatal(err)
	}
	planPath, err := PlanPlot(dir, in, res)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Price(nil, ""); err != nil {
		t.Fatal(err)
	}
	cp, err := plan.PlanCost(in)
	if err != nil {
		t.Fatal(err)
	}
	costPath, err := CostPlot(dir, in, cp)
	if err != nil {
		t.Fatal(err)
	}
	var figures []string
	for _, p := range append(append(evalPaths, simPaths...), planPath, costPath) {
		if strings.HasSuffix(p, ".svg") {
			figures = append(figures, p)
			checkFigure(t, p)
		}
	}
	for _, want := range []string{"cache_hit_rate.svg", "queue_skywalker.svg", "token_budget_skywalker.svg", "ttft_vs_load.svg", "plan.svg", "plan-cost.svg", "paper-l4_slo_vs_load.svg", "paper-l4_p99_vs_size.svg"} {
		found := false
		for _, f := range figures {
			found = found || filepath.Base(f) == want || strings.HasSuffix(f, want)
		}
		if !found {
			t.Errorf("no figure %s among %v", want, figures)
		}
	}
	md, err := os.ReadFile(filepath.Join(dir, "sim", "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range simPaths {
		if strings.HasSuffix(f, ".svg") && !strings.Contains(string(md), "("+filepath.Base(f)+")") {
			t.Errorf("report.md does not link %s", filepath.Base(f))
		}
	}
}

// TestPlanAxesCoverTheDayFromZero checks the plan figure's axes directly.
func TestPlanAxesCoverTheDayFromZero(t *testing.T) {
	_, _, texts := readSVG(t, planFigure(t))
	labels := map[string]bool{}
	for _, tx := range texts {
		labels[strings.TrimSpace(tx.text)] = true
	}
	for _, want := range []string{"0", "24"} {
		if !labels[want] {
			t.Errorf("the plan's axes have no %q tick: %v", want, labels)
		}
	}
}

func planFigure(t *testing.T) string {
	t.Helper()
	sc, err := sim.Builtin("diurnal-3region")
	if err != nil {
		t.Fatal(err)
	}
	in, err := plan.FromScenario(sc)
	if err != nil {
		t.Fatal(err)
	}
	in.Capacity = sc.PlanCapacity
	res, err := plan.Solve(in)
	if err != nil {
		t.Fatal(err)
	}
	path, err := PlanPlot(t.TempDir(), in, res)
	if err != nil {
		t.Fatal(err)
	}
	return path
}
