package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"skywalker/internal/region"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"skywalker/internal/node"
	"skywalker/internal/proxy"
)

func newServeCommand(logs *logFlags) *cobra.Command {
	var configFile string
	flagCfg := proxy.DefaultConfig()
	var peers, workers, keys, emulateWAN string
	var wanMs float64
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the regional proxy in front of this region's vLLM/SGLang replicas",
		Long: `serve is SkyWalker's regional proxy: an OpenAI-compatible endpoint that routes
every request to a local replica or, when another region would answer sooner,
forwards it once to that region's proxy. Configuration comes from flags, then
the environment (REGION_ID, PEER_REGIONS, LOCAL_WORKER_POOL,
MAX_WAN_RTT_THRESHOLD_MS, SKYWALKER_*), then --config YAML, then defaults.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFlags(atLeast("max-wan-rtt-ms", wanMs, 0), atLeast("max-in-flight", float64(flagCfg.MaxInFlight), 1)); err != nil {
				return err
			}
			cfg, err := loadServeConfig(cmd.Flags(), configFile, os.Getenv, flagCfg, peers, workers, keys, wanMs, emulateWAN)
			if err != nil {
				return err
			}
			log, err := logs.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runServe(ctx, cfg, log)
		},
	}
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "YAML configuration file")
	f.StringVar(&flagCfg.Listen, "listen", flagCfg.Listen, "HTTP listen address")
	f.StringVar(&flagCfg.AdminListen, "admin-listen", "", "admin listener for /metrics, /debug/skywalker, /debug/pprof (default 127.0.0.1:<listen port+100>; off for none) (SKYWALKER_ADMIN_LISTEN)")
	f.StringVar(&flagCfg.GossipBind, "gossip-bind", flagCfg.GossipBind, "mesh (memberlist) listen address")
	f.StringVar(&flagCfg.GossipAdvertise, "gossip-advertise", "", "mesh address peers should use (host:port)")
	f.StringVar(&flagCfg.AdvertiseURL, "advertise-url", "", "this proxy's URL as peers reach it")
	f.StringVar(&flagCfg.Region, "region", "", "this region's id (REGION_ID)")
	f.StringVar(&flagCfg.Jurisdiction, "jurisdiction", "", "this region's jurisdiction for data residency, e.g. eu")
	f.StringVar(&peers, "peers", "", "peer regions: REGION:URL_OR_GOSSIP_ADDR,... (PEER_REGIONS)")
	f.StringVar(&workers, "workers", "", "replica URLs, or one DNS name (LOCAL_WORKER_POOL)")
	f.Float64Var(&wanMs, "max-wan-rtt-ms", float64(region.DefaultControlPlane().MaxWANRTT/time.Millisecond), "WAN gate ceiling in ms, an optional cap on reach, which otherwise follows each request's TTFT objective (MAX_WAN_RTT_THRESHOLD_MS)")
	f.StringVar(&keys, "gossip-key", "", "gossip key(s), base64; first is primary (SKYWALKER_GOSSIP_KEY)")
	f.BoolVar(&flagCfg.InsecureGossip, "insecure-gossip", false, "run the mesh unencrypted (development only)")
	f.BoolVar(&flagCfg.InsecureForwarding, "insecure-forwarding", false, "forward to peers over plain HTTP, without TLS (development only) (SKYWALKER_INSECURE_FORWARDING)")
	f.StringVar(&flagCfg.Policy, "policy", flagCfg.Policy, "routing policy")
	f.StringVar(&flagCfg.Profile, "profile", flagCfg.Profile, "the replicas' engine profile, for prefill estimates")
	f.StringVar(&flagCfg.MeshPreset, "mesh-preset", flagCfg.MeshPreset, "memberlist timing preset: wan, lan, local")
	f.IntVar(&flagCfg.MaxInFlight, "max-in-flight", flagCfg.MaxInFlight, "requests in flight per replica before the balancer holds")
	f.StringVar(&emulateWAN, "emulate-wan", "", "add WAN delay on links to peer regions, REGION=RTT,... (e.g. eu-west=72ms): several regions on one host (SKYWALKER_EMULATE_WAN)")
	return cmd
}

// loadServeConfig applies defaults < file < environment < explicitly set flags.
func loadServeConfig(flags *pflag.FlagSet, file string, getenv func(string) string, fromFlags proxy.Config,
	peers, workers, keys string, wanMs float64, emulateWAN string) (proxy.Config, error) {
	cfg := proxy.DefaultConfig()
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return cfg, fmt.Errorf("read config: %w", err)
		}
		if err := cfg.ApplyYAML(data); err != nil {
			return cfg, err
		}
	}
	if err := cfg.ApplyEnv(getenv); err != nil {
		return cfg, err
	}
	set := func(name string, apply func()) {
		if flags.Changed(name) {
			apply()
		}
	}
	set("listen", func() { cfg.Listen = fromFlags.Listen })
	set("admin-listen", func() { cfg.AdminListen = fromFlags.AdminListen })
	set("gossip-bind", func() { cfg.GossipBind = fromFlags.GossipBind })
	set("gossip-advertise", func() { cfg.GossipAdvertise = fromFlags.GossipAdvertise })
	set("advertise-url", func() { cfg.AdvertiseURL = fromFlags.AdvertiseURL })
	set("region", func() { cfg.Region = fromFlags.Region })
	set("jurisdiction", func() { cfg.Jurisdiction = fromFlags.Jurisdiction })
	set("insecure-gossip", func() { cfg.InsecureGossip = fromFlags.InsecureGossip })
	set("insecure-forwarding", func() { cfg.InsecureForwarding = fromFlags.InsecureForwarding })
	set("policy", func() { cfg.Policy = fromFlags.Policy })
	set("profile", func() { cfg.Profile = fromFlags.Profile })
	set("mesh-preset", func() { cfg.MeshPreset = fromFlags.MeshPreset })
	set("max-in-flight", func() { cfg.MaxInFlight = fromFlags.MaxInFlight })
	set("max-wan-rtt-ms", func() { cfg.MaxWANRTT = time.Duration(wanMs * float64(time.Millisecond)) })
	set("gossip-key", func() { cfg.GossipKeys = strings.Split(keys, ",") })
	set("workers", func() { cfg.WorkerPool = strings.Split(workers, ",") })
	var err error
	set("peers", func() { cfg.Peers, err = proxy.ParsePeers(peers) })
	if err != nil {
		return cfg, fmt.Errorf("--peers: %w", err)
	}
	set("emulate-wan", func() { cfg.EmulateWAN, err = proxy.ParseEmulateWAN(emulateWAN) })
	if err != nil {
		return cfg, fmt.Errorf("--emulate-wan: %w", err)
	}
	return cfg, cfg.Validate()
}

// runServe runs one proxy with its mesh node until ctx ends, then drains
// and leaves the mesh.
func runServe(ctx context.Context, cfg proxy.Config, log *slog.Logger) error {
	n, err := node.Start(ctx, node.Options{Proxy: cfg, Logger: log, Version: version})
	if err != nil {
		return err
	}
	go n.JoinPeers(ctx, 5*time.Second)
	gossip := ""
	if n.Mesh != nil {
		gossip = n.Mesh.Addr()
	}
	log.Info("serving", "region", cfg.Region, "addr", n.Config().Listen, "url", n.URL, "gossip", gossip, "policy", cfg.Policy)
	select {
	case err := <-n.Served():
		n.Kill()
		return err
	case <-ctx.Done():
	}
	return n.Shutdown()
}
