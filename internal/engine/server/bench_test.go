package server_test

import (
	"bufio"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"skywalker/internal/engine"
	"skywalker/internal/engine/server"
)

// BenchmarkConcurrentStreams opens 2,000 SSE streams at once against one
// engine process (H100 profile, all 2,000 in one batch, 10× real time) and
// holds them open until each has received 128 tokens. It reports the peak of
// streams open at once, SSE chunks delivered per second, and how many
// streams failed. Target: 2,000 open streams, none failing.
func BenchmarkConcurrentStreams(b *testing.B) {
	const streams, tokens = 2000, 128
	_, url := server.StartForTest(b, "llama3-8b-h100", server.Config{Model: "m", TimeScale: 10,
		Engine: engine.Config{MaxNumSeqs: streams, MaxNumBatchedTokens: 16384}})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: streams, MaxConnsPerHost: 0}}
	body := fmt.Sprintf(`{"messages":[{"role":"user","content":"hi"}],"max_tokens":%d,"stream":true}`, tokens)

	var open, peak, chunks, failed atomic.Int64
	start := time.Now()
	for b.Loop() {
		var wg sync.WaitGroup
		for range streams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := client.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
				if err != nil || resp.StatusCode != 200 {
					failed.Add(1)
					return
				}
				defer resp.Body.Close()
				n := open.Add(1)
				for {
					p := peak.Load()
					if n <= p || peak.CompareAndSwap(p, n) {
						break
					}
				}
				defer open.Add(-1)
				sc := bufio.NewScanner(resp.Body)
				got := 0
				for sc.Scan() {
					if strings.HasPrefix(sc.Text(), "data: {") {
						got++
					}
				}
				chunks.Add(int64(got))
				if got != tokens+2 { // role chunk + tokens + finish chunk
					failed.Add(1)
				}
			}()
		}
		wg.Wait()
	}
	b.ReportMetric(float64(peak.Load()), "peak-open-streams")
	b.ReportMetric(float64(chunks.Load())/time.Since(start).Seconds(), "chunks/s")
	b.ReportMetric(float64(failed.Load()), "failed")
}
