package proxy_test

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"skywalker/internal/engine"
	"skywalker/internal/engine/server"
	"skywalker/internal/node/nodetest"
	"skywalker/internal/profile"
)

// syncBuffer is a log sink safe for the cluster's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestEnginesWithoutMetricsAreHeldAndForwardedWithTheDefaults puts the
// proxies in front of engines that expose no /metrics and run one request
// at a time (as llama.cpp servers), with every proxy setting at its
// default: the proxy learns the one slot from first-token times, so a
// burst at us-east is held in the balancer and partly forwarded rather
// than piled into the engines; and each replica is warned about once.
func TestEnginesWithoutMetricsAreHeldAndForwardedWithTheDefaults(t *testing.T) {
	t.Parallel() // it waits on time, not on the CPU: beside the others
	var logs syncBuffer
	p, _ := profile.Lookup("llama3-8b-a100")
	c := nodetest.Start(t, nodetest.Options{EnginesPerRegion: 2, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Engine: server.Config{Model: "m", MetricsStyle: "none", TimeScale: 1, Engine: engine.Config{Profile: p, MaxNumSeqs: 1}}})
	us := c.Region("us-east")
	gateOpen(t, c, "us-east", "eu-west")
	// Teach the proxy the slots: a few requests two at a time.
	for range 3 {
		burst(t, us.URL, 4, 200)
	}
	shared := burst(t, us.URL, 8, 400)
	served := map[string]int{}
	for _, r := range shared {
		if r.status != 200 {
			t.Fatalf("status %d: %.200s", r.status, r.body)
		}
		served[r.region]++
	}
	if served["us-east"] == 8 {
		t.Errorf("nothing of the burst was forwarded: %v (a one-slot engine took the whole burst into its own queue)", served)
	}
	t.Logf("burst served %v", served)
	// The proxy learned the one slot: its cap for each replica is a few
	// requests, not max_in_flight's 64, so the rest waited in the balancer.
	page := metricsPage(t, us.AdminURL)
	for _, e := range us.Engines {
		host := strings.TrimPrefix(e.URL, "http://")
		line := metricLine(page, `skywalker_replica_dispatch_cap{region="us-east",replica="`+host+`"}`)
		var v float64
		if _, err := fmt.Sscan(strings.TrimSpace(line), &v); err != nil || v < 1 || v > 3 {
			t.Errorf("replica %s dispatch cap %q, want 1-3 learned for a one-slot engine", host, line)
		}
	}
	for _, series := range []string{"go_goroutines ", "process_resident_memory_bytes "} {
		if !strings.Contains(page, "\n"+series) {
			t.Errorf("the proxy's /metrics lacks the runtime series %s", series)
		}
	}
	warnings := grepLines(logs.String(), "exposes no vLLM or SGLang metrics")
	for _, region := range c.Regions {
		for _, e := range region.Engines {
			host := strings.TrimPrefix(e.URL, "http://")
			if n := strings.Count(warnings, "replica="+host); n != 1 {
				t.Errorf("replica %s was warned about %d times, want once:\n%s", host, n, warnings)
			}
		}
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func metricsPage(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// metricLine is the value after a series name in a metrics page ("" if
// absent).
func metricLine(page, series string) string {
	for _, l := range strings.Split(page, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			return v
		}
	}
	return ""
}

// requestsTotal sums skywalker_requests_total over series with outcome.
func requestsTotal(t *testing.T, base, outcome string) float64 {
	t.Helper()
	return seriesSum(t, base, "skywalker_requests_total", `outcome="`+outcome+`"`)
}

// seriesSum sums the series of metric name on base's /metrics whose
// labels contain every one of labels.
func seriesSum(t *testing.T, base, name string, labels ...string) float64 {
	t.Helper()
	total := 0.0
	for _, l := range strings.Split(metricsPage(t, base), "\n") {
		if !strings.HasPrefix(l, name+"{") {
			continue
		}
		match := true
		for _, label := range labels {
			match = match && strings.Contains(l, label)
		}
		if v, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64); match && err == nil {
			total += v
		}
	}
	return total
}

// abortedAt is how many requests an engine saw its client abandon.
func abortedAt(t *testing.T, engineURL string) float64 {
	t.Helper()
	for _, l := range strings.Split(metricsPage(t, engineURL), "\n") {
		if strings.HasPrefix(l, "vllm:request_aborted_total{") {
			v, _ := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
			return v
		}
	}
	return 0
}

// runningAt is how many requests the engine at engineURL runs now.
func runningAt(t *testing.T, engineURL string) float64 {
	t.Helper()
	return seriesSum(t, engineURL, "vllm:num_requests_running")
}

// streamUntil sends a streaming chat request and reads until the body
// holds stop (or ends), then closes the connection at once.
func streamUntil(t *testing.T, base, body, stop string, header map[string]string) string {
	t.Helper()
	return streamPathUntil(t, base+"/v1/chat/completions", body, stop, header)
}

// streamPathUntil is streamUntil at any endpoint's URL.
func streamPathUntil(t *testing.T, url, body, stop string, header map[string]string) string {
	t.Helper()
	return streamPathUntilSignalling(t, url, body, stop, "", nil, header)
}

// streamPathUntilSignalling is streamPathUntil that closes seen once the
// body holds mark (mark "": never).
func streamPathUntilSignalling(t *testing.T, url, body, stop, mark string, seen chan struct{}, header map[string]string) string {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	buf := make([]byte, 512)
	for !strings.Contains(sb.String(), stop) {
		n, err := resp.Body.Read(buf)
		sb.Write(buf[:n])
		if seen != nil && mark != "" && strings.Contains(sb.String(), mark) {
			close(seen)
			seen = nil
		}
		if err != nil {
			break
		}
	}
	resp.Body.Close() // hang up now
	return sb.String()
}

// TestOutcomesTellTheTruth: a stream read to its [DONE] and closed at
// once is ok; a client that hangs up mid-stream is cancelled, and the
// engine sees its request aborted (for a forwarded one, the peer's
// engine); a stream the engine breaks is failed_midstream.
func TestOutcomesTellTheTruth(t *testing.T) {
	c := startCluster(t, clusterOpts{timeScale: 1, engines: 1})
	us := c.Region("us-east")
	long := chat("tell me a long story", 400, true, "")

	okBefore := requestsTotal(t, us.AdminURL, "ok")
	if got := streamUntil(t, us.URL, chat("short", 4, true, ""), "data: [DONE]", nil); !strings.Contains(got, "[DONE]") {
		t.Fatalf("no [DONE] in %q", got)
	}
	nodetest.Eventually(t, 30*time.Second, "the complete stream counted ok", func() (bool, string) {
		n := requestsTotal(t, us.AdminURL, "ok")
		return n == okBefore+1, fmt.Sprintf("ok went from %v to %v; cancelled %v, failed_midstream %v", okBefore, n,
			requestsTotal(t, us.AdminURL, "cancelled"), requestsTotal(t, us.AdminURL, "failed_midstream"))
	})

	abortedBefore := abortedAt(t, us.Engines[0].URL)
	streamUntil(t, us.URL, long, `"content":"`, nil) // the first token, then hang up
	nodetest.Eventually(t, 30*time.Second, "the hang-up counted cancelled and aborted at the engine", func() (bool, string) {
		cancelled, aborted := requestsTotal(t, us.AdminURL, "cancelled"), abortedAt(t, us.Engines[0].URL)
		return cancelled >= 1 && aborted == abortedBefore+1, fmt.Sprintf("cancelled %v, engine aborted %v (was %v)", cancelled, aborted, abortedBefore)
	})

	// An Anthropic Messages stream alike: read to its message_stop, ok;
	// hung up after its first delta, cancelled and aborted at the engine.
	okBefore = requestsTotal(t, us.AdminURL, "ok")
	message := func(maxTokens int) string {
		return fmt.Sprintf(`{"max_tokens":%d,"stream":true,"messages":[{"role":"user","content":"a message"}]}`, maxTokens)
	}
	if got := streamPathUntil(t, us.URL+"/v1/messages", message(4), "event: message_stop", nil); !strings.Contains(got, "message_stop") {
		t.Fatalf("no message_stop in %q", got)
	}
	nodetest.Eventually(t, 30*time.Second, "the complete Messages stream counted ok", func() (bool, string) {
		n := requestsTotal(t, us.AdminURL, "ok")
		return n == okBefore+1, fmt.Sprintf("ok went from %v to %v", okBefore, n)
	})
	abortedBefore, cancelledBefore := abortedAt(t, us.Engines[0].URL), requestsTotal(t, us.AdminURL, "cancelled")
	streamPathUntil(t, us.URL+"/v1/messages", message(400), "event: content_block_delta", nil)
	nodetest.Eventually(t, 30*time.Second, "the Messages hang-up counted cancelled and aborted at the engine", func() (bool, string) {
		cancelled, aborted := requestsTotal(t, us.AdminURL, "cancelled"), abortedAt(t, us.Engines[0].URL)
		return cancelled == cancelledBefore+1 && aborted == abortedBefore+1, fmt.Sprintf("cancelled %v (was %v), engine aborted %v (was %v)", cancelled, cancelledBefore, aborted, abortedBefore)
	})

	// Forwarded: eu-west may serve only resident requests from us-east.
	eu := c.Region("eu-west")
	euAborted := abortedAt(t, eu.Engines[0].URL)
	streamUntil(t, us.URL, chat("a resident story", 400, true, `,"metadata":{"data_residency":"eu"}`), `"content":"`, nil)
	nodetest.Eventually(t, 30*time.Second, "the forwarded hang-up aborted at the peer's engine", func() (bool, string) {
		aborted := abortedAt(t, eu.Engines[0].URL)
		return aborted == euAborted+1, fmt.Sprintf("eu-west engine aborted %v (was %v)", aborted, euAborted)
	})

	failedBefore := requestsTotal(t, us.AdminURL, "failed_midstream")
	done, streaming := make(chan string), make(chan struct{})
	go func() {
		done <- streamPathUntilSignalling(t, us.URL+"/v1/chat/completions", long, "data: [DONE]", `"content":"`, streaming, nil)
	}()
	// Killed once the client has a token (before it, the request would
	// rightly be retried elsewhere, and nothing would have broken).
	select {
	case <-streaming:
	case <-time.After(30 * time.Second):
		t.Fatal("the long stream sent no token within 30 s")
	}
	us.Engines[0].Kill()
	if body := <-done; !strings.Contains(body, `"upstream_error"`) {
		t.Errorf("a stream the engine broke ended without an error event: %.300s", body)
	}
	nodetest.Eventually(t, 30*time.Second, "the broken stream counted failed_midstream", func() (bool, string) {
		n := requestsTotal(t, us.AdminURL, "failed_midstream")
		return n == failedBefore+1, fmt.Sprintf("failed_midstream %v (was %v)", n, failedBefore)
	})
}

// TestSequentialConversationsSpreadAndStick: six long conversations, sent
// one request at a time over two replicas, start three on each (ties go
// to the emptier cache, then by rendezvous hash, not to the first
// replica), and every later turn returns to the replica holding its
// conversation.
func TestSequentialConversationsSpreadAndStick(t *testing.T) {
	c := startCluster(t, clusterOpts{})
	keepLocal(t, c, "us-east")
	us := c.Region("us-east")
	home := map[int]string{}
	first := map[string]int{}
	history := make([]string, 6)
	for turn := range 5 {
		for conv := range 6 {
			msg := strings.Repeat(fmt.Sprintf("conversation %d turn %d asks about caches. ", conv, turn), 60)
			history[conv] += fmt.Sprintf(`{"role":"user","content":%q},`, msg)
			body := `{"model":"m","max_tokens":4,"messages":[` + strings.TrimSuffix(history[conv], ",") + `]}`
			r := call(t, us.URL, body, nil)
			if r.status != 200 {
				t.Fatalf("conversation %d turn %d: status %d %.200s", conv, turn, r.status, r.body)
			}
			history[conv] += `{"role":"assistant","content":"noted"},`
			if turn == 0 {
				home[conv] = r.replica
				first[r.replica]++
				continue
			}
			if r.replica != home[conv] {
				t.Errorf("conversation %d turn %d went to %s (%s), its prefix is on %s", conv, turn, r.replica, r.reason, home[conv])
			}
		}
	}
	if len(first) != 2 || first[us.Engines[0].URL[len("http://"):]] != 3 {
		t.Errorf("first turns by replica %v, want 3 and 3", first)
	}
}

// TestAPeerThatLeavesIsReportedUnhealthy: a region whose proxy shuts down
// cleanly stays in the peers' metrics as unhealthy, so an alert on
// skywalker_peer_healthy == 0 fires instead of the series vanishing.
func TestAPeerThatLeavesIsReportedUnhealthy(t *testing.T) {
	c := startCluster(t, clusterOpts{engines: 1})
	if err := c.Region("ap-east").Shutdown(); err != nil {
		t.Fatal(err)
	}
	us := c.Region("us-east")
	nodetest.Eventually(t, 30*time.Second, "us-east reports ap-east unhealthy", func() (bool, string) {
		v := metricLine(metricsPage(t, us.AdminURL), `skywalker_peer_healthy{peer="ap-east",region="us-east"}`)
		return v == "0", "skywalker_peer_healthy for ap-east: " + v
	})
}

// A draining proxy is dropped by its peers at once — while it still
// finishes what it holds and before it leaves the mesh.
func TestPeersStopForwardingToADrainingProxyBeforeItLeaves(t *testing.T) {
	c := startCluster(t, clusterOpts{engines: 1})
	ap, us := c.Region("ap-east"), c.Region("us-east")
	// A long stream keeps ap-east's drain going.
	resp, err := http.Post(ap.URL+"/v1/chat/completions", "application/json", strings.NewReader(chat("a long answer", 2000, true, "")))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := resp.Body.Read(make([]byte, 64)); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, resp.Body) }()
	begun := time.Now()
	shutdown := make(chan error, 1)
	go func() { shutdown <- ap.Shutdown() }()
	took := nodetest.Eventually(t, 30*time.Second, "us-east to stop counting ap-east", func() (bool, string) {
		for _, p := range us.Proxy.Peers() {
			if p.Region == "ap-east" {
				return !p.Healthy, fmt.Sprintf("ap-east healthy=%v with %d nodes", p.Healthy, p.Nodes)
			}
		}
		return true, ""
	})
	select {
	case err := <-shutdown:
		t.Errorf("ap-east had left (shutdown returned %v) before us-east noticed it drain %v after SIGTERM; the test measured the leave, not the drain", err, took)
	default:
	}
	t.Logf("us-east stopped counting ap-east %v after it began to drain", time.Since(begun).Round(time.Millisecond))
	<-shutdown
}
