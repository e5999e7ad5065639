package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"skywalker/internal/eval"
	"skywalker/internal/plan"
	"skywalker/internal/price"
	"skywalker/internal/profile"
	"skywalker/internal/report"
	"skywalker/internal/results"
	"skywalker/internal/sim"
)

func newPlanCommand() *cobra.Command {
	var (
		scenario, demandFile, from, format, outDir string
		pricesFile, term, noOnDemand, profileName  string
		trace                                      string
		capacity, target, wanMs, traceScale        float64
		measure, verify                            bool
		seeds                                      int
		policyList                                 string
	)
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Plan reserved replicas for aggregated global demand, and check the plan by simulation",
		Long: `plan compares reserving replicas for each region's own peak (region-isolated)
with reserving for the peak of the summed demand, places the shared
reservation over regions (a linear program: every hour served, only over links
under the WAN threshold, never across residency boundaries, least RTT-weighted
cross-region traffic), and with --verify runs the evaluation (skywalker eval)
on the scenario: every policy's smallest reservation, placed as planned, at
which the SLO target is met over the simulated day, over --seeds seeds.

Demand comes from --scenario (its diurnal curves), --demand (CSV or YAML),
--from (live proxies' /v1/skywalker/demand), or --trace with --scenario (a
Mooncake or Azure trace's arrival pattern stretched over a day in each of the
scenario's regions, shifted by its time zone, times --trace-scale).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFlags(above("trace-scale", traceScale, 0), atLeast("capacity", capacity, 0), within("target", target, 0, 1),
				atLeast("max-wan-rtt-ms", wanMs, 0), within("seeds", float64(seeds), 1, 50)); err != nil {
				return err
			}
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
				if len(s.Models) > 0 {
					if trace != "" || verify {
						return fmt.Errorf("--trace and --verify plan a fleet of one model; %s serves several (skywalker eval --scenarios %s evaluates it)", s.Name, s.Name)
					}
					return planFleet(cmd, s, capacity, measure, target, format)
				}
				sc = s
				if verify {
					if err := eval.CheckVariants(s, parseVariants(policyList)); err != nil {
						return fmt.Errorf("--policies: %w", err)
					}
				}
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
			if err := priceInput(&in, sc, pricesFile, term, noOnDemand, profileName); err != nil {
				return err
			}
			var caps map[string]plan.Capacity
			var fallback plan.Capacity
			switch {
			case measure:
				if sc == nil {
					return fmt.Errorf("--measure-capacity needs --scenario (its engine profiles and request mix)")
				}
				if caps, err = plan.MeasureProfiles(sc, target); err != nil {
					return err
				}
				fallback = caps[in.Regions[0].Profile]
			case capacity > 0:
				fallback = plan.Capacity{PerReplica: capacity, Source: "configured: --capacity"}
			case sc != nil && sc.PlanCapacity > 0:
				caps = plan.ScenarioCapacities(sc)
				fallback = caps[in.Regions[0].Profile]
			default:
				return fmt.Errorf("give --capacity (requests/s one replica serves within the SLO) or --measure-capacity")
			}
			in.SetCapacities(caps, fallback)
			res, err := plan.Solve(in)
			if err != nil {
				return err
			}
			out := planOutput{Result: res}
			if out.Cost, err = plan.PlanCost(in); err != nil {
				return err
			}
			if verify {
				if sc == nil || trace != "" {
					return fmt.Errorf("--verify simulates the --scenario's own workload (without --trace)")
				}
				if out.Verification, err = verifyPlan(cmd, sc, in, target, seeds, policyList); err != nil {
					return err
				}
				if out.Replay, err = replayPlan(cmd, sc, out.Cost, policyList); err != nil {
					return err
				}
			}
			w := cmd.OutOrStdout()
			switch format {
			case "json":
				err = report.JSON(w, out)
			case "table":
				err = out.writeTable(w)
			default:
				return fmt.Errorf("--format must be table or json, not %q", format)
			}
			if err != nil || outDir == "" {
				return err
			}
			if err := os.MkdirAll(outDir, 0o755); err != nil {
				return err
			}
			f, err := os.Create(filepath.Join(outDir, "plan.json"))
			if err != nil {
				return err
			}
			defer f.Close()
			if err := report.JSON(f, out); err != nil {
				return err
			}
			if _, err = report.PlanPlot(outDir, in, res); err != nil {
				return err
			}
			_, err = report.CostPlot(outDir, in, out.Cost)
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
	f.BoolVar(&verify, "verify", false, "simulate the day: each policy's smallest reservation that meets --target, and its SLO attainment at the plan")
	f.IntVar(&seeds, "seeds", 5, "with --verify: seeds per number")
	f.StringVar(&policyList, "policies", "", "with --verify: comma-separated policies, policy@region for one router there (default: all)")
	f.Float64Var(&target, "target", 0.99, "SLO attainment a reservation must meet")
	f.Float64Var(&wanMs, "max-wan-rtt-ms", 120, "links slower than this cannot share capacity")
	f.StringVar(&format, "format", "table", "output: table or json")
	f.StringVar(&outDir, "out", "", "directory for plan.json, plan.svg (demand and reservations) and plan-cost.svg (the day's reserved and rented capacity)")
	f.StringVar(&pricesFile, "prices", "", "price book (YAML: term, gpus, regions; see internal/price) over the shipped defaults; replaces the scenario's prices")
	f.StringVar(&term, "term", "", "reserved commitment priced: 1y or 3y (default the price book's, else 1y)")
	f.StringVar(&noOnDemand, "no-on-demand", "", "comma-separated regions that cannot rent GPUs by the hour")
	f.StringVar(&profileName, "profile", "", "hardware profile of regions whose demand says none (--demand, --from); default "+profile.Default)
	return cmd
}

// planFleet plans each model of a scenario of several on its own (its
// demand share, its profile, its plan_capacity or a measured one, or
// --capacity) and prints them with the fleet's totals.
func planFleet(cmd *cobra.Command, s *sim.Scenario, capacity float64, measure bool, target float64, format string) error {
	var models []plan.ModelPlan
	for _, m := range s.Models {
		in, err := plan.FromScenarioModel(s, m.Name)
		if err != nil {
			return err
		}
		switch {
		case measure:
			if in.Capacity, err = plan.MeasureModelCapacity(s, m.Name, target); err != nil {
				return err
			}
		case capacity > 0:
			in.Capacity = capacity
		case m.PlanCapacity > 0:
			in.Capacity = m.PlanCapacity
		default:
			return fmt.Errorf("model %s has no plan_capacity: give --capacity or --measure-capacity", m.Name)
		}
		res, err := plan.Solve(in)
		if err != nil {
			return fmt.Errorf("model %s: %w", m.Name, err)
		}
		models = append(models, plan.ModelPlan{Model: m.Name, Profile: m.Profile, Result: res})
	}
	f := plan.Fleet(models)
	switch format {
	case "json":
		return report.JSON(cmd.OutOrStdout(), f)
	case "table":
		return f.WriteTable(cmd.OutOrStdout())
	}
	return fmt.Errorf("--format must be table or json, not %q", format)
}

// planOutput is what `plan` prints: the plan and, with --verify, its
// evaluation.
type planOutput struct {
	*plan.Result
	Cost         *plan.CostPlan       `json:"cost"`
	Verification *eval.ScenarioResult `json:"verification,omitempty"`
	// Replay is the day replayed on the cost plan's fleet (reserved all
	// day, rented in its hours), per policy.
	Replay *results.Report `json:"replay,omitempty"`
}

func (o planOutput) writeTable(w io.Writer) error {
	if err := o.Result.WriteTable(w); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if err := o.Cost.WriteTable(w); err != nil {
		return err
	}
	if o.Replay != nil {
		fmt.Fprintf(w, "\nthe day replayed on the planned fleet (reserved all day, rented replicas only in their hours; seed %d):\n", o.Replay.Seed)
		for _, r := range o.Replay.Results {
			p99 := fmt.Sprintf("%.0f ms", float64(r.TTFTP99Ms))
			if math.IsInf(float64(r.TTFTP99Ms), 0) {
				p99 = "over 1% never served" // refused, shed or dropped: no finite p99
			}
			fmt.Fprintf(w, "  %-22s SLO %5.1f%%  TTFT p99 %s  refused %d  shed %d\n", r.Policy, 100*r.SLOAttainment, p99, r.Refused, r.Shed)
		}
	}
	if o.Verification == nil {
		return nil
	}
	fmt.Fprintf(w, "\nverification (%s):\n\n%s", o.Verification.Name, report.HeadlineTable(o.Verification))
	for _, t := range o.Verification.Targets {
		mark := "met"
		if !t.Met {
			mark = "MISSED"
		}
		fmt.Fprintf(w, "  %s — %s: %s\n", t.Goal, mark, t.Detail)
	}
	return nil
}

// verifyPlan evaluates the scenario with the plan's capacity and WAN
// threshold: every policy's smallest reservation meeting target, and its
// figures at the planned fleet under the nominal load.
func verifyPlan(cmd *cobra.Command, sc *sim.Scenario, in plan.Input, target float64, seeds int, policyList string) (*eval.ScenarioResult, error) {
	if seeds < 1 || seeds > 50 {
		return nil, fmt.Errorf("--seeds must be in 1..50, not %d", seeds)
	}
	spec := *sc
	spec.PlanCapacity, spec.Control.MaxWANRTT = in.Capacity, in.MaxWANRTT
	opt := eval.Options{Entries: []eval.Entry{{Scenario: sc.Name, Role: eval.RoleOf(sc.Name), Spec: &spec}},
		Seeds: seeds, Target: target, Loads: []float64{1}, Sizes: []float64{1}, Variants: parseVariants(policyList)}
	progress := newProgress(cmd.ErrOrStderr(), 1, false, "verifying: simulations")
	defer progress.finish()
	opt.Progress = progress.set
	rep, err := eval.Run(cmd.Context(), opt)
	if err != nil {
		return nil, err
	}
	return rep.Scenarios[0], nil
}

// priceInput prices every region of in: the scenario's price book (or
// --prices), --term, --no-on-demand; regions of unknown hardware run
// --profile.
func priceInput(in *plan.Input, sc *sim.Scenario, pricesFile, term, noOnDemand, profileName string) error {
	var book price.Book
	if sc != nil && sc.Prices != nil {
		book = *sc.Prices
	}
	if pricesFile != "" {
		data, err := os.ReadFile(pricesFile)
		if err != nil {
			return err
		}
		b, err := price.Parse(data)
		if err != nil {
			return fmt.Errorf("%s: %w", pricesFile, err)
		}
		book = *b
	}
	switch price.Term(term) {
	case "":
	case price.OneYear, price.ThreeYear:
		book.Term = price.Term(term)
	default:
		return fmt.Errorf("--term must be 1y or 3y, not %q", term)
	}
	if noOnDemand != "" {
		regions := map[string]price.Rates{}
		for name, r := range book.Regions {
			regions[name] = r
		}
		for name := range strings.SplitSeq(noOnDemand, ",") {
			if !slices.ContainsFunc(in.Regions, func(r plan.Region) bool { return r.Name == name }) {
				return fmt.Errorf("--no-on-demand: no region %q", name)
			}
			r := regions[name]
			r.NoOnDemand = true
			regions[name] = r
		}
		book.Regions = regions
	}
	return in.Price(&book, profileName)
}

// replayPlan replays the scenario's day on the cost plan's fleet, every
// policy (or policyList's) on it.
func replayPlan(cmd *cobra.Command, sc *sim.Scenario, cp *plan.CostPlan, policyList string) (*results.Report, error) {
	spec, err := plan.Replay(sc, cp)
	if err != nil {
		return nil, err
	}
	var policies []string
	if policyList != "" {
		policies = strings.Split(policyList, ",")
	}
	fmt.Fprintln(cmd.ErrOrStderr(), "replaying the day on the planned fleet ...")
	return sim.Compare(spec, sim.Options{Policies: policies})
}
