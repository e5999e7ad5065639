package report

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// SaveSVG writes p to path as an SVG of w × h with its legend in a column
// to the right of the axes, never over the data, and the x axis padded
// so that the last tick label fits. Every figure of the reports is saved
// through it.
func SaveSVG(p *plot.Plot, w, h vg.Length, path string) error {
	legend := p.Legend
	p.Legend = plot.NewLegend() // drawn beside the plot, not in it
	c := vgsvg.New(w, h)
	dc := draw.New(c)
	legendW := vg.Length(0)
	if r := legend.Rectangle(dc); r.Max.X > r.Min.X {
		legendW = r.Max.X - r.Min.X + 0.9*vg.Centimeter
	}
	plotArea := draw.Crop(dc, 0, -legendW-0.3*vg.Centimeter, 0, 0)
	p.Draw(plotArea)
	if legendW > 0 {
		legend.Top, legend.Left = true, true
		legend.Draw(draw.Crop(dc, w-legendW, 0, 0, -0.5*vg.Centimeter))
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("save %s: %w", path, err)
	}
	return f.Close()
}

// logTicks marks a logarithmic axis at 1, 2 and 5 times each power of ten
// in range, labelled, so that a range inside one decade still has labels
// (plot.LogTicks labels powers of ten only).
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	if lo <= 0 || hi <= lo {
		return nil
	}
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		base := math.Pow(10, e)
		for _, m := range []float64{1, 2, 5} {
			v := m * base
			if v >= lo && v <= hi {
				ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
			}
		}
	}
	return ticks
}
