// Package demo is `skywalker demo`: a whole three-region SkyWalker mesh on
// one machine — simulated engines, the regional proxies, the memberlist
// mesh with emulated WAN delays — driven through a time-compressed,
// phase-shifted day by the live load generator, with a terminal view, a
// summary against the same day with forwarding off, and then an endpoint
// left running for the user's own OpenAI client.
package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"skywalker/internal/profile"
	"skywalker/internal/request"

	"skywalker/internal/bench"
	"skywalker/internal/engine"
	"skywalker/internal/engine/server"
	"skywalker/internal/mesh"
	"skywalker/internal/node"
	"skywalker/internal/proxy"
	"skywalker/internal/results"
	"skywalker/internal/workload"
)

// Topology is the demo's: three regions with emulated WAN RTTs.
var Topology = node.ThreeRegions

// Model is the model name most of the demo's engines serve, and
// LargeModel the one a single engine serves in us-east and eu-west only:
// ap-east's requests for it are forwarded.
const (
	Model      = "llama3-8b-demo"
	LargeModel = "llama3-70b-demo"
)

// largeShare is the share of the demo's sessions that ask for LargeModel.
const largeShare = 0.1

// GateThreshold is the demo's WAN gate threshold: above the 180 ms
// eu-west–ap-east link, so every region may share with every other (the
// product's default ceiling is 1 s; reach follows each request's objective).
const GateThreshold = 200 * time.Millisecond

// Start brings up a mesh: two simulated Llama-3.1-8B A100 engines per
// region and one Llama-3.1-70B engine (four H100s) in us-east and
// eu-west, a proxy per region on ports[i] (0 picks a free port) routing
// by policyName, gossip over emulated WAN links; it returns once the mesh
// has converged.
func Start(ctx context.Context, policyName string, ports []int, log *slog.Logger) (*node.Cluster, error) {
	prof, _ := profile.Lookup("llama3-8b-a100")
	large, _ := profile.Lookup("llama3-70b-h100x4")
	small := server.Config{Model: Model, Engine: engine.Config{Profile: prof, MaxNumSeqs: 48}, TimeScale: 1, ResponsesStore: true}
	big := server.Config{Model: LargeModel, Engine: engine.Config{Profile: large, MaxNumSeqs: 48}, TimeScale: 1, ResponsesStore: true}
	c, err := node.StartCluster(ctx, node.ClusterOptions{Topology: Topology, Ports: ports, Logger: log,
		RegionEngines: func(region string) []server.Config {
			if region == "ap-east" {
				return []server.Config{small, small}
			}
			return []server.Config{small, small, big}
		},
		Proxy: func(cfg *proxy.Config) {
			cfg.Policy, cfg.Profile = policyName, prof.Name
			cfg.ModelProfiles = map[string]string{LargeModel: large.Name}
			cfg.MaxWANRTT, cfg.MaxInFlight, cfg.MaxWait = GateThreshold, 24, 20*time.Second
		},
		Mesh: func(mc *mesh.Config) { mc.Control.DigestInterval = 500 * time.Millisecond },
	})
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	if err := c.WaitConverged(ctx, time.Minute); err != nil {
		c.Close()
		return nil, fmt.Errorf("demo: %w", err)
	}
	return c, nil
}

// Day is the demo's workload: the three regions' demand over one day
// compressed to length, phase-shifted by their time zones, bursty (the
// night valley at 15% of the peak), with multi-turn sessions under shared
// system prompts. At each region's peak its demand exceeds what its two
// replicas serve; summed over the regions it does not.
func Day(length time.Duration, seed uint64) workload.Diurnal {
	var regions []workload.RegionLoad
	for _, r := range Topology.Regions {
		regions = append(regions, workload.RegionLoad{Name: r.Name, UTCOffset: r.UTCOffset, Jurisdiction: r.Jurisdiction})
	}
	return workload.Diurnal{Regions: regions, Day: length, Duration: length, PeakRPS: 30, ValleyRatio: 0.15,
		MeanTurns: 3, ThinkTime: length / 40, Tenants: 6, TenantPromptTokens: 1024, MaxPromptTokens: 4096,
		MaxOutputTokens: 48, Lengths: workload.Synthetic(), BlockTokens: 128, Seed: seed,
		Models: []workload.ModelMix{{Name: Model, Share: 1 - largeShare}, {Name: LargeModel, Share: largeShare}}}
}

// Summary is the demo's final report: what the clients of each region
// saw, and all of them together.
type Summary struct {
	Regions map[string]results.RegionStats `json:"regions"`
	Overall results.RegionStats            `json:"overall"`
	// Models is each model's share of it: requests and the share within
	// the demo's 1 s TTFT objective.
	Models map[string]results.GroupStats `json:"models"`
	// Drops counts the requests that failed, by why (the error code a
	// 429 or 503 named, connection_error, failed_midstream, status_N).
	Drops         map[string]int `json:"drop_reasons,omitempty"`
	LocalBaseline *Baseline      `json:"local_baseline,omitempty"`
}

// Baseline is the same day with forwarding off.
type Baseline struct {
	Regions map[string]results.RegionStats `json:"regions"`
	Overall results.RegionStats            `json:"overall"`
	Models  map[string]results.GroupStats  `json:"models"`
	Drops   map[string]int                 `json:"drop_reasons,omitempty"`
}

// Summarize computes per-region and overall figures from client samples,
// with the summary every run uses (internal/results).
func Summarize(samples []bench.Sample) (map[string]results.RegionStats, results.RegionStats) {
	res := bench.Summarize("demo", demoSLO, samples)
	return res.Regions, res.Totals()
}

// SummarizeModels is each model's figures from client samples.
func SummarizeModels(samples []bench.Sample) map[string]results.GroupStats {
	return bench.Summarize("demo", demoSLO, samples).Models
}

// dropReasons counts the failed requests of samples by why.
func dropReasons(samples []bench.Sample) map[string]int {
	return bench.Summarize("demo", demoSLO, samples).Drops
}

// live prints the per-region view while a day runs: redrawn in place every
// second on a terminal, or as one plain line every five seconds.
type live struct {
	mu       sync.Mutex
	w        io.Writer
	terminal bool
	cluster  *node.Cluster
	samples  []bench.Sample
	start    time.Time
	day      time.Duration
	drawn    int // lines of the last in-place view
	ticks    int
}

func (l *live) add(s bench.Sample) {
	l.mu.Lock()
	l.samples = append(l.samples, s)
	l.mu.Unlock()
}

// clock is the simulated UTC hour of the day, wrapping at 24 h, and
// whether the day's traffic has ended (the run is draining).
func (l *live) clock(elapsed time.Duration) (hour float64, draining bool) {
	if elapsed >= l.day {
		return 0, true
	}
	return math.Mod(24*elapsed.Seconds()/l.day.Seconds(), 24), false
}

func (l *live) print() {
	l.mu.Lock()
	recent := slices(l.samples, time.Now().Add(-5*time.Second))
	l.mu.Unlock()
	regions, all := Summarize(recent)
	elapsed := time.Since(l.start)
	hour, draining := l.clock(elapsed)
	when := fmt.Sprintf("day %04.1f h UTC", hour)
	if draining {
		when = "day over, draining"
	}
	l.ticks++
	if !l.terminal {
		if l.ticks%5 == 0 {
			fmt.Fprintf(l.w, "%-5s %s: %d requests in the last 5 s, %d sent to peers, TTFT p50 %.0f ms, p99 %.0f ms\n",
				elapsed.Round(time.Second), when, all.Arrivals, all.ForwardedOut, all.TTFTP50Ms, all.TTFTP99Ms)
		}
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-8s %s   (last 5 s)\n", elapsed.Round(time.Second), when)
	fmt.Fprintf(&b, "%-8s %9s %6s %7s %5s %5s %9s %9s %6s  %s\n", "region", "offered/s", "queue", "local", "sent", "recv", "TTFT p50", "TTFT p99", "cache", "gates")
	for _, r := range l.cluster.Regions {
		s := regions[r.Region]
		var gates []string
		for _, p := range r.Mesh.Peers() {
			state := "open"
			if !p.GateOpen {
				state = "closed"
			}
			gates = append(gates, fmt.Sprintf("%s:%s %.0fms", p.Region, state, float64(p.RTT)/1e6))
		}
		fmt.Fprintf(&b, "%-8s %9.1f %6d %7d %5d %5d %8.0fms %8.0fms %5.0f%%  %s\n", r.Region, float64(s.Arrivals)/5, r.Proxy.QueueLength(),
			s.ServedLocal, s.ForwardedOut, s.Received, s.TTFTP50Ms, s.TTFTP99Ms, 100*s.CacheHitRate, strings.Join(gates, " "))
	}
	if l.drawn > 0 {
		fmt.Fprintf(l.w, "\x1b[%dA\x1b[J", l.drawn) // back to the view's first line, clear below
	}
	fmt.Fprint(l.w, b.String())
	l.drawn = strings.Count(b.String(), "\n")
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
func runDay(ctx context.Context, c *node.Cluster, day time.Duration, view io.Writer, terminal bool) ([]bench.Sample, error) {
	src, err := Day(day, 7).Source()
	if err != nil {
		return nil, err
	}
	lv := &live{w: view, terminal: terminal, cluster: c, start: time.Now(), day: day}
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
		SLO: demoSLO, OnSample: lv.add, Client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}})
	close(done)
	return samples, err
}

// demoSLO is the TTFT objective the demo judges its clients by.
var demoSLO = request.SLO{TTFT: time.Second}
