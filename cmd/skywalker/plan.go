package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"skywalker/internal/plan"
	"skywalker/internal/report"
	"skywalker/internal/sim"
	"skywalker/internal/workload"
)

func newPlanCommand() *cobra.Command {
	var (
		scenario, demandFile, from, format, out string
		trace                                   string
		capacity, target, wanMs, traceScale     float64
		measure, verify                         bool
	)
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Plan reserved replicas for aggregated global demand, and check the plan by simulation",
		Long: `plan compares reserving replicas for each region's own peak (region-isolated)
with reserving for the peak of the summed demand, places the shared
reservation over regions (a linear program: every hour served, only over links
under the WAN threshold, never across residency boundaries, least RTT-weighted
cross-region traffic), and with --verify simulates the day under skywalker and
local to find each policy's smallest reservation that meets the SLO.

Demand comes from --scenario (its diurnal curves), --demand (CSV or YAML),
--from (live proxies' /v1/skywalker/demand), or --trace with --scenario (a
Mooncake or Azure trace's arrival pattern stretched over a day in each of the
scenario's regions, shifted by its time zone, times --trace-scale).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sources := 0
			for _, s := range []string{scenario, demandFile, from} {
				if s != "" {
					sources++
				}
			}
			if sources != 1 {
				return fmt.Errorf("give exactly one of --scenario, --demand, --from")
			}
			var in plan.Input
			var err error
			sc := (*simScenario)(nil)
			switch {
			case scenario != "":
				s, err := loadScenario(scenario)
				if err != nil {
					return err
				}
				sc = s
				if in, err = plan.FromScenario(s); err != nil {
					return err
				}
				if trace != "" {
					if in, err = demandFromTrace(in, s, trace, traceScale); err != nil {
						return err
					}
				}
			case demandFile != "":
				data, err := os.ReadFile(demandFile)
				if err != nil {
					return err
				}
				if strings.HasSuffix(demandFile, ".csv") {
					in, err = plan.ParseDemandCSV(strings.NewReader(string(data)))
				} else {
					in, err = plan.ParseDemandYAML(data)
				}
				if err != nil {
					return err
				}
			default:
				ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
				defer cancel()
				if in, err = plan.FromProxies(ctx, strings.Split(from, ",")); err != nil {
					return err
				}
			}
			if cmd.Flags().Changed("max-wan-rtt-ms") || in.MaxWANRTT == 0 {
				in.MaxWANRTT = time.Duration(wanMs * float64(time.Millisecond))
			}
			switch {
			case measure:
				if sc == nil {
					return fmt.Errorf("--measure-capacity needs --scenario (its engine profile and request mix)")
				}
				if capacity, err = plan.MeasureCapacity(sc, target); err != nil {
					return err
				}
			case capacity <= 0 && sc != nil && sc.PlanCapacity > 0:
				capacity = sc.PlanCapacity
			case capacity <= 0:
				return fmt.Errorf("give --capacity (requests/s one replica serves within the SLO) or --measure-capacity")
			}
			in.Capacity = capacity
			res, err := plan.Solve(in)
			if err != nil {
				return err
			}
			var verification []plan.Verification
			if verify {
				if sc == nil {
					return fmt.Errorf("--verify needs --scenario to simulate")
				}
				verification, err = plan.Verify(sc, in, res, plan.VerifyOptions{Target: target, Progress: func(p string, t plan.Trial) {
					fmt.Fprintf(cmd.ErrOrStderr(), "verify: %-10s %3d replicas %v -> SLO attainment %.2f%%\n", p, t.Replicas, t.Placement, 100*t.SLOAttainment)
				}})
				if err != nil {
					return err
				}
			}
			report := planReport{Result: res, Verification: verification, Target: target}
			report.summarize()
			w := cmd.OutOrStdout()
			switch format {
			case "json":
				err = reportJSON(w, report)
			case "table":
				err = writePlanTable(w, report)
			default:
				return fmt.Errorf("--format must be table or json, not %q", format)
			}
			if err != nil || out == "" {
				return err
			}
			if err := os.MkdirAll(out, 0o755); err != nil {
				return err
			}
			f, err := os.Create(filepath.Join(out, "plan.json"))
			if err != nil {
				return err
			}
			defer f.Close()
			if err := reportJSON(f, report); err != nil {
				return err
			}
			_, err = planPlot(out, in, res)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&scenario, "scenario", "", "built-in scenario or YAML file: demand from its diurnal curves")
	f.StringVar(&demandFile, "demand", "", "demand per region per hour: .csv or .yaml")
	f.StringVar(&from, "from", "", "live proxies (comma-separated URLs): their /v1/skywalker/demand")
	f.StringVar(&trace, "trace", "", "with --scenario: demand from this trace (.jsonl Mooncake, .csv Azure) stretched over a day")
	f.Float64Var(&traceScale, "trace-scale", 1, "multiply the stretched trace's demand")
	f.Float64Var(&capacity, "capacity", 0, "requests/s one replica serves within the SLO")
	f.BoolVar(&measure, "measure-capacity", false, "measure the capacity by simulating the scenario's engine profile")
	f.BoolVar(&verify, "verify", false, "simulate the day: SLO attainment at the plan, and each policy's smallest reservation")
	f.Float64Var(&target, "target", 0.99, "SLO attainment a reservation must meet")
	f.Float64Var(&wanMs, "max-wan-rtt-ms", 120, "links slower than this cannot share capacity")
	f.StringVar(&format, "format", "table", "output: table or json")
	f.StringVar(&out, "out", "", "directory for plan.json and plan.svg")
	return cmd
}

// planReport is the plan command's output.
type planReport struct {
	*plan.Result
	Target       float64             `json:"slo_target,omitempty"`
	Verification []plan.Verification `json:"verification,omitempty"`
	// SLOAttainment at the planned placement, per policy (with --verify).
	SLOAttainment map[string]float64 `json:"slo_attainment,omitempty"`
	// MinReplicas per policy, and how much of the ideal savings
	// (isolated − aggregated) skywalker realizes against local.
	MinReplicas       map[string]int `json:"min_replicas,omitempty"`
	RealizedSavings   float64        `json:"realized_savings,omitempty"`
	ShareOfIdealSaved float64        `json:"share_of_ideal_realized,omitempty"`
}

func (r *planReport) summarize() {
	if len(r.Verification) == 0 {
		return
	}
	r.SLOAttainment, r.MinReplicas = map[string]float64{}, map[string]int{}
	for _, v := range r.Verification {
		r.SLOAttainment[v.Policy] = v.SLOAttainment
		r.MinReplicas[v.Policy] = v.MinReplicas
	}
	sw, okS := r.MinReplicas["skywalker"]
	local, okL := r.MinReplicas["local"]
	if okS && okL && local > 0 {
		r.RealizedSavings = 1 - float64(sw)/float64(local)
		if ideal := r.IsolatedReplicas - r.AggregatedReplicas; ideal > 0 {
			r.ShareOfIdealSaved = float64(local-sw) / float64(ideal)
		}
	}
}

func writePlanTable(w io.Writer, r planReport) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "capacity per replica\t%.2f requests/s\n", r.Capacity)
	fmt.Fprintf(tw, "region-isolated (sum of regional peaks)\t%d replicas\t%v\n", r.IsolatedReplicas, r.IsolatedByRegion)
	fmt.Fprintf(tw, "aggregated (peak of the sum)\t%d replicas\tsaves %.1f%%\n", r.AggregatedReplicas, 100*r.Savings)
	fmt.Fprintf(tw, "planned under links and residency\t%d replicas\tsaves %.1f%%\n", r.PlannedReplicas, 100*r.PlannedSavings)
	var parts []string
	for _, name := range plan.SortedNames(r.Placement) {
		parts = append(parts, fmt.Sprintf("%s %d", name, r.Placement[name]))
	}
	fmt.Fprintf(tw, "placement\t%s\n", strings.Join(parts, ", "))
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Offloads) > 0 {
		fmt.Fprintln(w, "\nhours when a region offloads (UTC hour: from -> to, requests/s):")
		for _, o := range r.Offloads {
			fmt.Fprintf(w, "  %02d:00  %s -> %s  %.2f\n", o.Hour, o.From, o.To, o.Demand)
		}
	}
	if len(r.Verification) > 0 {
		fmt.Fprintf(w, "\nverification (one simulated day, target %.0f%% of requests within the TTFT SLO):\n", 100*r.Target)
		for _, v := range r.Verification {
			fmt.Fprintf(w, "  %-10s at the plan: %.2f%%   smallest reservation meeting the target: %d replicas %v\n",
				v.Policy, 100*v.SLOAttainment, v.MinReplicas, v.MinPlacement)
		}
		fmt.Fprintf(w, "  skywalker needs %.1f%% fewer replicas than local; it realizes %.0f%% of the ideal savings\n",
			100*r.RealizedSavings, 100*r.ShareOfIdealSaved)
	}
	return nil
}

type simScenario = sim.Scenario

func reportJSON(w io.Writer, v any) error { return report.JSON(w, v) }

func planPlot(dir string, in plan.Input, res *plan.Result) (string, error) {
	return report.PlanPlot(dir, in, res)
}

// demandFromTrace replaces the scenario's curves with a trace's pattern,
// keeping its regions, RTTs and threshold.
func demandFromTrace(base plan.Input, s *sim.Scenario, path string, scale float64) (plan.Input, error) {
	recs, err := workload.LoadTrace(path, "")
	if err != nil {
		return plan.Input{}, err
	}
	var regions []plan.RegionTZ
	for _, r := range s.Regions {
		regions = append(regions, plan.RegionTZ{Name: r.Name, Jurisdiction: r.Jurisdiction, UTCOffset: r.UTCOffset})
	}
	in, err := plan.FromTrace(recs, regions, scale)
	if err != nil {
		return plan.Input{}, err
	}
	in.RTT, in.MaxWANRTT = base.RTT, base.MaxWANRTT
	return in, nil
}
