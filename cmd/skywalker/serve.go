package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"skywalker/internal/mesh"
	"skywalker/internal/proxy"
)

func newServeCommand() *cobra.Command {
	var configFile string
	flagCfg := proxy.DefaultConfig()
	var peers, workers, keys string
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
			cfg, err := loadServeConfig(cmd.Flags(), configFile, os.Getenv, flagCfg, peers, workers, keys, wanMs)
			if err != nil {
				return err
			}
			log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runServe(ctx, cfg, log)
		},
	}
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "YAML configuration file")
	f.StringVar(&flagCfg.Listen, "listen", flagCfg.Listen, "HTTP listen address")
	f.StringVar(&flagCfg.GossipBind, "gossip-bind", flagCfg.GossipBind, "mesh (memberlist) listen address")
	f.StringVar(&flagCfg.GossipAdvertise, "gossip-advertise", "", "mesh address peers should use (host:port)")
	f.StringVar(&flagCfg.AdvertiseURL, "advertise-url", "", "this proxy's URL as peers reach it")
	f.StringVar(&flagCfg.Region, "region", "", "this region's id (REGION_ID)")
	f.StringVar(&flagCfg.Jurisdiction, "jurisdiction", "", "this region's jurisdiction for data residency, e.g. eu")
	f.StringVar(&peers, "peers", "", "peer regions: REGION:URL_OR_GOSSIP_ADDR,... (PEER_REGIONS)")
	f.StringVar(&workers, "workers", "", "replica URLs, or one DNS name (LOCAL_WORKER_POOL)")
	f.Float64Var(&wanMs, "max-wan-rtt-ms", 120, "WAN gate threshold in ms (MAX_WAN_RTT_THRESHOLD_MS)")
	f.StringVar(&keys, "gossip-key", "", "gossip key(s), base64; first is primary (SKYWALKER_GOSSIP_KEY)")
	f.BoolVar(&flagCfg.InsecureGossip, "insecure-gossip", false, "run the mesh unencrypted (development only)")
	f.StringVar(&flagCfg.Policy, "policy", flagCfg.Policy, "routing policy")
	f.StringVar(&flagCfg.Profile, "profile", flagCfg.Profile, "the replicas' engine profile, for prefill estimates")
	f.StringVar(&flagCfg.MeshPreset, "mesh-preset", flagCfg.MeshPreset, "memberlist timing preset: wan, lan, local")
	f.IntVar(&flagCfg.MaxInFlight, "max-in-flight", flagCfg.MaxInFlight, "requests in flight per replica before the balancer holds")
	return cmd
}

// loadServeConfig applies defaults < file < environment < explicitly set flags.
func loadServeConfig(flags *pflag.FlagSet, file string, getenv func(string) string, fromFlags proxy.Config,
	peers, workers, keys string, wanMs float64) (proxy.Config, error) {
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
	set("gossip-bind", func() { cfg.GossipBind = fromFlags.GossipBind })
	set("gossip-advertise", func() { cfg.GossipAdvertise = fromFlags.GossipAdvertise })
	set("advertise-url", func() { cfg.AdvertiseURL = fromFlags.AdvertiseURL })
	set("region", func() { cfg.Region = fromFlags.Region })
	set("jurisdiction", func() { cfg.Jurisdiction = fromFlags.Jurisdiction })
	set("insecure-gossip", func() { cfg.InsecureGossip = fromFlags.InsecureGossip })
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
	return cfg, cfg.Validate()
}

// runServe runs one proxy with its mesh node until ctx ends, then drains
// and leaves the mesh.
func runServe(ctx context.Context, cfg proxy.Config, log *slog.Logger) error {
	l, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	if cfg.AdvertiseURL == "" {
		cfg.AdvertiseURL = "http://" + advertiseHost(l.Addr().String())
	}
	var m *mesh.Mesh
	gossipAddr := ""
	srv, err := proxy.New(cfg, proxy.Options{Logger: log})
	if err != nil {
		return err
	}
	if len(cfg.Peers) > 0 || len(cfg.GossipKeys) > 0 {
		mc := mesh.DefaultConfig(cfg.Region)
		host, port, _ := net.SplitHostPort(cfg.GossipBind)
		if host == "" {
			host = "0.0.0.0"
		}
		mc.BindAddr = host
		mc.BindPort, _ = strconv.Atoi(port)
		if cfg.GossipAdvertise != "" {
			ah, ap, _ := net.SplitHostPort(cfg.GossipAdvertise)
			mc.AdvertiseAddr = ah
			mc.AdvertisePort, _ = strconv.Atoi(ap)
		}
		mc.NodeID, mc.Jurisdiction, mc.APIAddr, mc.Version = cfg.NodeID, cfg.Jurisdiction, cfg.AdvertiseURL, version
		mc.Keys, mc.Insecure, mc.Label, mc.Preset, mc.MaxWANRTT = cfg.GossipKeys, cfg.InsecureGossip, cfg.ClusterLabel, cfg.MeshPreset, cfg.MaxWANRTT
		mc.Logger = log
		if mc.NodeID == "" {
			mc.NodeID = cfg.Region + "@" + cfg.AdvertiseURL
		}
		if m, err = mesh.New(mc, srv.Router()); err != nil {
			return err
		}
		gossipAddr = m.Addr()
		srv.SetPeers(m)
		go joinPeers(ctx, m, cfg.Peers, log)
	}
	srv.SetGossipAddr(gossipAddr)
	if err := srv.Start(ctx); err != nil {
		return err
	}
	log.Info("serving", "region", cfg.Region, "addr", l.Addr().String(), "gossip", gossipAddr, "policy", cfg.Policy)
	err = srv.Serve(ctx, l)
	if m != nil {
		if lerr := m.Leave(5 * time.Second); lerr != nil {
			log.Warn("leave mesh", "err", lerr)
		}
	}
	return err
}

func advertiseHost(addr string) string {
	host, port, _ := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		if h, err := os.Hostname(); err == nil {
			host = h
		}
	}
	return net.JoinHostPort(host, port)
}

// joinPeers joins the mesh through the configured peers, retrying until
// one answers: a peer given by URL is asked for its gossip address.
func joinPeers(ctx context.Context, m *mesh.Mesh, peers []proxy.PeerSeed, log *slog.Logger) {
	for {
		var seeds []string
		for _, p := range peers {
			if !strings.Contains(p.Addr, "://") {
				seeds = append(seeds, p.Addr)
				continue
			}
			if addr, err := gossipAddrOf(ctx, p.Addr); err == nil {
				seeds = append(seeds, addr)
			} else {
				log.Debug("peer not reachable yet", "peer", p.Region, "err", err)
			}
		}
		if n, err := m.Join(seeds); err == nil && n > 0 {
			log.Info("joined mesh", "contacted", n)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Second):
		}
	}
}

func gossipAddrOf(ctx context.Context, base string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+"/v1/skywalker/gossip", nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var v struct {
		GossipAddr string `json:"gossip_addr"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || v.GossipAddr == "" {
		return "", fmt.Errorf("%s did not report a gossip address", base)
	}
	return v.GossipAddr, nil
}

// cmdFlagsConfig is the default configuration with a listen address, as
// the flags would give it.
func cmdFlagsConfig(listen string) proxy.Config {
	c := proxy.DefaultConfig()
	c.Listen = listen
	return c
}
