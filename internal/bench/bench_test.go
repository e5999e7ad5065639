package bench

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"skywalker/internal/engine"
	"skywalker/internal/engine/server"
	"skywalker/internal/profile"
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
	ctx, engineURL := startEngine(t)
	arrivals := sharingArrivals(12)
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

func TestCheckFailsARunPastItsShareAndNamesTheFirstErrors(t *testing.T) {
	refused := Sample{Err: errors.New("connection refused")}
	busy := Sample{Status: 503, Err: errors.New("status 503: no replica")}
	ok := Sample{Status: 200}
	tests := []struct {
		name     string
		samples  []Sample
		maxShare float64
		wantErr  bool
		first    []string
	}{
		{"all served", []Sample{ok, ok}, 0, false, nil},
		{"none sent", nil, 0, false, nil},
		{"within the share", []Sample{ok, ok, ok, refused}, 0.25, false, nil},
		{"past the share", []Sample{refused, ok, busy, refused}, 0.25, true, []string{"connection refused (2×)", "status 503: no replica (1×)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Check(tt.samples, tt.maxShare)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Check = %v, want error %v", err, tt.wantErr)
			}
			var fe *FailureError
			if err != nil && (!errors.As(err, &fe) || !slices.Equal(fe.First, tt.first)) {
				t.Errorf("first errors %v, want %v", fe, tt.first)
			}
		})
	}
}

func TestRouteLeavesOutRegionsWithoutAnEndpoint(t *testing.T) {
	var arrivals []workload.Arrival
	for i, region := range []string{"a", "b", "a", "c", "b"} {
		arrivals = append(arrivals, workload.Arrival{At: time.Duration(i), Region: region, Request: &request.Request{ID: region}})
	}
	kept, unrouted := Route(workload.NewSliceSource(arrivals), map[string]string{"a": "http://a"}, "")
	if len(kept) != 2 || unrouted["b"] != 2 || unrouted["c"] != 1 || unrouted["a"] != 0 {
		t.Errorf("kept %d, unrouted %v: want the two of a kept, b ×2 and c ×1 left out", len(kept), unrouted)
	}
	kept, unrouted = Route(workload.NewSliceSource(arrivals), map[string]string{"a": "http://a"}, "http://default")
	if len(kept) != 5 || len(unrouted) != 0 {
		t.Errorf("with a default endpoint: kept %d, unrouted %v; want everything sent", len(kept), unrouted)
	}
}

func TestANonOKAnswerCarriesTheServersMessage(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write([]byte(`{"error":{"message":"the queue is full","type":"rate_limit_exceeded","code":"queue_full"}}`))
	}))
	defer srv.Close()
	arrivals := []workload.Arrival{{Region: "r", Request: &request.Request{ID: "x", PromptTokens: 10, MaxTokens: 1}}}
	_, samples, err := Run(context.Background(), Config{Default: srv.URL, Source: workload.NewSliceSource(arrivals)})
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) != 1 || samples[0].Err == nil || samples[0].Err.Error() != "status 429: the queue is full" || samples[0].Code != "queue_full" {
		t.Fatalf("samples %+v: want the error to carry the server's message and code", samples)
	}
	if rec := samples[0].Record(samples[0].Start); rec.Dropped != "queue_full" {
		t.Errorf("recorded as %q: a 429 with a code counts as that refusal", rec.Dropped)
	}
}

// TestRunSpeaksEveryAPI: the same workload sent as Anthropic Messages and
// as embeddings is measured as chat is: every request served, Messages
// with its output and cached tokens, embeddings with its answer's time.
func TestRunSpeaksEveryAPI(t *testing.T) {
	ctx, engineURL := startEngine(t)
	for _, api := range []string{APIMessages, APIEmbeddings} {
		res, samples, err := Run(ctx, Config{Default: engineURL, API: api, Source: workload.NewSliceSource(sharingArrivals(6)), SLO: request.SLO{TTFT: time.Second}, Label: api})
		if err != nil {
			t.Fatal(err)
		}
		if res.Completed != 6 || len(samples) != 6 {
			t.Fatalf("%s: %+v", api, res)
		}
		cached := 0
		for _, s := range samples {
			cached += s.CachedTokens
			if !s.OK() || s.TTFT <= 0 || (api == APIMessages && s.OutputTokens != 8) {
				t.Errorf("%s: sample %+v", api, s)
			}
		}
		if api == APIMessages && cached == 0 {
			t.Errorf("messages: requests sharing a 128-token block showed no cache reads")
		}
	}
	if _, _, err := Run(ctx, Config{Default: engineURL, API: "grpc", Source: workload.NewSliceSource(nil)}); err == nil || !strings.Contains(err.Error(), "messages") {
		t.Errorf("an unknown API: %v, want an error naming the APIs", err)
	}
}

// startEngine serves a simulated H100 engine for the test's lifetime.
func startEngine(t *testing.T) (context.Context, string) {
	t.Helper()
	p, _ := profile.Lookup("llama3-8b-h100")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	_, url, err := server.ServeLoopback(ctx, server.Config{Model: "m", Engine: engine.Config{Profile: p}, TimeScale: 20})
	if err != nil {
		t.Fatal(err)
	}
	return ctx, url
}

// sharingArrivals are n requests 20 ms apart, of 8 output tokens each,
// sharing their first 128-token block.
func sharingArrivals(n int) []workload.Arrival {
	var arrivals []workload.Arrival
	for i := range n {
		req := &request.Request{ID: string(rune('a' + i)), PromptTokens: 300, MaxTokens: 8, Blocks: []uint64{42, uint64(i)}, BlockTokens: 128}
		arrivals = append(arrivals, workload.Arrival{At: time.Duration(i) * 20 * time.Millisecond, Region: "r", Request: req})
	}
	return arrivals
}
