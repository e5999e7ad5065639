package report

import (
	"bytes"
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"skywalker/internal/results"
)

// SweepPoint is one offered-load level of a sweep.
type SweepPoint struct {
	RateScale float64         `json:"rate_scale"`
	Report    *results.Report `json:"report"`
}

const plotW, plotH = 16 * vg.Centimeter, 10 * vg.Centimeter

// Plots writes the SVG plots for a run into dir and returns their paths:
// cache hit rate per policy, per-region queue and token budget used over time
// for skywalker and local, and TTFT against offered load when a sweep is
// given.
func Plots(dir string, rep *results.Report, sweep []SweepPoint) ([]string, error) {
	var paths []string
	save := func(p *plot.Plot, name string) error {
		path := filepath.Join(dir, name)
		if err := SaveSVG(p, plotW, plotH, path); err != nil {
			return err
		}
		paths = append(paths, path)
		return nil
	}
	if p, err := cacheHitPlot(rep); err != nil {
		return nil, err
	} else if err := save(p, "cache_hit_rate.svg"); err != nil {
		return nil, err
	}
	for _, name := range []string{"skywalker", "local"} {
		r := rep.Find(name)
		if r == nil || r.Series == nil {
			continue
		}
		q, err := seriesPlot(r, "queue")
		if err != nil {
			return nil, err
		}
		if err := save(q, "queue_"+name+".svg"); err != nil {
			return nil, err
		}
		u, err := seriesPlot(r, "token budget")
		if err != nil {
			return nil, err
		}
		if err := save(u, "token_budget_"+name+".svg"); err != nil {
			return nil, err
		}
	}
	if len(sweep) > 1 {
		p, err := sweepPlot(sweep)
		if err != nil {
			return nil, err
		}
		if err := save(p, "ttft_vs_load.svg"); err != nil {
			return nil, err
		}
	}
	return paths, nil
}

// cacheHitPlot is one horizontal bar per policy (names on the y axis,
// where they have room however many there are).
func cacheHitPlot(rep *results.Report) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Prefix-cache hit rate (" + rep.Scenario + ")"
	p.X.Label.Text = "share of prompt tokens served from cache"
	n := len(rep.Results)
	values := make(plotter.Values, n)
	names := make([]string, n)
	for i, r := range rep.Results { // top to bottom in table order
		values[n-1-i] = r.CacheHitRate
		names[n-1-i] = r.Policy
	}
	bars, err := plotter.NewBarChart(values, vg.Points(12))
	if err != nil {
		return nil, fmt.Errorf("cache hit plot: %w", err)
	}
	bars.Horizontal = true
	bars.Color = color.RGBA{R: 60, G: 110, B: 180, A: 255}
	p.Add(bars)
	p.NominalY(names...)
	p.X.Min, p.X.Max = 0, 1
	p.X.Padding = 0.4 * vg.Centimeter
	return p, nil
}

// seriesPlot draws one line per region: its balancer queue, or the share
// of its replicas' step token budget used, per time bucket (not the
// tables' utilization, which is the share of time the replicas were
// busy: a replica stepping small batches is busy yet uses little of its
// budget).
func seriesPlot(r *results.Result, what string) (*plot.Plot, error) {
	s := r.Series
	p := plot.New()
	p.X.Label.Text = "simulated time (minutes)"
	if what == "queue" {
		p.Title.Text = "Balancer queue per region (" + r.Policy + ")"
		p.Y.Label.Text = "held requests"
	} else {
		p.Title.Text = "Step token budget used per region (" + r.Policy + ")"
		p.Y.Label.Text = "share of the replicas' token budget"
		p.Y.Min, p.Y.Max = 0, 1
	}
	names := sortedRegions(r)
	var lines []any
	for i, name := range names {
		var xys plotter.XYs
		switch what {
		case "queue":
			for b, q := range s.Queue[i] {
				xys = append(xys, plotter.XY{X: minutes(s, b), Y: float64(q)})
			}
		default:
			replicas := r.ReplicaCounts[name]
			for b, work := range s.Work[i] {
				xys = append(xys, plotter.XY{X: minutes(s, b), Y: work.Seconds() / (s.Bucket.Seconds() * float64(max(replicas, 1)))})
			}
		}
		if len(xys) == 0 {
			continue
		}
		lines = append(lines, name, xys)
	}
	if err := plotutil.AddLines(p, lines...); err != nil {
		return nil, fmt.Errorf("%s plot: %w", what, err)
	}
	p.X.Padding = 0.4 * vg.Centimeter
	return p, nil
}

func minutes(s *results.Series, bucket int) float64 {
	return (float64(bucket) + 0.5) * s.Bucket.Minutes()
}

// sortedRegions returns region names in the order the series index them.
func sortedRegions(r *results.Result) []string { return r.RegionOrder }

func sweepPlot(sweep []SweepPoint) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "TTFT p50 against offered load"
	p.X.Label.Text = "offered load (× the scenario's rate)"
	p.Y.Label.Text = "TTFT p50 (ms)"
	byPolicy := map[string]plotter.XYs{}
	var order []string
	for _, pt := range sweep {
		for _, r := range pt.Report.Results {
			if _, ok := byPolicy[r.Policy]; !ok {
				order = append(order, r.Policy)
			}
			byPolicy[r.Policy] = append(byPolicy[r.Policy], plotter.XY{X: pt.RateScale, Y: float64(r.TTFTP50Ms)})
		}
	}
	var lines []any
	for _, name := range order {
		lines = append(lines, name, byPolicy[name])
	}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return nil, fmt.Errorf("sweep plot: %w", err)
	}
	p.X.Padding = 0.4 * vg.Centimeter
	return p, nil
}

// WriteSweep writes one run, or each offered load of a sweep in turn, as
// a table, markdown or JSON.
func WriteSweep(w io.Writer, format string, points []SweepPoint) error {
	if len(points) > 1 {
		if format == "json" {
			return JSON(w, map[string]any{"scenario": points[0].Report.Scenario, "seed": points[0].Report.Seed, "sweep": points})
		}
		for _, p := range points {
			fmt.Fprintf(w, "offered load ×%.2f\n", p.RateScale)
			if err := WriteSweep(w, format, []SweepPoint{p}); err != nil {
				return err
			}
			fmt.Fprintln(w)
		}
		return nil
	}
	switch format {
	case "json":
		return JSON(w, points[0].Report)
	case "markdown":
		return Markdown(w, points[0].Report)
	default:
		return Table(w, points[0].Report)
	}
}

// SimDir writes a run (or a sweep) into dir: results.json, the figures
// (Plots; those of the middle load of a sweep), and report.md, which
// embeds them. It returns the paths written.
func SimDir(dir string, points []SweepPoint) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	figures, err := Plots(dir, points[len(points)/2].Report, points)
	if err != nil {
		return nil, err
	}
	var js, md bytes.Buffer
	if err := WriteSweep(&js, "json", points); err != nil {
		return nil, err
	}
	if err := WriteSweep(&md, "markdown", points); err != nil {
		return nil, err
	}
	md.WriteString("\n")
	for _, f := range figures {
		name := filepath.Base(f)
		fmt.Fprintf(&md, "![%s](%s)\n", strings.TrimSuffix(name, ".svg"), name)
	}
	paths := []string{filepath.Join(dir, "results.json"), filepath.Join(dir, "report.md")}
	if err := os.WriteFile(paths[0], js.Bytes(), 0o644); err != nil {
		return nil, fmt.Errorf("write results: %w", err)
	}
	if err := os.WriteFile(paths[1], md.Bytes(), 0o644); err != nil {
		return nil, fmt.Errorf("write report: %w", err)
	}
	return append(paths, figures...), nil
}
