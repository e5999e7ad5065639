package region

import (
	"fmt"
	"testing"
	"time"

	"skywalker/internal/digest"
	"skywalker/internal/kvevents"
	"skywalker/internal/policy"
	"skywalker/internal/prefix/prefixtest"
	"skywalker/internal/request"
)

// BenchmarkRouteInAFleetOfFourModels is a request's whole way through one
// region of a fleet of 4 models × 3 regions × 16 replicas per model and
// region: its pool's view (16 replicas' prefix matches from the index,
// the peers serving its model with their digests), the policy, the
// booking of the dispatch and the end of the attempt. The prompt is 2,048
// tokens (16 blocks), half of it cached on one replica; each peer's
// digest holds 100k blocks. Target: <= 5 µs.
func BenchmarkRouteInAFleetOfFourModels(b *testing.B) {
	models := []string{"llama-8b", "llama-70b", "qwen-32b", "mistral-7b"}
	var last *Attempt
	p := NewNode(func(string) Config {
		return Config{Name: "us-east", Jurisdiction: "us", Node: "us-1", MaxInFlight: 64,
			Prefill: policy.PrefillProfile{Fixed: 20 * time.Millisecond, PerToken: 250 * time.Microsecond}}
	}, func(string) (policy.Policy, error) { return policy.NewSkywalker(policy.DefaultSkywalkerConfig()), nil }, func(a *Attempt) { last = a })
	byModel := map[string][]ReplicaSpec{}
	for _, model := range models {
		for i := range 16 {
			byModel[model] = append(byModel[model], ReplicaSpec{Name: fmt.Sprintf("%s-%d", model, i)})
		}
	}
	if err := p.SetReplicas(byModel); err != nil {
		b.Fatal(err)
	}
	var peers []Peer
	for i, name := range []string{"eu-west", "ap-east"} {
		d := digest.New(name, "", 1, 100_000, 0.01)
		for j := range uint64(100_000) {
			d.Add(j*0x9E3779B97F4A7C15 + uint64(i))
		}
		var loads []Load
		for _, model := range models {
			loads = append(loads, Load{Model: model, Replicas: 16, Slots: 1024, Outstanding: 600, QueueWait: 50 * time.Millisecond})
		}
		peers = append(peers, Peer{Region: name, Jurisdiction: "eu", Healthy: true, GateOpen: true, RTT: time.Duration(72+90*i) * time.Millisecond,
			Load: Load{Replicas: 64, Models: loads}, Digest: d})
	}
	p.SetPeers(peers)
	blocks := prefixtest.Chain(42, 16)
	warm := &request.Request{ID: "warm", PromptTokens: 1024, Blocks: blocks[:8], BlockTokens: 128, MaxTokens: 64}
	warm.SetPool("llama-70b", "")
	p.Submit(t0, warm)
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		req := &request.Request{ID: "r", PromptTokens: 2048, Blocks: append([]uint64(nil), blocks...), BlockTokens: 128, MaxTokens: 64}
		req.SetPool("llama-70b", "")
		p.Submit(now, req)
		if last == nil || last.Request != req {
			b.Fatal("the request was not delivered at once")
		}
		last.End(now, Served)
		now = now.Add(time.Millisecond)
	}
}

// BenchmarkKVEventIngestion is what one replica's KV events cost the
// region core: per round a 4,096-token prompt is dispatched, its engine
// stores it as 256 blocks of 16 tokens (one batch, attributed to the
// prompt), and evicts the 256 blocks of the prompt before last (one batch:
// they and their prompt blocks leave the index). Reported: block events
// (stores and removals) per second. Target: >= 200k/s on one core.
func BenchmarkKVEventIngestion(b *testing.B) {
	r, err := newPool(Config{Name: "us-east", Node: "us-1", MaxInFlight: 1 << 20}, policy.LocalLeastLoad{}, func(*Attempt) {})
	if err != nil {
		b.Fatal(err)
	}
	if err := r.SetReplicas(Specs("r0")); err != nil {
		b.Fatal(err)
	}
	rp := r.Replicas()[0]
	r.EngineEvents(t0, rp, 0, nil)
	const engineBlocks = 256
	run := func(round int) []uint64 {
		hashes := make([]uint64, engineBlocks)
		for i := range hashes {
			hashes[i] = uint64(round)<<20 | uint64(i) + 1
		}
		return hashes
	}
	var prev, last []uint64
	round := 0
	b.ReportAllocs()
	for b.Loop() {
		round++
		o := deliveryFor(r, "r", 0, prefixtest.Chain(uint64(round), 32)...)
		r.Deliver(o)
		hashes := run(round)
		r.EngineEvents(t0, rp, 0, []kvevents.Event{{Kind: kvevents.Stored, Hashes: hashes, BlockSize: 16, Tokens: 16 * engineBlocks, Medium: "GPU"}})
		if prev != nil {
			r.EngineEvents(t0, rp, 0, []kvevents.Event{{Kind: kvevents.Removed, Hashes: prev, Medium: "GPU"}})
		}
		r.end(o.Request, Served, time.Second)
		prev, last = last, hashes
	}
	b.ReportMetric(float64(2*engineBlocks*b.N)/b.Elapsed().Seconds(), "block-events/s")
}
