package main

import (
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"skywalker/internal/bench"
	"skywalker/internal/report"
	"skywalker/internal/results"
	"skywalker/internal/workload"
)

func newBenchCommand() *cobra.Command {
	var (
		scenario, endpoints, model, format, trace string
		speedup                                   float64
		limit                                     int
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Replay a workload against live OpenAI-compatible endpoints and measure what clients see",
		Long: `bench replays a scenario's workload (its diurnal generator or trace) in real time
against one or more OpenAI-compatible endpoints — SkyWalker proxies or any
other server — streaming every request to its region's endpoint, and prints
the same table as sim: TTFT, inter-token latency, end-to-end, goodput, cache
hits and, behind SkyWalker, which region served each request.

--endpoints maps regions to base URLs: us-east=http://a:9000,eu-west=http://b:9000
(a single URL without a region receives every request).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sc, err := loadScenario(scenario)
			if err != nil {
				return err
			}
			_, wl, err := sc.Build(trace)
			if err != nil {
				return err
			}
			cfg := bench.Config{Endpoints: map[string]string{}, Model: model, Speedup: speedup, SLO: sc.SLO.Objective(), Label: "live"}
			for _, e := range strings.Split(endpoints, ",") {
				region, url, ok := strings.Cut(e, "=")
				if !ok {
					cfg.Default = strings.TrimSpace(e)
					continue
				}
				cfg.Endpoints[strings.TrimSpace(region)] = strings.TrimSpace(url)
			}
			if cfg.Default == "" && len(cfg.Endpoints) == 0 {
				return fmt.Errorf("--endpoints is required")
			}
			src, err := wl.Source()
			if err != nil {
				return err
			}
			cfg.Source = workload.Limit(src, limit)
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			start := time.Now()
			res, _, err := bench.Run(ctx, cfg)
			if err != nil && ctx.Err() == nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "replayed %d requests in %v\n", res.Requests, time.Since(start).Round(time.Millisecond))
			rep := &results.Report{Scenario: sc.Name, Seed: sc.Seed, Lengths: wl.Lengths, Results: []*results.Result{res}}
			return writeSim(cmd.OutOrStdout(), format, []report.SweepPoint{{RateScale: speedup, Report: rep}})
		},
	}
	f := cmd.Flags()
	f.StringVar(&scenario, "scenario", "quickstart", "scenario whose workload to replay")
	f.StringVar(&trace, "trace", "", "trace file for replay scenarios")
	f.StringVar(&endpoints, "endpoints", "", "region=URL,... or one URL")
	f.StringVar(&model, "model", "", "model name to request (default: the server's)")
	f.Float64Var(&speedup, "speedup", 1, "divide arrival times by this")
	f.IntVar(&limit, "limit", 0, "replay at most this many requests (0: all)")
	f.StringVar(&format, "format", "table", "output: table, json or markdown")
	return cmd
}
