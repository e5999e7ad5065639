package report

import (
	"compress/gzip"
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"skywalker/internal/eval"
	"skywalker/internal/results"
)

// PaperClaims are the SkyWalker paper's own headline numbers (EuroSys '26,
// arXiv 2505.24095), printed beside ours for its testbed scenario.
const PaperClaims = "1.12–2.06× throughput and 1.74–6.30× lower latency than existing load balancers; " +
	"25% fewer replicas than region-local (12 → 9) on three regions of Llama-3.1-8B on L4 GPUs behind SGLang"

// EvalDir writes an evaluation into dir: report.md (linking its figures),
// results.json.gz (the whole report as gzipped JSON, for --render) and, per scenario, SVG curves of SLO attainment and TTFT p99
// against offered load and of SLO attainment against reservation size. It
// returns the paths written.
func EvalDir(dir string, rep *eval.Report) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var paths []string
	write := func(name string, fn func(io.Writer) error) error {
		path := filepath.Join(dir, name)
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := fn(f); err != nil {
			f.Close()
			return fmt.Errorf("write %s: %w", path, err)
		}
		paths = append(paths, path)
		return f.Close()
	}
	// The data first: a figure that cannot be drawn must not lose a run
	// that took minutes.
	if err := write("results.json.gz", func(w io.Writer) error {
		zw := gzip.NewWriter(w)
		if err := JSON(zw, rep); err != nil {
			return err
		}
		return zw.Close()
	}); err != nil {
		return nil, err
	}
	figures := map[string][]string{}
	for _, s := range rep.Scenarios {
		for _, fig := range []struct {
			name string
			plot func(*eval.ScenarioResult, float64) (*plot.Plot, error)
		}{
			{"slo_vs_load", sloVsLoad}, {"p99_vs_load", p99VsLoad}, {"slo_vs_size", sloVsSize}, {"p99_vs_size", p99VsSize},
		} {
			p, err := fig.plot(s, rep.Target)
			if errors.Is(err, errNothingToDraw) {
				continue // every value infinite (a policy that misses everywhere): the tables say so
			}
			if err != nil {
				return paths, err
			}
			name := strings.ReplaceAll(s.Name, "/", "_") + "_" + fig.name + ".svg" // "two-models/llama-8b": one flat directory
			path := filepath.Join(dir, name)
			if err := SaveSVG(p, evalW, evalH, path); err != nil {
				return paths, fmt.Errorf("save %s: %w", path, err)
			}
			paths = append(paths, path)
			figures[s.Name] = append(figures[s.Name], name)
		}
	}
	if err := write("report.md", func(w io.Writer) error { return EvalMarkdown(w, rep, figures) }); err != nil {
		return nil, err
	}
	return paths, nil
}

const evalW, evalH = 20 * vg.Centimeter, 11 * vg.Centimeter

// EvalMarkdown writes the evaluation as Markdown; figures names each
// scenario's SVG files, linked below its tables.
func EvalMarkdown(w io.Writer, rep *eval.Report, figures map[string][]string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# SkyWalker evaluation\n\n")
	fmt.Fprintf(&b, "Every number is the mean over %d seeds with a 95%% interval (Student's t). A difference inside the "+
		"intervals is a tie. A request dropped, rejected or abandoned by its client (every client gives up at the same "+
		"deadline under every policy) counts as an SLO miss and as an infinite TTFT (∞) in the percentiles.\n\n", rep.Seeds)
	inRun := false
	for _, s := range rep.Scenarios {
		inRun = inRun || s.Role == eval.Tuning
	}
	note := "its numbers are in-sample"
	if !inRun {
		note = "it is not in this run"
	}
	fmt.Fprintf(&b, "**Tuning set: %s.** The policies' constants were chosen on it alone and frozen before this run; "+
		"%s. Every other scenario is out of sample.\n\n", strings.Join(rep.Tuning, ", "), note)
	fmt.Fprintf(&b, "**The headline**: the smallest reservation (replicas, placed per region as `skywalker plan` places "+
		"them; region-isolated policies along regional peaks) at which ≥ %.0f%% of requests meet the TTFT SLO over the "+
		"simulated day, found by search up to twice the planned fleet. `x@region` is the policy as one router in that "+
		"region (clients elsewhere pay their RTT to it and back; it scrapes remote replicas over the WAN); without `@` "+
		"it is a router in every region.\n\n", 100*rep.Target)
	fmt.Fprintf(&b, "%d simulations in %s.\n\n", rep.Runs, rep.Elapsed.Round(1e9))
	b.WriteString("## Summary: replicas to meet the SLO\n\n")
	b.WriteString("In brackets, the ratio to the scenario's pooling bound: the fewest replicas of `x@pooled`, one router " +
		"before every replica with every RTT zero (no deployment can do better than the fleet pooled where distance " +
		"costs nothing).\n\n")
	b.WriteString(SummaryTable(rep))
	b.WriteString("\n")
	if audit := AuditTable(rep); audit != "" {
		b.WriteString("## Admission audit and where the time goes\n\n")
		b.WriteString("SkyWalker at the planned fleet and 1× load, run again on the same arrivals with SLO-aware admission off. " +
			"*Refused but servable*: requests refused or shed that the run without admission answered within the SLO. " +
			"The time to first token of completed requests, split (means, ms): held in balancer queues, on the network " +
			"(client link, WAN), in the engine's queue, in prefill; and what the SLO misses are owed to (a late request to " +
			"its largest part).\n\n")
		b.WriteString(audit)
		b.WriteString("\n")
	}
	for _, s := range rep.Scenarios {
		fmt.Fprintf(&b, "## `%s` (%s)\n\n%s\n\n", s.Name, s.Role, s.Description)
		fmt.Fprintf(&b, "TTFT SLO %s. Planned fleet (peak of the summed demand): %d replicas %s", s.SLO, s.Planned, placementString(s.Placement))
		if s.Isolated > 0 {
			fmt.Fprintf(&b, "; every region sized for its own peak: %d", s.Isolated)
		}
		fmt.Fprintf(&b, ". Search cap: %d.\n\n", s.Cap)
		if s.Name == "paper-l4" {
			fmt.Fprintf(&b, "The paper's own claim for its testbed: %s. What differs here: a simulated engine (vLLM's scheduler, "+
				"L4 profile) instead of SGLang on real L4s, a synthetic diurnal day with Azure code-trace lengths instead of "+
				"the paper's workload, and replicas searched to meet 99%% of requests within the SLO rather than compared at "+
				"a fixed size.\n\n", PaperClaims)
		}
		b.WriteString(HeadlineTable(s))
		b.WriteString("\n")
		b.WriteString(loadTable(s, rep.Loads))
		b.WriteString("\n")
		b.WriteString(sizeTable(s))
		b.WriteString("\n")
		b.WriteString(TimeTable(s))
		b.WriteString("\nGoals:\n\n")
		for _, t := range s.Targets {
			mark := "met"
			if !t.Met {
				mark = "**missed**"
			}
			fmt.Fprintf(&b, "- %s — %s: %s\n", t.Goal, mark, t.Detail)
		}
		if figs := figures[s.Name]; len(figs) > 0 {
			b.WriteString("\n")
			for _, f := range figs {
				fmt.Fprintf(&b, "![%s](%s)\n", strings.TrimSuffix(f, ".svg"), f)
			}
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func placementString(m map[string]int) string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %d", n, m[n])
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// SummaryTable is a Markdown table of the replicas every variant needs on
// every scenario (rows in the first scenario's variant order), the
// tuning set marked.
func SummaryTable(rep *eval.Report) string {
	if len(rep.Scenarios) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("| policy |")
	for _, s := range rep.Scenarios {
		name := s.Name
		if s.Role == eval.Tuning {
			name += " (tuning)"
		}
		fmt.Fprintf(&b, " %s |", name)
	}
	b.WriteString("\n|---|" + strings.Repeat("---:|", len(rep.Scenarios)) + "\n")
	var order []string
	seen := map[string]bool{}
	for _, s := range rep.Scenarios {
		for _, v := range s.Variants {
			if !seen[v.Variant] {
				seen[v.Variant] = true
				order = append(order, v.Variant)
			}
		}
	}
	for _, name := range order {
		fmt.Fprintf(&b, "| %s |", name)
		for _, s := range rep.Scenarios {
			cell := "-"
			for _, v := range s.Variants {
				if v.Variant == name {
					cell = replicasCell(s, v)
				}
			}
			fmt.Fprintf(&b, " %s |", cell)
		}
		b.WriteString("\n")
	}
	b.WriteString("| *planned fleet* |")
	for _, s := range rep.Scenarios {
		fmt.Fprintf(&b, " *%d* |", s.Planned)
	}
	b.WriteString("\n")
	return b.String()
}

// replicasCell is what a variant needs: the mean with its interval, or
// by how much it misses at the cap.
// A variant that meets it carries its ratio to the pooling bound when the
// scenario has one.
func replicasCell(s *eval.ScenarioResult, v *eval.VariantResult) string {
	if v.Missed > 0 && v.AtCap != nil {
		return fmt.Sprintf("> %d: misses SLO (%.1f%% at %d) on %d of %d seeds", s.Cap, 100*v.AtCap.SLOAttainment.Mean, s.Cap, v.Missed, v.MinReplicas.N)
	}
	if b := s.BoundResult(); b != nil && b.Missed == 0 && b.MinReplicas.Mean > 0 {
		return fmt.Sprintf("%s (%.2f×)", v.MinReplicas.Format(1), v.MinReplicas.Mean/b.MinReplicas.Mean)
	}
	return v.MinReplicas.Format(1)
}

// HeadlineTable is a Markdown table of the variants ranked by the replicas
// they need, with their figures at that reservation.
func HeadlineTable(s *eval.ScenarioResult) string {
	vs := append([]*eval.VariantResult(nil), s.Variants...)
	sort.SliceStable(vs, func(i, j int) bool { return vs[i].MinReplicas.Mean < vs[j].MinReplicas.Mean })
	var geo *eval.VariantResult
	for _, v := range s.Variants {
		if v.Variant == "local" {
			geo = v
		}
	}
	// A fleet of mixed hardware or prices is measured in money: the cost
	// of each policy's smallest fleet, and its ratio to the bound's.
	priced := len(vs) > 0 && vs[0].MinMonthlyCost != nil
	var bound *eval.VariantResult
	if b := s.BoundResult(); priced && b != nil && b.MinMonthlyCost != nil {
		bound = b
	}
	var b strings.Builder
	b.WriteString("| policy | replicas to meet the SLO | vs GeoDNS (local) |")
	if priced {
		b.WriteString(" $/month to meet the SLO | × the bound's cost |")
	}
	b.WriteString(" TTFT p50 ms | p90 ms | p99 ms | goodput rps | cache hit | cross-region |\n|---|---:|---:|")
	if priced {
		b.WriteString("---:|---:|")
	}
	b.WriteString("---:|---:|---:|---:|---:|---:|\n")
	for _, v := range vs {
		need := replicasCell(s, v)
		vsGeo := "-"
		if geo != nil && v != geo && v.Missed == 0 && geo.Missed == 0 {
			vsGeo = fmt.Sprintf("%+.0f%%", 100*(v.MinReplicas.Mean/geo.MinReplicas.Mean-1))
		}
		fmt.Fprintf(&b, "| %s | %s | %s |", v.Variant, need, vsGeo)
		if priced {
			cost, ratio := "-", "-"
			if c := v.MinMonthlyCost; c != nil && c.N > 0 {
				cost = "$" + c.Format(0)
				if v.Missed > 0 {
					cost = "> " + cost
				}
				if bound != nil && bound.MinMonthlyCost.Mean > 0 {
					ratio = fmt.Sprintf("%.2f×", c.Mean/bound.MinMonthlyCost.Mean)
				}
			}
			fmt.Fprintf(&b, " %s | %s |", cost, ratio)
		}
		m := v.AtMin
		fmt.Fprintf(&b, " %s | %s | %s | %s | %s | %s |\n", m.TTFTP50.Format(0),
			m.TTFTP90.Format(0), m.TTFTP99.Format(0), m.Goodput.Format(2), pctStat(m.CacheHit), pctStat(m.CrossRegion))
	}
	return b.String()
}

func pctStat(s eval.Stat) string {
	if s.N == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*s.Mean)
}

// loadTable is SLO attainment and TTFT p99 against offered load at the
// planned fleet.
func loadTable(s *eval.ScenarioResult, loads []float64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "SLO attainment / TTFT p99 (ms) against offered load, at the planned fleet (%d replicas):\n\n| policy |", s.Planned)
	for _, l := range loads {
		fmt.Fprintf(&b, " %g× |", l)
	}
	b.WriteString("\n|---|" + strings.Repeat("---:|", len(loads)) + "\n")
	for _, v := range s.Variants {
		fmt.Fprintf(&b, "| %s |", v.Variant)
		for _, p := range v.Load {
			fmt.Fprintf(&b, " %s / %s |", pct1(p.SLOAttainment), p.TTFTP99.Format(0))
		}
		b.WriteString("\n")
	}
	return b.String()
}

func pct1(s eval.Stat) string {
	if s.N == 0 {
		return "-"
	}
	if s.High-s.Mean < 0.0005 {
		return fmt.Sprintf("%.1f%%", 100*s.Mean)
	}
	return fmt.Sprintf("%.1f±%.1f%%", 100*s.Mean, 100*(s.High-s.Mean))
}

// sizeTable is SLO attainment against reservation size at nominal load.
func sizeTable(s *eval.ScenarioResult) string {
	if len(s.Variants) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("SLO attainment / TTFT p99 (ms) against reservation size (replicas), at the nominal load:\n\n| policy |")
	for _, p := range s.Variants[0].Size {
		fmt.Fprintf(&b, " %d |", p.Replicas)
	}
	b.WriteString("\n|---|" + strings.Repeat("---:|", len(s.Variants[0].Size)) + "\n")
	for _, v := range s.Variants {
		fmt.Fprintf(&b, "| %s |", v.Variant)
		for _, p := range v.Size {
			fmt.Fprintf(&b, " %s / %s |", pct1(p.SLOAttainment), p.TTFTP99.Format(0))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// errNothingToDraw: no variant has a finite value to plot (on a log
// scale an empty plot cannot even be drawn).
var errNothingToDraw = errors.New("no finite value to draw")

// curve draws one line per variant.
func curve(title, xLabel, yLabel string, s *eval.ScenarioResult, logY bool, pick func(*eval.VariantResult) []eval.Point,
	y func(eval.Point) float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xLabel
	p.Y.Label.Text = yLabel
	if logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = logTicks{}
	}
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	var lines []any
	for _, v := range s.Variants {
		if !figureVariants[v.Variant] && !figureVariants[eval.ParseVariant(v.Variant).Policy+"@"] {
			continue
		}
		var xys plotter.XYs
		for _, pt := range pick(v) {
			val := y(pt)
			if math.IsInf(val, 0) || math.IsNaN(val) || (logY && val <= 0) {
				continue
			}
			xys = append(xys, plotter.XY{X: pt.X, Y: val})
		}
		if len(xys) > 0 {
			lines = append(lines, v.Variant, xys)
		}
	}
	if len(lines) == 0 {
		return nil, fmt.Errorf("%s: %w", title, errNothingToDraw)
	}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return nil, fmt.Errorf("%s: %w", title, err)
	}
	p.X.Padding = 0.4 * vg.Centimeter
	return p, nil
}

// withTarget draws the SLO-attainment target as a thin grey line across
// an attainment figure.
func withTarget(p *plot.Plot, err error, target float64) (*plot.Plot, error) {
	if err != nil || target <= 0 {
		return p, err
	}
	line, lerr := plotter.NewLine(plotter.XYs{{X: p.X.Min, Y: 100 * target}, {X: p.X.Max, Y: 100 * target}})
	if lerr != nil {
		return nil, lerr
	}
	line.Color = color.Gray{Y: 150}
	line.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
	p.Add(line)
	p.Legend.Add(fmt.Sprintf("target %.0f%%", 100*target), line)
	return p, nil
}

// figureVariants are the variants the figures draw (the tables list
// every one): ours, the fair GeoDNS, the two research peers, and the
// strongest global baseline in both deployments ("x@" is x as one router).
var figureVariants = map[string]bool{"skywalker": true, "local": true, "skylb": true, "gorgo": true,
	"cache-aware": true, "cache-aware@": true, "gorgo@": true}

func sloVsLoad(s *eval.ScenarioResult, target float64) (*plot.Plot, error) {
	p, err := curve(s.Name+": SLO attainment against offered load", "offered load (× the scenario's rate)", "requests within the TTFT SLO (%)",
		s, false, func(v *eval.VariantResult) []eval.Point { return v.Load },
		func(p eval.Point) float64 { return 100 * p.SLOAttainment.Mean })
	return withTarget(p, err, target)
}

func p99VsLoad(s *eval.ScenarioResult, _ float64) (*plot.Plot, error) {
	return curve(s.Name+": TTFT p99 against offered load", "offered load (× the scenario's rate)", "TTFT p99 (ms, log)",
		s, true, func(v *eval.VariantResult) []eval.Point { return v.Load },
		func(p eval.Point) float64 { return p.TTFTP99.Mean })
}

func sloVsSize(s *eval.ScenarioResult, target float64) (*plot.Plot, error) {
	p, err := curve(s.Name+": SLO attainment against reservation", "replicas", "requests within the TTFT SLO (%)",
		s, false, func(v *eval.VariantResult) []eval.Point { return v.Size },
		func(p eval.Point) float64 { return 100 * p.SLOAttainment.Mean })
	return withTarget(p, err, target)
}

func p99VsSize(s *eval.ScenarioResult, _ float64) (*plot.Plot, error) {
	return curve(s.Name+": TTFT p99 against reservation", "replicas", "TTFT p99 (ms, log)",
		s, true, func(v *eval.VariantResult) []eval.Point { return v.Size },
		func(p eval.Point) float64 { return p.TTFTP99.Mean })
}

// missCauses says what a configuration's SLO misses are owed to, largest
// share first ("hold 61% · refused 30%"), or "none".
func missCauses(m eval.Metrics) string {
	total := 0.0
	for _, n := range m.MissCauses {
		total += n
	}
	if total == 0 {
		return "none"
	}
	causes := slices.Clone(results.MissCauses)
	sort.SliceStable(causes, func(i, j int) bool { return m.MissCauses[causes[i]] > m.MissCauses[causes[j]] })
	var parts []string
	for _, c := range causes {
		if n := m.MissCauses[c]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f%%", c, 100*n/total))
		}
	}
	return strings.Join(parts, " · ")
}

// TimeTable is a Markdown table of where every variant's time to first
// token goes at the planned fleet and 1× load, what its misses are owed
// to, and its admission audit.
func TimeTable(s *eval.ScenarioResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Where the time goes at the planned fleet (%d replicas), 1× load — means over completed requests, ms; "+
		"refused and shed per seed; the SLO misses by cause; refused but servable (against the same arrivals with admission off):\n\n", s.Planned)
	b.WriteString("| policy | hold | network | engine queue | prefill | refused | shed | misses owed to | refused but servable | SLO without admission |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---|---:|---:|\n")
	for _, v := range s.Variants {
		m, ok := nominal(v)
		if !ok {
			continue
		}
		rbs, without := "-", "-"
		if v.RefusedButServable != nil {
			rbs = fmt.Sprintf("%s (%.2f%%)", v.RefusedButServable.Format(1), 100*v.RefusedButServableShare.Mean)
		}
		if v.NoAdmission != nil {
			without = pct1(v.NoAdmission.SLOAttainment)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", v.Variant, m.HoldMean.Format(0), m.NetworkMean.Format(0),
			m.EngineQueueMean.Format(0), m.PrefillMean.Format(0), m.Refused.Format(1), m.Shed.Format(1), missCauses(m), rbs, without)
	}
	return b.String()
}

// nominal is a variant's figures at the planned fleet and 1× load.
func nominal(v *eval.VariantResult) (eval.Metrics, bool) {
	for _, p := range v.Load {
		if p.X == 1 {
			return p.Metrics, true
		}
	}
	return eval.Metrics{}, false
}

// AuditTable is a Markdown table, one row per scenario, of SkyWalker's
// admission audit and where its time goes at the planned fleet and 1×
// load; empty when the run has no audit.
func AuditTable(rep *eval.Report) string {
	var b strings.Builder
	for _, s := range rep.Scenarios {
		for _, v := range s.Variants {
			if v.Variant != "skywalker" || v.RefusedButServable == nil {
				continue
			}
			m, _ := nominal(v)
			if b.Len() == 0 {
				b.WriteString("| scenario | SLO | SLO without admission | refused | shed | refused but servable | hold | network | engine queue | prefill | misses owed to |\n")
				b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s (%.2f%%) | %s | %s | %s | %s | %s |\n", s.Name, pct1(m.SLOAttainment), pct1(v.NoAdmission.SLOAttainment),
				m.Refused.Format(1), m.Shed.Format(1), v.RefusedButServable.Format(1), 100*v.RefusedButServableShare.Mean,
				m.HoldMean.Format(0), m.NetworkMean.Format(0), m.EngineQueueMean.Format(0), m.PrefillMean.Format(0), missCauses(m))
		}
	}
	return b.String()
}
