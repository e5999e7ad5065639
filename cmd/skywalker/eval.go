package main

import (
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"skywalker/internal/eval"
	"skywalker/internal/report"
	"skywalker/internal/sim"
)

func newEvalCommand() *cobra.Command {
	var (
		out, scenarioList, variantList, loads, sizes string
		proxies, sharing, cacheSources               string
		render                                       string
		seeds                                        int
		quiet                                        bool
	)
	cmd := &cobra.Command{
		Use:   "eval",
		Short: "Evaluate every policy as deployed: replicas to meet the SLO, and curves over load and size",
		Long: `eval runs the whole evaluation: on the tuning scenario and on scenarios never
used for tuning, for every policy (a router in every region, and the global
baselines and GORGO also as one router in one region), it finds by search the
smallest reservation at which 99% of requests meet the TTFT SLO over the
simulated day, and draws SLO attainment and TTFT p99 against offered load and
against reservation size; every number is the mean of several seeds with a
95% interval. It writes report.md, results.json.gz and SVG figures to --out.
--render FILE writes them again from an earlier run's results.json.gz.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if render != "" {
				f, err := os.Open(render)
				if err != nil {
					return err
				}
				defer f.Close()
				rep, err := eval.ReadReport(f)
				if err != nil {
					return fmt.Errorf("%s: %w", render, err)
				}
				paths, err := report.EvalDir(out, rep)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "wrote %s\n", strings.Join(paths, ", "))
				return nil
			}
			opt := eval.Options{Seeds: seeds}
			proxyCounts, err := intList("--proxies", proxies)
			if err != nil {
				return err
			}
			fleet := func(sc *sim.Scenario) ([]*sim.Scenario, error) {
				return sim.ScenarioVariants(sc, splitList(cacheSources), proxyCounts, splitList(sharing))
			}
			if scenarioList == "" && (proxies != "" || sharing != "" || cacheSources != "") {
				return fmt.Errorf("--proxies, --dispatch-sharing and --cache-sources vary the scenarios named by --scenarios")
			}
			if scenarioList != "" {
				for _, name := range strings.Split(scenarioList, ",") {
					sc, err := loadScenario(strings.TrimSpace(name))
					if err != nil {
						return fmt.Errorf("--scenarios: %w", err)
					}
					vs, err := fleet(sc)
					if err != nil {
						return err
					}
					for _, v := range vs {
						opt.Entries = append(opt.Entries, eval.Entries(v, eval.RoleOf(sc.Name))...)
					}
				}
			}
			opt.Variants = parseVariants(variantList)
			if opt.Loads, err = floatList("--loads", loads); err != nil {
				return err
			}
			if opt.Sizes, err = floatList("--sizes", sizes); err != nil {
				return err
			}
			if seeds < 1 || seeds > 50 {
				return fmt.Errorf("--seeds must be in 1..50, not %d", seeds)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			progress := newProgress(cmd.ErrOrStderr(), 1, quiet, "simulations")
			defer progress.finish()
			opt.Progress = progress.set
			rep, err := eval.Run(ctx, opt)
			if err != nil {
				return err
			}
			progress.finish()
			paths, err := report.EvalDir(out, rep)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d simulations in %s; wrote %s\n", rep.Runs, rep.Elapsed.Round(1e9), strings.Join(paths, ", "))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&out, "out", "eval", "directory for report.md, results.json.gz and the figures")
	f.StringVar(&scenarioList, "scenarios", "", "comma-separated scenarios, built-in or YAML files (default: the evaluation's: "+entryNames()+")")
	f.StringVar(&variantList, "policies", "", "comma-separated policies, policy@region for one router in that region (default: all)")
	f.IntVar(&seeds, "seeds", 5, "seeds per number")
	f.StringVar(&proxies, "proxies", "", "evaluate each of --scenarios once per count of proxies in front of every region's engines: comma-separated counts, e.g. 1,2,4")
	f.StringVar(&sharing, "dispatch-sharing", "", "evaluate each of --scenarios with the proxies of a region telling each other what they dispatch (on) and not (off): comma-separated on, off")
	f.StringVar(&cacheSources, "cache-sources", "", "evaluate each of --scenarios once per source of the routers' prefix index: comma-separated "+strings.Join(sim.CacheSources, ", "))
	f.StringVar(&loads, "loads", "", "offered loads of the load curve, comma-separated multiples (default 0.25,0.5,0.75,1,1.1,1.25,1.5)")
	f.StringVar(&sizes, "sizes", "", "reservations of the size curve, comma-separated multiples of the planned fleet (default 0.75,1,1.25,1.5)")
	f.BoolVar(&quiet, "quiet", false, "no progress bar")
	f.StringVar(&render, "render", "", "render --out again from this results.json.gz instead of running")
	return cmd
}

func entryNames() string {
	var names []string
	for _, e := range eval.Set {
		if !slices.Contains(names, e.Scenario) {
			names = append(names, e.Scenario)
		}
	}
	return strings.Join(names, ", ")
}

// floatList reads a comma-separated list of positive numbers ("" is nil).
func floatList(flag, s string) ([]float64, error) {
	if s == "" {
		return nil, nil
	}
	var out []float64
	for _, part := range strings.Split(s, ",") {
		x, err := strconv.ParseFloat(strings.TrimSpace(part), 64)
		if err != nil || x <= 0 || x > 100 {
			return nil, fmt.Errorf("%s: %q is not a positive multiple", flag, part)
		}
		out = append(out, x)
	}
	return out, nil
}

// intList reads flag's comma-separated counts ("" is nil).
func intList(flag, s string) ([]int, error) {
	var out []int
	for _, part := range splitList(s) {
		n, err := strconv.Atoi(part)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a count", flag, part)
		}
		out = append(out, n)
	}
	return out, nil
}

// splitList reads a comma-separated list, its items trimmed ("" is nil).
func splitList(s string) []string {
	var out []string
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// parseVariants reads a comma-separated list of policies, policy@region
// for one router in that region ("" is nil: every default variant).
func parseVariants(list string) []eval.Variant {
	if list == "" {
		return nil
	}
	var out []eval.Variant
	for _, v := range strings.Split(list, ",") {
		out = append(out, eval.ParseVariant(strings.TrimSpace(v)))
	}
	return out
}
