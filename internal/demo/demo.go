// Package demo is `skywalker demo`: a whole three-region SkyWalker mesh on
// one machine — simulated engines, the regional proxies, the memberlist
// mesh with emulated WAN delays — driven through a time-compressed,
// phase-shifted day by the live load generator, with a terminal view, a
// summary against the same day with forwarding off, and then an endpoint
// left running for the user's own OpenAI client.
package demo

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"skywalker/internal/bench"
	"skywalker/internal/engine"
	"skywalker/internal/engine/server"
	"skywalker/internal/mesh"
	"skywalker/internal/proxy"
	"skywalker/internal/workload"
)

// Regions of the demo, with their UTC offsets and jurisdictions.
var Regions = []struct {
	Name, Jurisdiction string
	UTCOffset          float64
}{{"us-east", "us", -5}, {"eu-west", "eu", 0}, {"ap-east", "ap", 9}}

// RTTs of the emulated WAN.
var RTTs = map[[2]string]time.Duration{
	{"us-east", "eu-west"}: 72 * time.Millisecond,
	{"us-east", "ap-east"}: 160 * time.Millisecond,
	{"eu-west", "ap-east"}: 180 * time.Millisecond,
}

// devKey is the demo's gossip key: fixed, public, for loopback only.
var devKey = base64.StdEncoding.EncodeToString([]byte("skywalker-demo-key-loopback-only"))

// Model is the model name the demo's engines serve.
const Model = "llama3-8b-demo"

// Cluster is a running demo mesh.
type Cluster struct {
	Links   *mesh.Links
	Regions []*Region
	cancel  context.CancelFunc
	closers []func()
}

// Region is one region of the demo.
type Region struct {
	Name    string
	URL     string // the proxy's base URL
	Proxy   *proxy.Server
	Mesh    *mesh.Mesh
	Engines []string
}

// Start brings up a mesh: two engines per region, a proxy per region on
// ports[i] (0 picks a free port), gossip over emulated WAN links.
func Start(ctx context.Context, policyName string, ports []int, log *slog.Logger) (*Cluster, error) {
	ctx, cancel := context.WithCancel(ctx)
	c := &Cluster{Links: mesh.NewLinks(), cancel: cancel}
	for pair, rtt := range RTTs {
		c.Links.SetRTT(pair[0], pair[1], rtt)
	}
	prof, _ := engine.LookupProfile("llama3-8b-a100")
	var seed string
	for i, spec := range Regions {
		reg := &Region{Name: spec.Name}
		for range 2 {
			_, url, err := server.ServeLoopback(ctx, server.Config{Model: Model, Engine: engine.Config{Profile: prof, MaxNumSeqs: 48}, TimeScale: 1, Seed: uint64(i + 1)})
			if err != nil {
				c.Close()
				return nil, err
			}
			reg.Engines = append(reg.Engines, url)
		}
		port := 0
		if i < len(ports) {
			port = ports[i]
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("demo: listen for %s's proxy: %w", spec.Name, err)
		}
		reg.URL = "http://" + l.Addr().String()
		cfg := proxy.DefaultConfig()
		cfg.Region, cfg.Jurisdiction, cfg.WorkerPool, cfg.Listen = spec.Name, spec.Jurisdiction, reg.Engines, l.Addr().String()
		cfg.GossipKeys, cfg.MeshPreset, cfg.Policy, cfg.Profile = []string{devKey}, "local", policyName, prof.Name
		cfg.MaxWANRTT, cfg.ScrapeInterval, cfg.MaxInFlight, cfg.MaxWait = 200*time.Millisecond, 50*time.Millisecond, 24, 20*time.Second
		name := spec.Name
		srv, err := proxy.New(cfg, proxy.Options{Logger: log, PeerDelay: func(peer string) time.Duration { return c.Links.RTT(name, peer) / 2 }})
		if err != nil {
			c.Close()
			return nil, err
		}
		tr, err := c.Links.Transport(spec.Name)
		if err != nil {
			c.Close()
			return nil, err
		}
		mc := mesh.DefaultConfig(spec.Name)
		mc.NodeID, mc.Jurisdiction, mc.APIAddr, mc.Preset, mc.Keys, mc.Transport = spec.Name+"-proxy", spec.Jurisdiction, reg.URL, "local", cfg.GossipKeys, tr
		mc.MaxWANRTT, mc.ProbeInterval, mc.LoadInterval, mc.DigestInterval, mc.ReopenSamples = cfg.MaxWANRTT, 100*time.Millisecond, 100*time.Millisecond, 500*time.Millisecond, 3
		mc.Logger = log
		m, err := mesh.New(mc, srv.Router())
		if err != nil {
			c.Close()
			return nil, err
		}
		srv.SetPeers(m)
		srv.SetGossipAddr(m.Addr())
		if err := srv.Start(ctx); err != nil {
			c.Close()
			return nil, err
		}
		go func() { _ = srv.Serve(ctx, l) }()
		c.closers = append(c.closers, func() { _ = m.Leave(time.Second) })
		reg.Proxy, reg.Mesh = srv, m
		if seed == "" {
			seed = m.Addr()
		} else if _, err := m.Join([]string{seed}); err != nil {
			c.Close()
			return nil, err
		}
		c.Regions = append(c.Regions, reg)
	}
	return c, c.wait(30 * time.Second)
}

// wait blocks until every proxy sees its peers healthy and its replicas up.
func (c *Cluster) wait(within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		ok := true
		for _, r := range c.Regions {
			healthy := 0
			for _, p := range r.Mesh.Peers() {
				if p.Healthy && p.GateOpen {
					healthy++
				}
			}
			ok = ok && healthy == len(c.Regions)-1
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("demo: the mesh did not converge")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Close stops everything.
func (c *Cluster) Close() {
	c.cancel()
	for i := len(c.closers) - 1; i >= 0; i-- {
		c.closers[i]()
	}
}

// Endpoints maps each region to its proxy's URL.
func (c *Cluster) Endpoints() map[string]string {
	out := map[string]string{}
	for _, r := range c.Regions {
		out[r.Name] = r.URL
	}
	return out
}

// Day is the demo's workload: the three regions' demand over one day
// compressed to length, phase-shifted by their time zones, bursty (the
// night valley at 15% of the peak), with multi-turn sessions under shared
// system prompts. At each region's peak its demand exceeds what its two
// replicas serve; summed over the regions it does not.
func Day(length time.Duration, seed uint64) workload.Diurnal {
	var regions []workload.RegionLoad
	for _, r := range Regions {
		regions = append(regions, workload.RegionLoad{Name: r.Name, UTCOffset: r.UTCOffset, Jurisdiction: r.Jurisdiction})
	}
	return workload.Diurnal{Regions: regions, Day: length, Duration: length, PeakRPS: 30, ValleyRatio: 0.15,
		MeanTurns: 3, ThinkTime: length / 40, Tenants: 6, TenantPromptTokens: 1024, MaxPromptTokens: 4096,
		MaxOutputTokens: 48, Lengths: workload.Synthetic(), BlockTokens: 128, Seed: seed}
}

// Summary is the demo's final report.
type Summary struct {
	Regions       map[string]RegionSummary `json:"regions"`
	Overall       RegionSummary            `json:"overall"`
	LocalBaseline *Baseline                `json:"local_baseline,omitempty"`
}

// RegionSummary is what one region's clients saw.
type RegionSummary struct {
	Requests     int     `json:"requests"`
	Failed       int     `json:"failed"`
	ServedLocal  int     `json:"served_local"`
	ForwardedOut int     `json:"forwarded_out"`
	Received     int     `json:"received"`
	TTFTP50Ms    float64 `json:"ttft_p50_ms"`
	TTFTP99Ms    float64 `json:"ttft_p99_ms"`
	CacheHitRate float64 `json:"cache_hit_rate"`
}

// Baseline is the same day with forwarding off.
type Baseline struct {
	Regions map[string]RegionSummary `json:"regions"`
	Overall RegionSummary            `json:"overall"`
}

// Summarize computes per-region and overall figures from client samples.
func Summarize(samples []bench.Sample) (map[string]RegionSummary, RegionSummary) {
	type acc struct {
		s              RegionSummary
		ttft           []float64
		cached, prompt int
	}
	accs := map[string]*acc{}
	get := func(name string) *acc {
		if accs[name] == nil {
			accs[name] = &acc{}
		}
		return accs[name]
	}
	all := &acc{}
	for _, s := range samples {
		a := get(s.Ingress)
		for _, x := range []*acc{a, all} {
			x.s.Requests++
			if !s.OK() {
				x.s.Failed++
				continue
			}
			x.ttft = append(x.ttft, float64(s.TTFT)/1e6)
			x.cached += s.CachedTokens
			x.prompt += s.PromptTokens
		}
		if !s.OK() {
			continue
		}
		if s.Served == s.Ingress {
			a.s.ServedLocal++
			all.s.ServedLocal++
		} else {
			a.s.ForwardedOut++
			all.s.ForwardedOut++
			get(s.Served).s.Received++
		}
	}
	finish := func(a *acc) RegionSummary {
		sort.Float64s(a.ttft)
		a.s.TTFTP50Ms, a.s.TTFTP99Ms = round1(bench.Percentile(a.ttft, .5)), round1(bench.Percentile(a.ttft, .99))
		if a.prompt > 0 {
			a.s.CacheHitRate = float64(int(1000*float64(a.cached)/float64(a.prompt))) / 1000
		}
		return a.s
	}
	out := map[string]RegionSummary{}
	for name, a := range accs {
		out[name] = finish(a)
	}
	all.s.Received = all.s.ForwardedOut // every request sent away was received somewhere
	return out, finish(all)
}

func round1(x float64) float64 { return float64(int(x*10+0.5)) / 10 }

// live prints the per-region view every second while a day runs.
type live struct {
	mu      sync.Mutex
	w       io.Writer
	cluster *Cluster
	samples []bench.Sample
	start   time.Time
	day     time.Duration
}

func (l *live) add(s bench.Sample) {
	l.mu.Lock()
	l.samples = append(l.samples, s)
	l.mu.Unlock()
}

func (l *live) print() {
	l.mu.Lock()
	recent := slices(l.samples, time.Now().Add(-5*time.Second))
	l.mu.Unlock()
	regions, _ := Summarize(recent)
	elapsed := time.Since(l.start)
	hour := 24 * elapsed.Seconds() / l.day.Seconds()
	fmt.Fprintf(l.w, "\n%-8s day %4.1f h UTC   (last 5 s)\n", elapsed.Round(time.Second), hour)
	fmt.Fprintf(l.w, "%-8s %9s %6s %7s %5s %5s %9s %9s %6s  %s\n", "region", "offered/s", "queue", "local", "sent", "recv", "TTFT p50", "TTFT p99", "cache", "gates")
	for _, r := range l.cluster.Regions {
		s := regions[r.Name]
		var gates []string
		for _, p := range r.Mesh.Peers() {
			state := "open"
			if !p.GateOpen {
				state = "closed"
			}
			gates = append(gates, fmt.Sprintf("%s:%s %.0fms", p.Region, state, float64(p.RTT)/1e6))
		}
		fmt.Fprintf(l.w, "%-8s %9.1f %6d %7d %5d %5d %8.0fms %8.0fms %5.0f%%  %s\n", r.Name, float64(s.Requests)/5, r.Proxy.QueueLength(),
			s.ServedLocal, s.ForwardedOut, s.Received, s.TTFTP50Ms, s.TTFTP99Ms, 100*s.CacheHitRate, strings.Join(gates, " "))
	}
}

func slices(samples []bench.Sample, since time.Time) []bench.Sample {
	var out []bench.Sample
	for _, s := range samples {
		if s.Start.Add(s.E2E).After(since) {
			out = append(out, s)
		}
	}
	return out
}

// runDay drives one day through a cluster and returns the client samples.
func runDay(ctx context.Context, c *Cluster, day time.Duration, view io.Writer) ([]bench.Sample, error) {
	src, err := Day(day, 7).Source()
	if err != nil {
		return nil, err
	}
	lv := &live{w: view, cluster: c, start: time.Now(), day: day}
	done := make(chan struct{})
	if view != nil {
		go func() {
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
					lv.print()
				}
			}
		}()
	}
	_, samples, err := bench.Run(ctx, bench.Config{Endpoints: c.Endpoints(), Model: Model, Source: src, Label: "demo",
		SLO: time.Second, OnSample: lv.add, Client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}})
	close(done)
	return samples, err
}
