package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"skywalker/internal/plan"
	"skywalker/internal/report"
	"skywalker/internal/sim"
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
			var sc *sim.Scenario
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
					if in, err = plan.FromScenarioTrace(in, s, trace, traceScale); err != nil {
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
			rep := plan.NewReport(res, verification, target)
			w := cmd.OutOrStdout()
			switch format {
			case "json":
				err = report.JSON(w, rep)
			case "table":
				err = rep.WriteTable(w)
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
			if err := report.JSON(f, rep); err != nil {
				return err
			}
			_, err = report.PlanPlot(out, in, res)
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
