package main

import (
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"skywalker/internal/engine"
	"skywalker/internal/engine/server"
	"skywalker/internal/kvevents"
	"skywalker/internal/profile"
	"skywalker/internal/tracing"
)

func newEngineCommand(logs *logFlags) *cobra.Command {
	var (
		listen      string
		model       string
		profileName string
		kvConfig    string
		kvShape     string
		ecfg        engine.Config
		scfg        server.Config
	)
	cmd := &cobra.Command{
		Use:   "engine",
		Short: "Run a simulated vLLM-compatible inference server (no GPU needed)",
		Long: `engine serves the engine model over the OpenAI API with vLLM's metrics:
continuous batching, chunked prefill, a paged KV cache with prefix reuse, and
step times from a hardware profile (` + strings.Join(profile.Names(), ", ") + `).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFlags(above("time-scale", scfg.TimeScale, 0), atLeast("kv-blocks", float64(ecfg.KVBlocks), 0),
				atLeast("block-size", float64(ecfg.BlockSize), 0), atLeast("max-num-seqs", float64(ecfg.MaxNumSeqs), 0),
				atLeast("max-num-batched-tokens", float64(ecfg.MaxNumBatchedTokens), 0), atLeast("default-max-tokens", float64(scfg.DefaultMaxTokens), 1),
				within("fault-error-rate", scfg.Faults.ErrorRate, 0, 1), within("fault-hang-rate", scfg.Faults.HangRate, 0, 1),
				within("fault-stall-rate", scfg.Faults.StallRate, 0, 1), atLeast("fault-stall-after", float64(scfg.Faults.StallAfter), 0),
				atLeast("fault-exit-after", float64(scfg.Faults.ExitAfter), 0), atLeast("max-loras", float64(ecfg.MaxLoRAs), 0),
				atLeast("lora-load-time", ecfg.LoRALoad.Seconds(), 0)); err != nil {
				return err
			}
			p, err := profile.Lookup(profileName)
			if err != nil {
				return err
			}
			ecfg.Profile = p
			if kvConfig != "" {
				if scfg.KVEvents, err = server.ParseKVEventsConfig(kvConfig); err != nil {
					return err
				}
			}
			switch kvShape {
			case "map":
				scfg.KVEventsShape = kvevents.MapShape
			case "array":
				scfg.KVEventsShape = kvevents.ArrayShape
			default:
				return fmt.Errorf("--kv-events-shape must be map or array, not %q", kvShape)
			}
			if v := os.Getenv("VLLM_ENABLE_RESPONSES_API_STORE"); v != "" {
				on, err := strconv.ParseBool(v)
				if err != nil {
					return fmt.Errorf("VLLM_ENABLE_RESPONSES_API_STORE=%q: want 1 or 0", v)
				}
				scfg.ResponsesStore = scfg.ResponsesStore || on
			}
			for i, m := range scfg.LoRAModules {
				scfg.LoRAModules[i], _, _ = strings.Cut(m, "=") // name=path: the name is what is served
			}
			scfg.Engine = ecfg
			scfg.Model = model
			if scfg.Logger, err = logs.logger(cmd.ErrOrStderr()); err != nil {
				return err
			}
			if scfg.Tracer, err = tracing.New(cmd.Context(), "skywalker-engine", model, os.Getenv); err != nil {
				return err
			}
			defer shutdownTracer(scfg.Tracer, scfg.Logger)
			srv, err := server.New(scfg)
			if err != nil {
				return err
			}
			l, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("listen on %s: %w", listen, err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			scfg.Logger.Info("engine serving", "addr", l.Addr().String(), "model", model, "profile", p.Name,
				"kv_blocks", srv.EngineConfig().KVBlocks, "time_scale", scfg.TimeScale)
			return srv.Serve(ctx, l)
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "127.0.0.1:8000", "HTTP listen address")
	f.StringVar(&model, "model", "meta-llama/Llama-3.1-8B-Instruct", "served model name")
	f.StringVar(&profileName, "profile", profile.Default, "hardware/model timing profile")
	f.IntVar(&ecfg.KVBlocks, "kv-blocks", 0, "KV-cache blocks (default: the profile's)")
	f.IntVar(&ecfg.BlockSize, "block-size", 0, "tokens per KV block (default: the profile's, 16)")
	f.IntVar(&ecfg.MaxNumSeqs, "max-num-seqs", 0, "most sequences running at once (default: the profile's)")
	f.IntVar(&ecfg.MaxNumBatchedTokens, "max-num-batched-tokens", 0, "token budget per step (default: the profile's)")
	f.StringSliceVar(&scfg.LoRAModules, "lora-modules", nil, "LoRA adapters served over the model, name or name=path, comma-separated or repeated (as vLLM's --lora-modules; the path is not read)")
	f.IntVar(&ecfg.MaxLoRAs, "max-loras", 0, "LoRA adapters held at once (vLLM's --max-loras; default 1 with --lora-modules)")
	f.DurationVar(&ecfg.LoRALoad, "lora-load-time", 100*time.Millisecond, "time to load an adapter into a slot (model time)")
	f.BoolVar(&scfg.ResponsesStore, "responses-store", false, "keep responses in memory for previous_response_id, GET and cancel (as vLLM with VLLM_ENABLE_RESPONSES_API_STORE=1, which also turns it on)")
	f.StringVar(&kvConfig, "kv-events-config", "", `publish KV-cache events as vLLM does, its JSON: '{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557","replay_endpoint":"tcp://*:5558","topic":"kv"}'`)
	f.StringVar(&kvShape, "kv-events-shape", "map", "KV-event batches as maps tagged by type (vLLM since mid-2026) or as arrays (earlier vLLM, SGLang): map or array")
	f.IntVar(&scfg.Faults.KVDropEvery, "fault-kv-drop-every", 0, "lose every Nth KV-event batch on the way, still replayable (testing; 0 = never)")
	f.IntVar(&scfg.Faults.KVForgetEvery, "fault-kv-forget-every", 0, "lose every Nth KV-event batch for good (testing; 0 = never)")
	f.IntVar(&scfg.Faults.KVRestartAfter, "fault-kv-restart-after", 0, "start the KV-event sequence over after N batches, as a restarted engine (testing; 0 = never)")
	f.StringVar(&scfg.MetricsStyle, "metrics-style", "vllm", "metric names: vllm, sglang, or none (no /metrics, as llama.cpp servers)")
	f.Float64Var(&scfg.TimeScale, "time-scale", 1, "run the model this many times faster than real time")
	f.Uint64Var(&scfg.Seed, "seed", 1, "seed for output text and fault injection")
	f.IntVar(&scfg.DefaultMaxTokens, "default-max-tokens", 256, "tokens generated when a request sets no limit")
	f.Float64Var(&scfg.Faults.ErrorRate, "fault-error-rate", 0, "fraction of requests answered 500 (testing)")
	f.Float64Var(&scfg.Faults.HangRate, "fault-hang-rate", 0, "fraction of requests never answered (testing)")
	f.Float64Var(&scfg.Faults.StallRate, "fault-stall-rate", 0, "fraction of streams that stall (testing)")
	f.IntVar(&scfg.Faults.StallAfter, "fault-stall-after", 5, "tokens sent before a stalled stream goes silent")
	f.IntVar(&scfg.Faults.ExitAfter, "fault-exit-after", 0, "exit after accepting this many requests (testing; 0 = never)")
	return cmd
}
