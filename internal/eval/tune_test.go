package eval

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"skywalker/internal/policy"
)

// TestTune sweeps SkyWalker's constants on the tuning set (SKYWALKER_TUNE=1).
func TestTune(t *testing.T) {
	if os.Getenv("SKYWALKER_TUNE") == "" {
		t.Skip("tuning sweep")
	}
	vals := func(name string, def string) []float64 {
		v := os.Getenv(name)
		if v == "" {
			v = def
		}
		var out []float64
		for _, p := range strings.Split(v, ",") {
			x, _ := strconv.ParseFloat(p, 64)
			out = append(out, x)
		}
		return out
	}
	variants := []Variant{{Policy: "skywalker"}}
	if os.Getenv("REF") != "" {
		variants = append(variants, Variant{Policy: "cache-aware"}, Variant{Policy: "local"})
	}
	for _, omega := range vals("OMEGA", "800") {
		for _, rw := range vals("RW", "200") {
			for _, ef := range vals("EF", "0.25") {
				start := time.Now()
				rep, err := Run(context.Background(), Options{Entries: []Entry{{Scenario: "diurnal-3region", Role: Tuning}}, Variants: variants,
					Seeds: int(vals("SEEDS", "2")[0]), Loads: vals("LOADS", "1,1.25"), Sizes: []float64{1},
					PolicyConfig: func(c *policy.Config) {
						c.Skywalker.CongestionWeight = time.Duration(omega) * time.Millisecond
						c.Skywalker.ReplicaWeight = time.Duration(rw) * time.Millisecond
						c.Skywalker.ErrorFraction = ef
					}})
				if err != nil {
					t.Fatal(err)
				}
				for _, v := range rep.Scenarios[0].Variants {
					line := fmt.Sprintf("ω=%v rw=%v ef=%v %-12s min %s", omega, rw, ef, v.Variant, v.MinReplicas.Format(1))
					for _, p := range v.Load {
						line += fmt.Sprintf(" | %g×: SLO %.3f p99 %s hit %.2f cross %.2f", p.X, p.SLOAttainment.Mean, p.TTFTP99.Format(0), p.CacheHit.Mean, p.CrossRegion.Mean)
					}
					t.Log(line)
				}
				t.Logf("  (%v)", time.Since(start).Round(time.Second))
			}
		}
	}
}
