package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"skywalker/internal/report"
	"skywalker/internal/results"
	"skywalker/internal/sim"
	"skywalker/scenarios"
)

func newSimCommand() *cobra.Command {
	var (
		scenario, policies, format, out, sweep, trace, cacheSources string
		proxies, sharing                                            string
		seed                                                        uint64
		responsesShare                                              float64
		quiet, fifo, noAdmission, noCacheTruth, kvEvents, startOver bool
	)
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Simulate a multi-region workload under every routing policy and compare them",
		Long: `sim replays a scenario (built in: ` + strings.Join(scenarios.Names(), ", ") + `, or a YAML file)
through the decision core and the engine model on a virtual clock, once per
policy on identical arrivals, and reports latency, throughput, goodput, SLO
attainment, cache hit rate and cross-region traffic.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sc, err := loadScenario(scenario)
			if err != nil {
				return err
			}
			opt := sim.Options{Seed: seed, Trace: trace, NoCacheTruth: noCacheTruth, KVEvents: kvEvents}
			if cacheSources != "" {
				opt.CacheSources = strings.Split(cacheSources, ",")
			}
			if opt.Proxies, err = intList("--proxies", proxies); err != nil {
				return err
			}
			opt.Sharing = splitList(sharing)
			if policies != "" {
				opt.Policies = strings.Split(policies, ",")
			}
			if fifo {
				sc.Balancer.FIFO = true
			}
			if cmd.Flags().Changed("responses-share") {
				if responsesShare < 0 || responsesShare > 1 {
					return fmt.Errorf("--responses-share must be in [0, 1], not %v", responsesShare)
				}
				sc.Workload.ResponsesShare = responsesShare
			}
			if startOver {
				sc.Balancer.ResponsesStartOver = true
			}
			if noAdmission {
				off := false
				sc.Balancer.Admission = &off
			}
			scales := []float64{1}
			if len(sc.Sweep) > 0 {
				scales = sc.Sweep
			}
			if sweep != "" {
				if scales, err = parseSweep(sweep); err != nil {
					return err
				}
			}
			switch format {
			case "table", "json", "markdown":
			default:
				return fmt.Errorf("--format must be table, json or markdown, not %q", format)
			}
			names := opt.Policies
			if len(names) == 0 {
				names = sc.PolicyNames()
			}
			progress := newProgress(cmd.ErrOrStderr(), len(names)*len(scales)*max(len(opt.CacheSources), 1)*max(len(opt.Proxies), 1)*max(len(opt.Sharing), 1), quiet, "policies simulated")
			defer progress.finish()
			opt.Progress = func(int, int, *results.Result) { progress.add() }
			var points []report.SweepPoint
			for _, scale := range scales {
				opt.RateScale = scale
				rep, err := sim.Compare(sc, opt)
				if err != nil {
					return err
				}
				points = append(points, report.SweepPoint{RateScale: scale, Report: rep})
			}
			progress.finish()
			w := cmd.OutOrStdout()
			if err := writeSim(w, format, points); err != nil {
				return err
			}
			if out != "" {
				return writeSimDir(out, points)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&scenario, "scenario", "quickstart", "built-in scenario name or YAML file")
	f.StringVar(&policies, "policies", "", "comma-separated policies, policy@region for one router in that region (default: the scenario's, else all)")
	f.Uint64Var(&seed, "seed", 0, "random seed (default: the scenario's)")
	f.StringVar(&format, "format", "table", "output: table, json or markdown")
	f.StringVar(&out, "out", "", "directory for results.json, report.md and SVG plots")
	f.StringVar(&sweep, "sweep", "", "offered-load sweep, rate=LO:HI:STEPS (multiples of the scenario's rate)")
	f.StringVar(&trace, "trace", "", "trace file for replay scenarios (default: the scenario's, built into the binary)")
	f.BoolVar(&quiet, "quiet", false, "no progress bar")
	f.BoolVar(&fifo, "fifo", false, "turn per-tenant fair queuing off: each class in arrival order")
	f.BoolVar(&noAdmission, "no-admission", false, "turn SLO-aware admission off: hold every request until its deadline")
	f.BoolVar(&noCacheTruth, "no-cache-truth", false, "turn cache-truth feedback off: engines' cached-token counts do not correct the routers' prefix index")
	f.BoolVar(&startOver, "responses-start-over", false, "let a Responses chain whose home is gone start over as a new chain, as the proxy's responses_start_over does (its turns resend the conversation)")
	f.Float64Var(&responsesShare, "responses-share", 0, "override the scenario's share of sessions that are Responses API chains (each later turn pinned to where its previous response lives)")
	f.BoolVar(&kvEvents, "kv-events", false, "the engines publish KV events (what their prefix caches store and evict) and the routers' indexes rest on them")
	f.StringVar(&cacheSources, "cache-sources", "", "run every policy once per source of the routers' prefix index, side by side: comma-separated "+strings.Join(sim.CacheSources, ", ")+
		" (belief: where prompts were sent; truth: corrected by the engines' cached tokens, the default; events: the engines' KV events)")
	f.StringVar(&proxies, "proxies", "", "run every policy once per count of proxies in front of each region's engines, side by side: comma-separated counts, e.g. 1,2,4 (clients spread over them; default: the scenario's)")
	f.StringVar(&sharing, "dispatch-sharing", "", "run every policy with the proxies of a region telling each other what they dispatch (on, the default) or not (off), side by side: comma-separated on, off")
	return cmd
}

func loadScenario(name string) (*sim.Scenario, error) {
	sc, err := sim.Builtin(name)
	if errors.Is(err, scenarios.ErrUnknown) {
		data, ferr := os.ReadFile(name)
		if ferr != nil {
			return nil, fmt.Errorf("%v; and as a file: %w", err, ferr)
		}
		return sim.ParseScenario(data)
	}
	return sc, err
}

// parseSweep reads rate=LO:HI:STEPS.
func parseSweep(s string) ([]float64, error) {
	spec, ok := strings.CutPrefix(s, "rate=")
	parts := strings.Split(spec, ":")
	if !ok || len(parts) != 3 {
		return nil, fmt.Errorf("--sweep %q: want rate=LO:HI:STEPS", s)
	}
	lo, err1 := strconv.ParseFloat(parts[0], 64)
	hi, err2 := strconv.ParseFloat(parts[1], 64)
	steps, err3 := strconv.Atoi(parts[2])
	if err1 != nil || err2 != nil || err3 != nil || lo <= 0 || hi < lo || steps < 1 || steps > 50 {
		return nil, fmt.Errorf("--sweep %q: want 0 < LO <= HI and 1 <= STEPS <= 50", s)
	}
	if steps == 1 {
		return []float64{lo}, nil
	}
	out := make([]float64, steps)
	for i := range out {
		out[i] = lo + (hi-lo)*float64(i)/float64(steps-1)
	}
	return out, nil
}

func writeSim(w io.Writer, format string, points []report.SweepPoint) error {
	return report.WriteSweep(w, format, points)
}

func writeSimDir(dir string, points []report.SweepPoint) error {
	_, err := report.SimDir(dir, points)
	return err
}
