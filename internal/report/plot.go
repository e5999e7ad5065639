package report

import (
	"fmt"
	"image/color"
	"path/filepath"

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
// cache hit rate per policy, per-region queue and utilization over time
// for skywalker and local, and TTFT against offered load when a sweep is
// given.
func Plots(dir string, rep *results.Report, sweep []SweepPoint) ([]string, error) {
	var paths []string
	save := func(p *plot.Plot, name string) error {
		path := filepath.Join(dir, name)
		if err := p.Save(plotW, plotH, path); err != nil {
			return fmt.Errorf("save %s: %w", path, err)
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
		u, err := seriesPlot(r, "utilization")
		if err != nil {
			return nil, err
		}
		if err := save(u, "utilization_"+name+".svg"); err != nil {
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

func cacheHitPlot(rep *results.Report) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Prefix-cache hit rate (" + rep.Scenario + ")"
	p.Y.Label.Text = "prompt tokens served from cache"
	values := make(plotter.Values, len(rep.Results))
	names := make([]string, len(rep.Results))
	for i, r := range rep.Results {
		values[i] = r.CacheHitRate
		names[i] = r.Policy
	}
	bars, err := plotter.NewBarChart(values, vg.Points(20))
	if err != nil {
		return nil, fmt.Errorf("cache hit plot: %w", err)
	}
	bars.Color = color.RGBA{R: 60, G: 110, B: 180, A: 255}
	p.Add(bars)
	p.NominalX(names...)
	p.Y.Min, p.Y.Max = 0, 1
	return p, nil
}

// seriesPlot draws one line per region: its balancer queue, or its
// replicas' utilization, per time bucket.
func seriesPlot(r *results.Result, what string) (*plot.Plot, error) {
	s := r.Series
	p := plot.New()
	p.X.Label.Text = "simulated time (minutes)"
	if what == "queue" {
		p.Title.Text = "Balancer queue per region (" + r.Policy + ")"
		p.Y.Label.Text = "held requests"
	} else {
		p.Title.Text = "Replica utilization per region (" + r.Policy + ")"
		p.Y.Label.Text = "busy fraction"
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
			for b, busy := range s.Busy[i] {
				xys = append(xys, plotter.XY{X: minutes(s, b), Y: busy.Seconds() / (s.Bucket.Seconds() * float64(max(replicas, 1)))})
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
	return p, nil
}
