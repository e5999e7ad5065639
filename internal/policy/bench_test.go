package policy_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"skywalker/internal/digest"
	"skywalker/internal/policy"
	"skywalker/internal/prefix"
	"skywalker/internal/prefix/prefixtest"
	"skywalker/internal/request"
)

const (
	benchReplicas    = 16
	benchEntries     = 1_000_000
	benchBlocks      = 800 // a 100k-token prompt in 128-token blocks
	benchBlockTokens = 128
)

// benchWorld is a region with 16 replicas and a prefix index of a million
// (block, replica) entries, plus two peer regions whose digests hold a
// million blocks each, and a 100k-token request cached in all three.
type benchWorld struct {
	index   *prefix.Index
	targets []prefix.Target
	digests []*digest.Digest
	req     *request.Request
	view    policy.View
	matched []int
}

func newBenchWorld() *benchWorld {
	w := &benchWorld{index: prefix.New(benchBlockTokens), matched: make([]int, prefix.MaxTargets)}
	for i := range benchReplicas {
		t, _ := w.index.AddTarget(fmt.Sprintf("replica-%d", i), benchEntries/benchReplicas*benchBlockTokens)
		w.targets = append(w.targets, t)
	}
	for i := 0; w.index.Len() < benchEntries; i++ {
		w.index.Insert(w.targets[i%benchReplicas], prefixtest.Chain(uint64(i), benchBlocks), nil)
	}
	blocks := prefixtest.Chain(1<<40, benchBlocks)
	w.index.Insert(w.targets[3], blocks, nil)
	rng := rand.New(rand.NewPCG(1, 1))
	for _, region := range []string{"eu-west", "ap-east"} {
		d := digest.New(region, "", 1, benchEntries, 0.01)
		for range benchEntries - benchBlocks {
			d.Add(rng.Uint64())
		}
		for _, h := range blocks[:600] {
			d.Add(h)
		}
		w.digests = append(w.digests, d)
	}
	w.req = &request.Request{ID: "bench", Region: "us-east", PromptTokens: benchBlocks * benchBlockTokens,
		Blocks: blocks, BlockTokens: benchBlockTokens, MaxTokens: 256}
	prefill := policy.PrefillProfile{Fixed: 20 * time.Millisecond, PerToken: 250 * time.Microsecond}
	w.view.Local = policy.LocalRegion{Name: "us-east", Jurisdiction: "us", PerRequestWait: 25 * time.Millisecond, Prefill: prefill}
	for i := range benchReplicas {
		w.view.Local.Replicas = append(w.view.Local.Replicas, policy.Replica{Name: fmt.Sprintf("replica-%d", i),
			Healthy: true, Running: 6, InFlight: 6 + i%3, MaxInFlight: 8})
	}
	for i, region := range []string{"eu-west", "ap-east"} {
		w.view.Peers = append(w.view.Peers, policy.PeerRegion{Name: region, Jurisdiction: "eu", Healthy: true,
			DataAge: 200 * time.Millisecond, RTT: time.Duration(72+90*i) * time.Millisecond, GateOpen: true,
			QueueWait: 100 * time.Millisecond, Replicas: benchReplicas, Slots: 8 * benchReplicas, Outstanding: 100, Prefill: prefill})
	}
	return w
}

// fillMatches is the per-request part of building a view: prefix matches
// from the local index and from every peer's digest.
func (w *benchWorld) fillMatches() {
	w.index.Match(w.req.Blocks, w.matched)
	for i, t := range w.targets {
		w.view.Local.Replicas[i].PrefixBlocks = w.matched[t]
	}
	for i, d := range w.digests {
		w.view.Peers[i].PrefixBlocks = d.MatchLength(w.req.Blocks)
	}
}

// BenchmarkRouteDecision100kTokens is one routing decision for a
// 100k-token (800-block) request over 3 regions × 16 replicas with a
// million indexed blocks: prefix-index match, two digest matches, and the
// policy. Target: <= 50 µs.
func BenchmarkRouteDecision100kTokens(b *testing.B) {
	w := newBenchWorld()
	for _, name := range policy.Names {
		p, err := policy.New(name, policy.DefaultConfig())
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				w.fillMatches()
				p.Route(w.req, &w.view)
			}
		})
	}
}

// BenchmarkRouteIndexMemory reports the prefix index's heap bytes per
// (block, replica) entry at a million entries. Target: <= 100 bytes.
func BenchmarkRouteIndexMemory(b *testing.B) {
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		x := prefix.New(benchBlockTokens)
		var ts []prefix.Target
		for i := range benchReplicas {
			t, _ := x.AddTarget(fmt.Sprint(i), benchEntries/benchReplicas*benchBlockTokens)
			ts = append(ts, t)
		}
		for i := 0; x.Len() < benchEntries; i++ {
			x.Insert(ts[i%benchReplicas], prefixtest.Chain(uint64(i), benchBlocks), nil)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(x.Len()), "bytes/entry")
		runtime.KeepAlive(x)
	}
}
