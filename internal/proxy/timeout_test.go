package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"skywalker/internal/region"
	"skywalker/internal/request"
	"skywalker/internal/testwait"
)

func TestFirstByteTimeoutIsTheCoresUnlessConfigured(t *testing.T) {
	tests := []struct {
		name       string
		configured time.Duration
		learned    time.Duration
		stream     bool
		maxTokens  int
		want       time.Duration
	}{
		{"learned", 0, 7 * time.Second, true, 0, 7 * time.Second},
		{"configured wins", 2 * time.Second, 7 * time.Second, true, 0, 2 * time.Second},
		{"not streamed: plus its output", 0, 7 * time.Second, false, 50, 7*time.Second + 5*time.Second},
		{"not streamed, no max_tokens", 0, 7 * time.Second, false, 0, 7*time.Second + 2048*100*time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.FirstByteTimeout = tc.configured
			x := &exchange{s: &Server{cfg: cfg}, req: &request.Request{Stream: tc.stream, MaxTokens: tc.maxTokens}}
			if got := x.firstByteTimeout(tc.learned); got != tc.want {
				t.Errorf("firstByteTimeout = %v, want %v", got, tc.want)
			}
		})
	}
}

// hungBackend accepts requests and never answers them (until the proxy
// gives up on them); it counts what it was sent.
func hungBackend(t *testing.T) (*httptest.Server, *atomic.Int64) { return hangsAfterBackend(t, 0) }

// hangsAfterBackend answers its first answered chat requests at once and
// hangs on every later one; it counts what it was sent.
func hangsAfterBackend(t *testing.T, answered int64) (*httptest.Server, *atomic.Int64) {
	var n atomic.Int64
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body) // else the server never sees the proxy hang up
		if n.Add(1) <= answered {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"choices":[{"message":{"content":"ok"}}],"usage":{"prompt_tokens":1,"completion_tokens":1}}`))
			return
		}
		<-r.Context().Done()
	}))
	t.Cleanup(b.Close)
	return b, &n
}

// stallingBackend answers a streamed chat request with events, then sends
// nothing more until the proxy hangs up; a request not streamed is never
// answered.
func stallingBackend(t *testing.T, events string) *httptest.Server {
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), `"stream":true`) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, events)
			w.(http.Flusher).Flush()
		}
		<-r.Context().Done()
	}))
	t.Cleanup(b.Close)
	return b
}

// One of two replicas hangs on every request: each request it gets times
// out at the first-byte timeout and is retried on the other, and the hung
// replica is ejected by the passive rule, so later requests go straight
// to the good one.
func TestAHungReplicaIsTimedOutRetriedAndEjected(t *testing.T) {
	t.Parallel() // it waits on time, not on the CPU: beside the others
	hung, sentToHung := hungBackend(t)
	good, _ := countingBackend(t)
	p := startSolo(t, []string{hung.URL, good.URL}, func(c *Config) { c.FirstByteTimeout = 300 * time.Millisecond })
	client := &http.Client{Timeout: 20 * time.Second} // a hung request fails this
	// One request first: engines without metrics have the region hold at
	// most one request per replica on the profile's guess until one has
	// given a first token (the burst would be partly refused).
	resp, err := client.Post("http://"+p.addr+"/v1/chat/completions", "application/json", strings.NewReader(`{"stream":true,"messages":[{"role":"user","content":"first"}]}`))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the first request: %v %v", resp, err)
	}
	resp.Body.Close()
	var wg sync.WaitGroup
	var failed atomic.Int64
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.Post("http://"+p.addr+"/v1/chat/completions", "application/json",
				strings.NewReader(fmt.Sprintf(`{"stream":true,"messages":[{"role":"user","content":"question %d"}]}`, i)))
			if err != nil {
				t.Errorf("request %d: %v", i, err)
				failed.Add(1)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("request %d: status %d", i, resp.StatusCode)
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	if failed.Load() > 0 {
		return
	}
	// It was ejected; health checks re-admit it (it answers /health), on
	// probation: each time, one request finds it hung, ejects it again for
	// twice as long, and is retried. Of 20 requests one after another,
	// few can reach it.
	before := sentToHung.Load()
	for range 20 {
		resp, err := client.Post("http://"+p.addr+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"stream":true,"messages":[{"role":"user","content":"after"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("status %d after the ejection", resp.StatusCode)
		}
	}
	if n := sentToHung.Load() - before; n > 3 {
		t.Errorf("%d of 20 later requests reached the hung replica; ejection and probation should keep it to a few", n)
	}
	if v := testutilValue(p.srv.metrics.upstreamTimeouts.WithLabelValues("first_byte")); v < 1 {
		t.Errorf("upstream_timeouts_total{kind=first_byte} = %v, want the timeouts counted", v)
	}
}

// A stream that goes silent after its first chunk is ended after the stall
// timeout with an error event, not left open.
func TestAStalledStreamEndsWithAnErrorEvent(t *testing.T) {
	backend := stallingBackend(t, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n")
	p := startSolo(t, []string{backend.URL}, func(c *Config) { c.StallTimeout = 300 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+p.addr+"/v1/chat/completions",
		strings.NewReader(`{"stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("the stream did not end by itself: %v (read %q)", err, body)
	}
	if !strings.Contains(string(body), `"content":"a"`) || !strings.Contains(string(body), "stalled") || !strings.Contains(string(body), "upstream_error") {
		t.Errorf("stream %q: want the first chunk, then an upstream_error event saying it stalled", body)
	}
	if v := testutilValue(p.srv.metrics.upstreamTimeouts.WithLabelValues("stall")); v != 1 {
		t.Errorf("upstream_timeouts_total{kind=stall} = %v, want 1", v)
	}
}

// The client's credentials (Authorization, API-key headers, cookies,
// OpenAI organization and project) stay in its region unless the operator
// passes them on; the marker names the peer it was sent to.
func TestAForwardCarriesTheMarkerAndNotTheClientsKey(t *testing.T) {
	for _, pass := range []bool{false, true} {
		var got http.Header
		peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got = r.Header.Clone()
			_, _ = io.Copy(io.Discard, r.Body)
		}))
		cfg := DefaultConfig()
		cfg.Region, cfg.WorkerPool, cfg.ForwardAuthorization = "us-east", []string{"http://127.0.0.1:1"}, pass
		srv, err := New(cfg, Options{})
		if err != nil {
			t.Fatal(err)
		}
		body := []byte(`{"messages":[{"role":"user","content":"hi"}]}`)
		out := httptest.NewRequest("POST", "/v1/chat/completions", nil)
		for _, h := range CredentialHeaders {
			out.Header.Set(h, "secret-"+h)
		}
		x := &exchange{s: srv, req: &request.Request{ID: "us-east-1", Tenant: "addr-0a1b2c", Owner: "key-0a1b2c"}, body: body, outbound: out}
		o := routed{Attempt: &region.Attempt{}}
		o.Peer = &region.Peer{Region: "eu-west", APIAddrs: []string{peer.URL}}
		resp, err := x.send(context.Background(), o, body)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		peer.Close()
		for _, h := range []string{"Authorization", "Api-Key", "X-Api-Key", "Cookie", "OpenAI-Organization"} { // the probe's list
			if has := got.Get(h) != ""; has != pass {
				t.Errorf("forward_authorization=%v: the peer saw %s %q", pass, h, got.Get(h))
			}
		}
		m := got.Get(ForwardHeader)
		if f, err := srv.markers.verify(m, "eu-west", peer.URL, body, time.Now()); err != nil || f != (forward{"us-east", "eu-west", "us-east-1", "addr-0a1b2c", peer.URL, "key-0a1b2c"}) {
			t.Errorf("marker %q says %+v (%v); want origin, destination (region and proxy), id, the tenant (so the peer queues it fairly) and the owner (what its Responses ids are bound to)", m, f, err)
		}
	}
}

// slowHealthBackend serves chat and /metrics at once but takes 3 s to
// answer /health (past the check's 2 s timeout), as an engine whose
// health endpoint lags behind a busy loop does.
func slowHealthBackend(t *testing.T) *httptest.Server {
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		switch r.URL.Path {
		case "/health":
			select {
			case <-time.After(3 * time.Second):
			case <-r.Context().Done():
			}
		case "/metrics":
			http.NotFound(w, r) // answers: the server is up
		default:
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"choices":[{"message":{"content":"ok"}}],"usage":{"prompt_tokens":1,"completion_tokens":1}}`))
		}
	}))
	t.Cleanup(b.Close)
	return b
}

// TestAReplicaSlowToHealthButAnsweringStaysIn: an idle replica whose
// /health times out while it answers everything else is slow, not down:
// it stays in service through more failed checks than eject it, and
// serves the next request.
func TestAReplicaSlowToHealthButAnsweringStaysIn(t *testing.T) {
	t.Parallel() // it waits on time, not on the CPU: beside the others
	p := startSolo(t, []string{slowHealthBackend(t).URL}, nil)
	ejectAfter := DefaultConfig().EjectAfter
	testwait.Holds(t, time.Duration(ejectAfter+1)*healthTimeout+time.Second, "the replica stays in service", func() (bool, string) {
		return p.replica(0).Healthy, "ejected: its /health timed out while it answered its scrapes"
	})
	resp, err := http.Post("http://"+p.addr+"/v1/chat/completions", "application/json", strings.NewReader(`{"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("status %d, want 200 from the replica slow to /health", resp.StatusCode)
	}
}

// TestRequestsWaitingAtAnEjectedReplicaGoElsewhere: requests that are not
// streamed and set no max_tokens may wait minutes for their first byte (5
// s + 2,048 tokens at 100 ms). At a replica whose engine has died under
// them (it hangs every request, and its /health says 503) they do not:
// when the health checks eject it, those still waiting there are retried
// on the healthy replica at once.
func TestRequestsWaitingAtAnEjectedReplicaGoElsewhere(t *testing.T) {
	t.Parallel() // it waits on time, not on the CPU: beside the others
	var reached atomic.Int64
	dead := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/chat/completions":
			reached.Add(1)
			_, _ = io.Copy(io.Discard, r.Body)
			<-r.Context().Done()
		case "/health":
			if reached.Load() > 0 {
				http.Error(w, "engine dead", http.StatusServiceUnavailable)
			}
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(dead.Close)
	good, _ := countingBackend(t)
	p := startSolo(t, []string{dead.URL, good.URL}, nil)
	client := &http.Client{Timeout: time.Minute}
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[string]int{}
	for i := range 6 { // spread over both replicas: some wait at the dead one
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"messages":[{"role":"user","content":"question %d"}]}`, i)
			outcome := "no answer"
			if resp, err := client.Post("http://"+p.addr+"/v1/chat/completions", "application/json", strings.NewReader(body)); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				outcome = resp.Status
			}
			mu.Lock()
			defer mu.Unlock()
			statuses[outcome]++
		}()
	}
	wg.Wait()
	if reached.Load() == 0 {
		t.Fatal("no request reached the dead replica: the test tested nothing")
	}
	if statuses["200 OK"] != 6 {
		t.Errorf("how the requests ended: %v; want all 6 served within the client's minute", statuses)
	}
}

// TestATimeoutSaysWhichSettingToChange: a request that ends because its
// replica sent no first byte in time tells the client the time waited,
// how the timeout was set, and the setting for an engine slower than that.
func TestATimeoutSaysWhichSettingToChange(t *testing.T) {
	t.Parallel() // it waits on time, not on the CPU: beside the others
	tests := []struct {
		name       string
		configured time.Duration
		want       []string
	}{
		{"learned", 0, []string{"no first byte within 5s", "learned", "SKYWALKER_FIRST_BYTE_TIMEOUT"}},
		{"configured", 300 * time.Millisecond, []string{"no first byte within 300ms", "first_byte_timeout (SKYWALKER_FIRST_BYTE_TIMEOUT)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Three quick answers teach the proxy the replica's first-token
			// time (the timeout is then its floor); then it hangs.
			hung, _ := hangsAfterBackend(t, 3)
			p := startSolo(t, []string{hung.URL}, func(c *Config) { c.FirstByteTimeout, c.Retries = tc.configured, 0 })
			client := &http.Client{Timeout: time.Minute}
			post := func() (*http.Response, string) {
				resp, err := client.Post("http://"+p.addr+"/v1/chat/completions", "application/json",
					strings.NewReader(`{"stream":true,"messages":[{"role":"user","content":"hello"}]}`))
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				return resp, string(body)
			}
			for range 3 {
				if resp, body := post(); resp.StatusCode != 200 {
					t.Fatalf("a request before the replica hung: status %d %s", resp.StatusCode, body)
				}
			}
			resp, body := post()
			if resp.StatusCode != http.StatusBadGateway {
				t.Fatalf("status %d %s, want 502", resp.StatusCode, body)
			}
			for _, w := range tc.want {
				if !strings.Contains(body, w) {
					t.Errorf("the answer %s does not say %q", body, w)
				}
			}
		})
	}
}
