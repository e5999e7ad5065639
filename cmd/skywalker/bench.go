package main

import (
	"fmt"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
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
		api                                       string
		speedup, maxFailed                        float64
		limit                                     int
		quiet                                     bool
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Replay a workload against live OpenAI-compatible endpoints and measure what clients see",
		Long: `bench replays a scenario's workload (its diurnal generator or trace) in real time
against one or more OpenAI-compatible endpoints — SkyWalker proxies or any
other server — streaming every request to its region's endpoint, and prints
the same table as sim: TTFT, inter-token latency, end-to-end, goodput, cache
hits and, behind SkyWalker, which region served each request. --api sends the
requests as Anthropic Messages or as embeddings instead of chat.

--endpoints maps regions to base URLs: us-east=http://a:9000,eu-west=http://b:9000
(a single URL without a region receives every request; with only region=URL
pairs, the requests of regions not named are left out, with a warning).

bench exits with status 1, after the table and the first errors, when more
than --max-failed of the requests failed (a refused connection, a non-200
answer, a stream that broke).`,
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
			cfg := bench.Config{Endpoints: map[string]string{}, Model: model, API: api, Speedup: speedup, SLO: sc.SLO.Objective(), Label: "live"}
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
			if err := checkFlags(within("max-failed", maxFailed, 0, 1), above("speedup", speedup, 0), atLeast("limit", float64(limit), 0)); err != nil {
				return err
			}
			src, err := wl.Source()
			if err != nil {
				return err
			}
			arrivals, unrouted := bench.Route(workload.Limit(src, limit), cfg.Endpoints, cfg.Default)
			for _, region := range slices.Sorted(maps.Keys(unrouted)) {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: region %s has no endpoint; its %d requests are not sent (add %s=URL to --endpoints, or give one URL for every region)\n",
					region, unrouted[region], region)
			}
			if len(arrivals) == 0 {
				return fmt.Errorf("no request to send: no region of scenario %s has an endpoint", sc.Name)
			}
			cfg.Source = workload.NewSliceSource(arrivals)
			progress := newProgress(cmd.ErrOrStderr(), len(arrivals), quiet, "requests")
			defer progress.finish()
			var (
				mu        sync.Mutex
				ttft      []float64
				described time.Time
			)
			cfg.OnSample = func(s bench.Sample) {
				mu.Lock()
				if s.OK() {
					ttft = append(ttft, float64(s.TTFT.Milliseconds()))
				}
				// A live median, recomputed at most once a second (sorting
				// every sample would grow quadratically with the run).
				if now := time.Now(); len(ttft) > 0 && now.Sub(described) >= time.Second {
					described = now
					sorted := slices.Clone(ttft)
					slices.Sort(sorted)
					progress.describe(fmt.Sprintf("requests, TTFT p50 %.0f ms", results.Percentile(sorted, 0.5)))
				}
				mu.Unlock()
				progress.add()
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			start := time.Now()
			res, samples, err := bench.Run(ctx, cfg)
			if err != nil && ctx.Err() == nil {
				return err
			}
			progress.finish()
			fmt.Fprintf(cmd.ErrOrStderr(), "replayed %d requests in %v\n", res.Requests, time.Since(start).Round(time.Millisecond))
			rep := &results.Report{Scenario: sc.Name, Seed: sc.Seed, Lengths: wl.Lengths, Results: []*results.Result{res}}
			if err := writeSim(cmd.OutOrStdout(), format, []report.SweepPoint{{RateScale: speedup, Report: rep}}); err != nil {
				return err
			}
			return bench.Check(samples, maxFailed)
		},
	}
	f := cmd.Flags()
	f.StringVar(&scenario, "scenario", "quickstart", "scenario whose workload to replay")
	f.StringVar(&trace, "trace", "", "trace file for replay scenarios")
	f.StringVar(&endpoints, "endpoints", "", "region=URL,... or one URL")
	f.StringVar(&model, "model", "", "model name to request (default: the server's)")
	f.StringVar(&api, "api", bench.APIChat, "send the requests as "+strings.Join(bench.APIs, ", ")+" (OpenAI chat, Anthropic Messages, or OpenAI embeddings)")
	f.Float64Var(&speedup, "speedup", 1, "divide arrival times by this")
	f.IntVar(&limit, "limit", 0, "replay at most this many requests (0: all)")
	f.StringVar(&format, "format", "table", "output: table, json or markdown")
	f.Float64Var(&maxFailed, "max-failed", 0.01, "share of requests that may fail before bench exits with status 1")
	f.BoolVar(&quiet, "quiet", false, "no progress bar")
	cmd.AddCommand(newGatewayBenchCommand())
	return cmd
}
