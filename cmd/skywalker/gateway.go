package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"skywalker/internal/overhead"
)

// pinnedEnv marks a gateway benchmark already running on its client core.
const pinnedEnv = "SKYWALKER_BENCH_PINNED"

func newGatewayBenchCommand() *cobra.Command {
	cfg := overhead.Config{ProxyCore: 1, ClientCore: 0}
	cmd := &cobra.Command{
		Use:   "gateway",
		Short: "Measure what SkyWalker adds in front of an instant engine, beside nginx and HAProxy, in one table",
		Long: `bench gateway starts an upstream that answers at once, then skywalker serve,
nginx and HAProxy in front of it (those installed; scripts/gateway-bench.sh
installs them), each pinned to one core (--proxy-core) with the client, wrk
and the upstream on another (--client-core), and prints one Markdown table:
added latency p50/p99 at a fixed request rate for 1 KB and 400 KB chat
bodies on 1 and 16 connections, added time to a stream's first byte,
maximum requests/s on one core and the gateway's CPU per request (wrk,
1 KB on 16 connections and 400 KB on one), resident memory, and each
gateway against nginx. Every process it starts is stopped when it ends.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFlags(above("duration", cfg.Duration.Seconds(), 0), above("rate", cfg.Rate, 0), atLeast("sustain", cfg.Sustain.Seconds(), 0),
				atLeast("proxy-core", float64(cfg.ProxyCore), -1), atLeast("client-core", float64(cfg.ClientCore), -1)); err != nil {
				return err
			}
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			invoked := len(os.Args) > 2 && os.Args[1] == "bench" && os.Args[2] == "gateway" // not a test calling the command
			if os.Getenv(pinnedEnv) == "" && cfg.ClientCore >= 0 && invoked {
				if taskset, err := exec.LookPath("taskset"); err == nil {
					// Run again on the client core, the whole process.
					args := append([]string{"taskset", "-c", strconv.Itoa(cfg.ClientCore), exe}, os.Args[1:]...)
					return syscall.Exec(taskset, args, append(os.Environ(), pinnedEnv+"=1"))
				}
			}
			dir, err := os.MkdirTemp("", "skywalker-gateway-bench-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			cfg.Exe, cfg.Dir, cfg.Log = exe, dir, cmd.ErrOrStderr()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			start := time.Now()
			rows, notes, err := overhead.Run(ctx, cfg)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "Gateways in front of an upstream that answers at once; %s; %v per measurement, %.0f requests/s on one connection (×8 on 16). Latencies are added over the upstream alone.\n\n",
				overhead.Pinning(cfg), cfg.Duration, cfg.Rate)
			overhead.Table(out, rows)
			for _, n := range notes {
				fmt.Fprintln(out, "\nnote:", n)
			}
			if cfg.Profile != "" {
				fmt.Fprintf(out, "\nSkyWalker's profiles under the maximum-throughput run: go tool pprof -top %s/cpu.pprof; go tool pprof -sample_index=alloc_space -top %s/allocs.pprof\n", cfg.Profile, cfg.Profile)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "measured in %v\n", time.Since(start).Round(time.Second))
			return nil
		},
	}
	f := cmd.Flags()
	f.DurationVar(&cfg.Duration, "duration", 5*time.Second, "length of each measurement")
	f.Float64Var(&cfg.Rate, "rate", 200, "requests/s of the fixed-rate runs on one connection (×8 on 16)")
	f.IntVar(&cfg.ProxyCore, "proxy-core", 1, "the core every gateway is pinned to (-1: none)")
	f.IntVar(&cfg.ClientCore, "client-core", 0, "the core the client, wrk and the upstream run on (-1: none)")
	f.DurationVar(&cfg.Sustain, "sustain", 0, "also run SkyWalker at 3,000 requests/s on 16 connections this long and report its memory")
	f.StringVar(&cfg.Profile, "profile", "", "write SkyWalker's CPU and allocation profiles under the maximum-throughput run to this directory (go tool pprof -top DIR/cpu.pprof)")
	return cmd
}
