package mesh

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"skywalker/internal/digest"
	"skywalker/internal/region"
	"skywalker/internal/testwait"
)

// BenchmarkGossip runs 3 regions × 3 proxies on loopback with emulated WAN
// delays, each publishing a digest of a million blocks that grows by 1,000
// blocks every 2 s (the default digest interval) and a load summary every
// 250 ms, for a fleet of one model and of four (each summary then carries
// four models' loads). It reports steady-state gossip bytes sent per
// second per node (after the first full digests), the bytes of that first
// exchange, and the time from a digest change to every other node holding
// it. Target: <= 50 KB/s per node.
func BenchmarkGossip(b *testing.B) {
	for _, models := range []int{1, 4} {
		b.Run(fmt.Sprintf("models=%d", models), func(b *testing.B) { benchGossip(b, models) })
	}
}

func benchGossip(b *testing.B, models int) {
	load := region.Load{Replicas: 4, Slots: 32}
	if models > 1 {
		for i := range models {
			load.Models = append(load.Models, region.Load{Model: fmt.Sprintf("meta-llama/Llama-3.1-%dB-Instruct", 8*(i+1)), Replicas: 4, Slots: 32,
				Outstanding: 20 + i, QueueWait: time.Duration(i) * 40 * time.Millisecond, QueuedTokens: 40_000, PrefillTokens: 2048,
				FreeCacheTokens: 100_000, HitShare: 0.5})
		}
	}
	for b.Loop() {
		links := threeRegions()
		regions := []string{"us-east", "eu-west", "ap-east"}
		var nodes []*testNode
		var digests []*digest.Digest
		rng := rand.New(rand.NewPCG(1, 1))
		for i := range 9 {
			reg := regions[i%3]
			n := benchNode(b, links, reg, fmt.Sprintf("%s-%d", reg, i))
			d := digest.New(reg, n.Name(), 1, 1_000_000, 0.01)
			for range 1_000_000 {
				d.Add(rng.Uint64())
			}
			digests = append(digests, d)
			n.src.set(load)
			n.src.setDigest(d)
			nodes = append(nodes, n)
			if i > 0 {
				if _, err := n.Join([]string{nodes[0].Addr()}); err != nil {
					b.Fatal(err)
				}
			}
		}
		holdsAll := func(gen uint64) bool {
			for _, n := range nodes {
				n.mu.Lock()
				ok := len(n.sender.sentGen) == 6 // the other regions' nodes
				for _, g := range n.sender.sentGen {
					ok = ok && g == gen
				}
				n.mu.Unlock()
				if !ok {
					return false
				}
			}
			return true
		}
		testwait.Eventually(b, 30*time.Second, "every node holds every digest", func() (bool, string) { return holdsAll(1), "a node lacks a digest" })
		var initial int64
		for _, n := range nodes {
			initial += n.Stats().BytesSent
		}

		// Steady state: three rounds of growth.
		start := time.Now()
		var before int64
		for _, n := range nodes {
			before += n.Stats().BytesSent
		}
		var propagation []time.Duration
		for round := uint64(2); round <= 4; round++ {
			changed := time.Now()
			for i, n := range nodes {
				d := digests[i].Clone()
				for range 1000 {
					d.Add(rng.Uint64())
				}
				d.Generation = round
				digests[i] = d
				n.src.setDigest(d)
			}
			testwait.Eventually(b, 30*time.Second, fmt.Sprint("every node holds round ", round), func() (bool, string) { return holdsAll(round), "a node lacks one" })
			propagation = append(propagation, time.Since(changed))
		}
		elapsed := time.Since(start).Seconds()
		var after int64
		for _, n := range nodes {
			after += n.Stats().BytesSent
		}
		worst := time.Duration(0)
		for _, p := range propagation {
			worst = max(worst, p)
		}
		b.ReportMetric(float64(after-before)/elapsed/9, "bytes/s/node")
		b.ReportMetric(float64(initial)/9, "first-exchange-bytes/node")
		b.ReportMetric(float64(worst.Milliseconds()), "digest-change-to-all-ms")
		var wg sync.WaitGroup
		for _, n := range nodes {
			wg.Add(1)
			go func() { defer wg.Done(); _ = n.Shutdown() }()
		}
		wg.Wait()
	}
}

func benchNode(b *testing.B, links *Links, reg, name string) *testNode {
	tr, err := links.Transport(reg)
	if err != nil {
		b.Fatal(err)
	}
	cfg := DefaultConfig(reg)
	cfg.NodeID, cfg.Preset, cfg.Keys, cfg.Transport = name, "local", []string{testKey}, tr
	src := &fakeSource{}
	m, err := New(cfg, src)
	if err != nil {
		b.Fatal(err)
	}
	return &testNode{Mesh: m, src: src}
}
