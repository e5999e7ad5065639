package proxy

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"skywalker/internal/overhead"
)

type cannedTransport struct{}

func (cannedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(bytes.NewReader([]byte(`{"usage":{"completion_tokens":1}}`))), Request: r}, nil
}

// BenchmarkHandler400KB is the proxy's own CPU for one 400 KB chat request,
// network excluded: read, parse, hash, route, relay.
func BenchmarkHandler400KB(b *testing.B) { benchmarkHandler(b, 400<<10) }

// BenchmarkHandler1KB is the same for a 1 KB request: the per-request
// cost (routing, locks, timers, headers, metrics) with little to parse.
// Profile the hot path with:
//
//	go test ./internal/proxy -run '^$' -bench 'Handler(1|400)KB' -cpuprofile cpu.out -memprofile mem.out
//	go tool pprof -top cpu.out; go tool pprof -sample_index=alloc_space -top mem.out
func BenchmarkHandler1KB(b *testing.B) { benchmarkHandler(b, 1<<10) }

func benchmarkHandler(b *testing.B, size int) {
	cfg := DefaultConfig()
	cfg.Region, cfg.WorkerPool = "bench", []string{"http://replica:8000"}
	cfg.MaxInFlight = 1 << 20
	srv, err := New(cfg, Options{Transport: cannedTransport{}})
	if err != nil {
		b.Fatal(err)
	}
	urls, _ := initialReplicas(context.Background(), cfg)
	_ = srv.router.SetReplicas(urls)
	body := overhead.ChatBody(size, false)
	h := srv.Handler()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest("POST", "/v1/chat/completions", bytes.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 200 {
			b.Fatal(rec.Code, rec.Body.String())
		}
	}
}
