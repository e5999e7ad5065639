package report

import (
	"fmt"
	"image/color"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"skywalker/internal/plan"
)

// PlanPlot writes an SVG of every region's demand over the day, their sum,
// and the capacity of the isolated and the aggregated reservations.
func PlanPlot(dir string, in plan.Input, res *plan.Result) (string, error) {
	p := plot.New()
	p.Title.Text = "Demand over the day and reserved capacity"
	p.X.Label.Text = "hour (UTC)"
	p.Y.Label.Text = "requests/s"
	var lines []any
	var total plotter.XYs
	for h := range plan.Hours {
		total = append(total, plotter.XY{X: float64(h)})
	}
	for _, r := range in.Regions {
		var xys plotter.XYs
		for h, d := range r.Demand {
			xys = append(xys, plotter.XY{X: float64(h), Y: d})
			total[h].Y += d
		}
		lines = append(lines, r.Name, xys)
	}
	lines = append(lines, "sum of regions", total)
	if err := plotutil.AddLines(p, lines...); err != nil {
		return "", fmt.Errorf("plan plot: %w", err)
	}
	for _, level := range []struct {
		name     string
		replicas int
		c        color.RGBA
	}{{"isolated reservation", res.IsolatedReplicas, color.RGBA{R: 200, A: 255}}, {"aggregated reservation", res.AggregatedReplicas, color.RGBA{G: 150, A: 255}}} {
		y := float64(level.replicas) * res.Capacity
		l, err := plotter.NewLine(plotter.XYs{{X: 0, Y: y}, {X: plan.Hours, Y: y}})
		if err != nil {
			return "", err
		}
		l.Color = level.c
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s (%d replicas)", level.name, level.replicas), l)
	}
	return saveDay(p, dir, "plan.svg")
}

// saveDay saves a plot of one day, hour 0 to 24, from zero — a curve that
// starts at its minimum exaggerates the swing — as dir/name.
func saveDay(p *plot.Plot, dir, name string) (string, error) {
	p.Y.Min, p.X.Min, p.X.Max = 0, 0, plan.Hours
	p.X.Tick.Marker = plot.ConstantTicks(hourTicks())
	path := filepath.Join(dir, name)
	if err := SaveSVG(p, plotW, plotH, path); err != nil {
		return "", err
	}
	return path, nil
}

// hourTicks marks every fourth hour of a day, 0 to 24.
func hourTicks() []plot.Tick {
	var out []plot.Tick
	for h := 0; h <= plan.Hours; h += 4 {
		out = append(out, plot.Tick{Value: float64(h), Label: fmt.Sprint(h)})
	}
	return out
}

// CostPlot writes an SVG of a cost plan's day: the summed demand, the
// capacity reserved all day, and reserved plus rented capacity (on demand
// and spot) hour by hour, in requests/s.
func CostPlot(dir string, in plan.Input, cp *plan.CostPlan) (string, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("The planned fleet over the day: $%.0f a month", cp.Monthly)
	p.X.Label.Text = "hour (UTC)"
	p.Y.Label.Text = "requests/s"
	var demand, reserved, rented plotter.XYs
	for h := range plan.Hours {
		d, res, rent := 0.0, 0.0, 0.0
		for _, r := range in.Regions {
			d += r.Demand[h]
		}
		for _, r := range cp.Regions {
			res += float64(r.Reserved) * r.Capacity
			rent += float64(r.OnDemand[h]+r.Spot[h]) * r.Capacity
		}
		// Steps: an hour's capacity holds over the whole hour.
		for _, x := range []float64{float64(h), float64(h + 1)} {
			demand = append(demand, plotter.XY{X: x, Y: d})
			reserved = append(reserved, plotter.XY{X: x, Y: res})
			rented = append(rented, plotter.XY{X: x, Y: res + rent})
		}
	}
	if err := plotutil.AddLines(p, "demand (all regions)", demand, "reserved (all day)", reserved, "reserved + on demand", rented); err != nil {
		return "", fmt.Errorf("cost plot: %w", err)
	}
	return saveDay(p, dir, "plan-cost.svg")
}
