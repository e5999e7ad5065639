package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"skywalker/internal/overhead"
	"skywalker/internal/tracing"
)

// fastBackend answers instantly: a small JSON body, or three SSE chunks.
func fastBackend() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		if strings.Contains(r.URL.RawQuery, "sse") || r.Header.Get("Accept") == "text/event-stream" {
			w.Header().Set("Content-Type", "text/event-stream")
			for _, c := range []string{`{"choices":[{"delta":{"content":"a"}}]}`, `{"choices":[{"delta":{"content":"b"}}]}`, "[DONE]"} {
				_, _ = fmt.Fprintf(w, "data: %s\n\n", c)
				w.(http.Flusher).Flush()
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"choices":[{"message":{"content":"ok"}}],"usage":{"prompt_tokens":1,"completion_tokens":1}}`))
	}))
}

// measure sends n sequential requests on one keep-alive connection and
// returns latencies (first byte for SSE, whole response otherwise) and the
// process CPU time spent.
func measure(client *http.Client, target string, body []byte, sse bool, n int) ([]time.Duration, time.Duration) {
	lat := make([]time.Duration, 0, n)
	cpu0 := cpuTime()
	for range n {
		req, _ := http.NewRequest("POST", target+"/v1/chat/completions", strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		if sse {
			req.Header.Set("Accept", "text/event-stream")
		}
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			panic(err)
		}
		if sse {
			buf := make([]byte, 1)
			_, _ = resp.Body.Read(buf)
			lat = append(lat, time.Since(start))
			_, _ = io.Copy(io.Discard, resp.Body)
		} else {
			_, _ = io.Copy(io.Discard, resp.Body)
			lat = append(lat, time.Since(start))
		}
		resp.Body.Close()
	}
	return lat, cpuTime() - cpu0
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func pctl(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(p*float64(len(s)-1))]
}

// throughput runs 16 connections for a while and returns requests/s.
func throughput(target string, body []byte, d time.Duration) float64 {
	var count atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(d)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			for time.Now().Before(stop) {
				resp, err := client.Post(target+"/v1/chat/completions", "application/json", strings.NewReader(string(body)))
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				count.Add(1)
			}
		}()
	}
	wg.Wait()
	return float64(count.Load()) / d.Seconds()
}

// BenchmarkProxyOverhead compares, in one run, a request sent straight to
// the backend, through `skywalker serve` (parsing, hashing, routing,
// streaming) and through a stock httputil.ReverseProxy: added latency p50
// and p99 for a 1 KB and a 400 KB (~100k-token) chat request, added time to
// the first SSE chunk, proxy CPU per request, and requests/s at 16
// connections. It logs the table; the headline numbers are also reported as
// metrics. Targets: added p50 <= 100 µs (1 KB) and <= nginx's + 100 µs
// (400 KB), CPU <= 300 µs per 400 KB request, first SSE chunk <= 250 µs,
// and >= 1.0× the stock proxy's requests/s. A row with tracing on (every
// span exported) shows what tracing costs; off, it is the skywalker row.
func BenchmarkProxyOverhead(b *testing.B) {
	backend := fastBackend()
	defer backend.Close()
	sky := "http://" + serveOne(b, []string{backend.URL}, func(c *Config) { c.MaxInFlight = 1 << 20 })
	u, _ := url.Parse(backend.URL)
	rp := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(u) }, FlushInterval: -1})
	defer rp.Close()
	// The same proxy with tracing on, exporting every span to a collector
	// that discards them: what tracing costs when it is on (off, it is
	// the skywalker row).
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) }))
	defer collector.Close()
	tracer, err := tracing.New(context.Background(), "skywalker", "bench", func(k string) string {
		return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": collector.URL}[k]
	})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = tracer.Shutdown(context.Background()) }()
	traced := "http://" + startSoloWith(b, []string{backend.URL}, func(c *Config) { c.MaxInFlight = 1 << 20 }, Options{Tracer: tracer}).addr
	targets := []struct{ name, url string }{{"direct", backend.URL}, {"skywalker", sky}, {"skywalker traced", traced}, {"httputil.ReverseProxy", rp.URL}}
	if ng, err := overhead.StartNginx(b.TempDir(), backend.URL, -1); err == nil {
		defer ng.Stop()
		targets = append(targets, struct{ name, url string }{"nginx", ng.URL})
	} else {
		b.Logf("no nginx column: %v", err)
	}

	for b.Loop() {
		var table strings.Builder
		fmt.Fprintf(&table, "\n%-22s %12s %12s %12s %12s %14s %12s %10s\n", "path", "1KB p50", "1KB p99", "400KB p50", "400KB p99", "CPU/400KB req", "SSE 1st p50", "req/s@16")
		results := map[string][]time.Duration{}
		var directCPU time.Duration
		for _, tg := range targets {
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			small, _ := measure(client, tg.url, overhead.ChatBody(1<<10, false), false, 3000)
			large, cpu := measure(client, tg.url, overhead.ChatBody(400<<10, false), false, 400)
			sse, _ := measure(client, tg.url, overhead.ChatBody(1<<10, false), true, 2000)
			rps := throughput(tg.url, overhead.ChatBody(1<<10, false), time.Second)
			perReq := cpu / 400
			if tg.name == "direct" {
				directCPU = perReq
			}
			results[tg.name] = []time.Duration{pctl(small, .5), pctl(small, .99), pctl(large, .5), pctl(large, .99), perReq - directCPU, pctl(sse, .5), time.Duration(rps)}
			r := results[tg.name]
			fmt.Fprintf(&table, "%-22s %12v %12v %12v %12v %14v %12v %10.0f\n", tg.name, r[0], r[1], r[2], r[3], r[4], r[5], rps)
		}
		d, s, h, tr := results["direct"], results["skywalker"], results["httputil.ReverseProxy"], results["skywalker traced"]
		fmt.Fprintf(&table, "%-22s %12v %12v %12v %12v %14v %12v %9.2fx\n", "skywalker added", s[0]-d[0], s[1]-d[1], s[2]-d[2], s[3]-d[3], s[4], s[5]-d[5], float64(s[6])/float64(h[6]))
		fmt.Fprintf(&table, "%-22s %12v %12v %12v %12v %14v %12v %9.2fx\n", "tracing on adds", tr[0]-s[0], tr[1]-s[1], tr[2]-s[2], tr[3]-s[3], tr[4]-s[4], tr[5]-s[5], float64(tr[6])/float64(s[6]))
		fmt.Fprintf(&table, "%-22s %12v %12v %12v %12v %14v %12v\n", "ReverseProxy added", h[0]-d[0], h[1]-d[1], h[2]-d[2], h[3]-d[3], h[4], h[5]-d[5])
		if n, ok := results["nginx"]; ok {
			fmt.Fprintf(&table, "%-22s %12v %12v %12v %12v %14s %12v %9.2fx\n", "nginx added", n[0]-d[0], n[1]-d[1], n[2]-d[2], n[3]-d[3], "(separate process)", n[5]-d[5], float64(s[6])/float64(n[6]))
		}
		b.Log(table.String())
		b.ReportMetric(float64((s[0] - d[0]).Microseconds()), "added-p50-1KB-µs")
		b.ReportMetric(float64((s[2] - d[2]).Microseconds()), "added-p50-400KB-µs")
		b.ReportMetric(float64(s[4].Microseconds()), "cpu-400KB-µs")
		b.ReportMetric(float64((s[5] - d[5]).Microseconds()), "added-sse-first-µs")
		b.ReportMetric(float64(s[6])/float64(h[6]), "rps-vs-reverseproxy")
	}
}
