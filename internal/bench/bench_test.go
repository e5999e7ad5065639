package bench

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"skywalker/internal/engine"
	"skywalker/internal/engine/server"
	"skywalker/internal/request"
	"skywalker/internal/workload"
)

func TestPromptTextSharesExactlyThePrefixBlocks(t *testing.T) {
	a := &request.Request{ID: "a", PromptTokens: 3*128 + 10, Blocks: []uint64{1, 2, 3}, BlockTokens: 128}
	b := &request.Request{ID: "b", PromptTokens: 3*128 + 40, Blocks: []uint64{1, 2, 9}, BlockTokens: 128}
	pa, pb := Prompt(a), Prompt(b)
	if len(pa) != a.PromptTokens*request.BytesPerToken || len(pb) != b.PromptTokens*request.BytesPerToken {
		t.Fatalf("prompt lengths %d, %d", len(pa), len(pb))
	}
	if pa[:1024] != pb[:1024] || pa[1024:1536] == pb[1024:1536] {
		t.Error("two shared blocks must give the same 1,024 bytes and the third must differ")
	}
	// The endpoint's own hashing sees the shared prefix too.
	ra, _ := request.Parse(request.Chat, []byte(`{"messages":[{"role":"user","content":"`+pa+`"}]}`), request.Options{})
	rb, _ := request.Parse(request.Chat, []byte(`{"messages":[{"role":"user","content":"`+pb+`"}]}`), request.Options{})
	if ra.Blocks[0] != rb.Blocks[0] || ra.Blocks[1] != rb.Blocks[1] {
		t.Error("the endpoint's block hashes differ on the shared prefix")
	}
}

func TestRunMeasuresWhatTheClientSees(t *testing.T) {
	p, _ := engine.LookupProfile("llama3-8b-h100")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, engineURL, err := server.ServeLoopback(ctx, server.Config{Model: "m", Engine: engine.Config{Profile: p}, TimeScale: 20})
	if err != nil {
		t.Fatal(err)
	}
	var arrivals []workload.Arrival
	for i := range 12 {
		req := &request.Request{ID: string(rune('a' + i)), PromptTokens: 300, MaxTokens: 8, Blocks: []uint64{42, uint64(i)}, BlockTokens: 128}
		arrivals = append(arrivals, workload.Arrival{At: time.Duration(i) * 20 * time.Millisecond, Region: "r", Request: req})
	}
	var seen atomic.Int64 // OnSample runs on many goroutines at once
	res, samples, err := Run(ctx, Config{Default: engineURL, Source: workload.NewSliceSource(arrivals), SLO: request.SLO{TTFT: time.Second}, Label: "live",
		OnSample: func(Sample) { seen.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 12 || res.Completed != 12 || len(samples) != 12 || seen.Load() != 12 {
		t.Fatalf("result %+v, %d samples, %d callbacks", res, len(samples), seen.Load())
	}
	for _, s := range samples {
		if s.TTFT <= 0 || s.E2E < s.TTFT || s.OutputTokens != 8 || s.Served != "r" {
			t.Errorf("sample %+v", s)
		}
	}
	if res.CacheHitRate <= 0 {
		t.Error("requests sharing a 128-token block should show cached tokens")
	}
	if !strings.Contains(res.Policy, "live") || res.TTFTP50Ms <= 0 || res.SLOAttainment != 1 {
		t.Errorf("summary %+v", res)
	}
}
