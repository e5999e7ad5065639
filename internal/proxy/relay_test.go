package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"skywalker/internal/policy"
	"skywalker/internal/profile"
	"skywalker/internal/region"
	"skywalker/internal/testwait"
)

// TestTheReplicaIsFreeOnceTheClientHasItsAnswer: the replica's slot frees
// when the engine is done — the body's end, or [DONE] in a stream — before
// the last bytes reach the client, so a client that sends its next turn
// the moment it has this answer finds the replica free. An engine that
// keeps a stream's connection open after [DONE] must not keep the slot.
func TestTheReplicaIsFreeOnceTheClientHasItsAnswer(t *testing.T) {
	t.Parallel() // it waits on time, not on the CPU: beside the others
	whole, _ := countingBackend(t)
	lingering := stallingBackend(t, "data: {\"choices\":[{\"delta\":{\"content\":\"ok\"}}]}\n\ndata: [DONE]\n\n")
	tests := []struct {
		name   string
		engine string
		stream bool
		until  string // the client stops reading here and checks
	}{
		{"whole body with a Content-Length", whole.URL, false, `"completion_tokens":1}}`},
		{"stream held open after [DONE]", lingering.URL, true, "data: [DONE]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := startSolo(t, []string{tc.engine}, nil)
			body := fmt.Sprintf(`{"messages":[{"role":"user","content":"hi"}],"max_tokens":1,"stream":%v}`, tc.stream)
			resp, err := http.Post("http://"+p.addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var got strings.Builder
			rd := bufio.NewReader(resp.Body)
			deadline := time.Now().Add(30 * time.Second)
			for !strings.Contains(got.String(), tc.until) {
				if time.Now().After(deadline) {
					t.Fatalf("no %q from the proxy within 30 s; read %q", tc.until, got.String())
				}
				b, err := rd.ReadByte()
				if err != nil {
					t.Fatalf("the answer ended before %q: %v; read %q", tc.until, err, got.String())
				}
				got.WriteByte(b)
			}
			if n := p.replica(0).InFlight; n != 0 {
				t.Errorf("the client has its whole answer, but the replica still counts %d in flight", n)
			}
		})
	}
}

// staticPeers is a mesh that always reports the same peers.
type staticPeers []region.Peer

func (p staticPeers) Peers() []region.Peer { return p }

// A request forwarded to a peer that refuses it — overloaded (503, 429),
// a model it does not serve (404), a marker it found late (403), a limit
// of its own (400) — is routed again and served here as this region's own
// request: the client never sees the peer's refusal, its route reason is
// the local rule's (not forwarded-in, which the client's header used to
// say), and it counts in this region's demand (`plan --from` used to miss
// every failed forward).
func TestAFailedForwardIsServedHereAsALocalRequest(t *testing.T) {
	t.Parallel() // it waits on time, not on the CPU: beside the others
	for _, status := range []int{503, 429, 404, 403, 400} {
		t.Run(http.StatusText(status), func(t *testing.T) { forwardRefused(t, status) })
	}
}

// busyWithIdlePeer starts a proxy whose one replica (one slot) is taken
// and held by a first streamed request, and whose idle peer eu-west is
// served by peer: the next request is forwarded. post sends one like it;
// release frees the local slot.
func busyWithIdlePeer(t *testing.T, peer http.HandlerFunc) (p solo, post func() (*http.Response, error), first *http.Response, release func()) {
	local, release := heldBackend(t)
	ps := httptest.NewServer(peer)
	t.Cleanup(ps.Close)
	prof, _ := profile.Lookup("llama3-8b-a100")
	peers := staticPeers{{Region: "eu-west", Healthy: true, Nodes: 1, APIAddrs: []string{ps.URL}, RTT: 20 * time.Millisecond,
		GateOpen: true, Load: region.Load{Replicas: 4, Slots: 32, Prefill: policy.PrefillOf(prof)}}}
	p = startSoloWith(t, []string{local}, func(c *Config) { c.MaxInFlight, c.Profile = 1, prof.Name }, Options{Peers: peers})
	post = func() (*http.Response, error) {
		return http.Post("http://"+p.addr+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":200,"stream":true}`))
	}
	first, err := post() // takes the only slot, and holds it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { first.Body.Close() })
	return p, post, first, release
}

// postAnswer is what a request sent in the background got.
type postAnswer struct {
	resp *http.Response
	err  error
}

// inBackground sends post once and delivers its answer.
func inBackground(post func() (*http.Response, error)) <-chan postAnswer {
	c := make(chan postAnswer, 1)
	go func() { r, err := post(); c <- postAnswer{r, err} }()
	return c
}

// releaseAndAwait frees the local slot, reads the first request to its
// end and returns the answer to the request sent in the background.
func releaseAndAwait(t *testing.T, release func(), first *http.Response, second <-chan postAnswer) *http.Response {
	t.Helper()
	release()
	_, _ = io.Copy(io.Discard, first.Body)
	select {
	case a := <-second:
		if a.err != nil {
			t.Fatal(a.err)
		}
		return a.resp
	case <-time.After(30 * time.Second):
		t.Fatal("the second request got no answer within 30 s of the local slot freeing")
	}
	return nil
}

func forwardRefused(t *testing.T, status int) {
	var peerHits atomic.Int64
	p, post, first, release := busyWithIdlePeer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		peerHits.Add(1)
		http.Error(w, `{"error":{"message":"refused by the peer"}}`, status)
	})
	if reason := first.Header.Get("X-SkyWalker-Route-Reason"); first.StatusCode != 200 || first.Header.Get("X-SkyWalker-Region") != "solo" {
		t.Fatalf("the first request: %d, reason %q; want served here", first.StatusCode, reason)
	}
	second := inBackground(post)
	deadline := time.Now().Add(30 * time.Second)
	for peerHits.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the second request was not forwarded to the idle peer within 30 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	resp := releaseAndAwait(t, release, first, second)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	reason := resp.Header.Get("X-SkyWalker-Route-Reason")
	if resp.StatusCode != 200 || resp.Header.Get("X-SkyWalker-Region") != "solo" || reason == string(policy.ReasonForwarded) || reason == "" {
		t.Errorf("after the failed forward: %d served in %q, reason %q: want 200 here with the local rule's reason; body %s",
			resp.StatusCode, resp.Header.Get("X-SkyWalker-Region"), reason, body)
	}
	rep := p.srv.demand.report()
	var n int64
	for _, h := range rep.Hours {
		n += h.Requests
	}
	if n != 2 {
		t.Errorf("demand counts %d requests, want both (the failed forward's too)", n)
	}
}

// With no healthy replica and no peer, a request is answered 503 with a
// Retry-After at once, as the README says — not held until it is shed.
func TestNoHealthyReplicaIsA503AtOnce(t *testing.T) {
	t.Parallel() // it waits on time, not on the CPU: beside the others
	dead := httptest.NewServer(http.NotFoundHandler())
	url := dead.URL
	dead.Close() // nothing listens: health checks and requests fail
	p := startSolo(t, []string{url}, nil)
	testwait.Eventually(t, 30*time.Second, "the dead replica to be ejected", func() (bool, string) {
		n := p.srv.HealthyReplicas()
		return n == 0, fmt.Sprintf("%d healthy", n)
	})
	resp, err := http.Post("http://"+p.addr+"/v1/chat/completions", "application/json", strings.NewReader(`{"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "no healthy replica") {
		t.Errorf("no healthy replica: %d (Retry-After %q) %s; want 503 naming it, with a Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
}

// A peer's jurisdiction is what the operator granted it, not what it
// claims: a member that claims "eu" gets no EU-resident request unless
// peer_jurisdictions grants it eu.
func TestAClaimedJurisdictionIsNotTrusted(t *testing.T) {
	t.Parallel() // it waits on time, not on the CPU: beside the others
	for _, granted := range []bool{false, true} {
		var peerHits atomic.Int64
		peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			peerHits.Add(1)
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"choices":[{"message":{"role":"assistant","content":"ok"}}]}`)
		}))
		backend, _ := countingBackend(t)
		peers := staticPeers{{Region: "eu-west", Jurisdiction: "eu", Healthy: true, Nodes: 1, APIAddrs: []string{peer.URL}, RTT: 20 * time.Millisecond,
			GateOpen: true, Load: region.Load{Replicas: 4, Slots: 32}}}
		p := startSoloWith(t, []string{backend.URL}, func(c *Config) {
			c.Jurisdiction = "us"
			if granted {
				c.PeerJurisdictions = map[string]string{"eu-west": "eu"}
			}
		}, Options{Peers: peers})
		req, _ := http.NewRequest("POST", "http://"+p.addr+"/v1/chat/completions", strings.NewReader(`{"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("X-Data-Residency", "eu")
		var resp *http.Response
		testwait.Eventually(t, 30*time.Second, "the router to see the peer", func() (bool, string) {
			if len(p.srv.router.snapshot().Peers) == 1 {
				return true, ""
			}
			p.srv.router.Pump()
			return false, "no peer in the router's view"
		})
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		peer.Close()
		switch {
		case !granted && (peerHits.Load() != 0 || resp.StatusCode != 503):
			t.Errorf("not granted: the claiming peer got %d EU-resident requests, the client %d; want none, and 503", peerHits.Load(), resp.StatusCode)
		case granted && (peerHits.Load() != 1 || resp.StatusCode != 200):
			t.Errorf("granted eu: the peer got %d, the client %d; want it forwarded and served", peerHits.Load(), resp.StatusCode)
		}
	}
}

// The outbound request carries the client's end-to-end headers only: the
// hop-by-hop ones (and those Connection names), the forwarding marker and
// the X-Forwarded-* a client could forge are dropped; "TE: trailers" and
// everything else pass.
func TestTheOutboundRequestDropsHopByHopHeaders(t *testing.T) {
	in := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader("{}"))
	for name, v := range map[string]string{
		"Connection": "keep-alive, X-Hop", "X-Hop": "1", "Keep-Alive": "timeout=5", "Proxy-Connection": "keep-alive",
		"Upgrade": "h2c", "Transfer-Encoding": "chunked", "Te": "trailers, gzip", ForwardHeader: "forged",
		"X-Forwarded-For": "10.0.0.1", "Forwarded": "for=10.0.0.1", "Authorization": "Bearer k", "X-Session-Id": "s-1",
	} {
		in.Header.Set(name, v)
	}
	out := outboundRequest(context.Background(), in)
	for _, gone := range []string{"Connection", "X-Hop", "Keep-Alive", "Proxy-Connection", "Upgrade", "Transfer-Encoding", ForwardHeader, "X-Forwarded-For", "Forwarded"} {
		if v := out.Header.Get(gone); v != "" {
			t.Errorf("%s: %q went upstream", gone, v)
		}
	}
	for name, want := range map[string]string{"Te": "trailers", "Authorization": "Bearer k", "X-Session-Id": "s-1"} {
		if got := out.Header.Get(name); got != want {
			t.Errorf("%s: %q upstream, want %q", name, got, want)
		}
	}
	if out.Body != nil || out.RequestURI != "" || in.Header.Get("Connection") == "" {
		t.Error("the outbound request keeps the client's body or request URI, or changed the client's headers")
	}
}

// A forward that gets no first byte by its deadline is cut: the peer sees
// its request cancelled at once (the closed connection: a peer proxy
// cancels its engine's request the same way), the cut is counted in
// skywalker_forward_wasted_total{why="first_byte_timeout"}, and the
// request is served here.
func TestAForwardCutAtItsDeadlineIsCancelledAtThePeerAndCounted(t *testing.T) {
	t.Parallel() // it waits on time, not on the CPU: beside the others
	arrived, cancelled := make(chan time.Time, 4), make(chan time.Time, 4)
	p, post, first, release := busyWithIdlePeer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		arrived <- time.Now()
		<-r.Context().Done() // swallows it: computes, answers nothing
		cancelled <- time.Now()
	})
	second := inBackground(post)
	var sent, cut time.Time
	select {
	case sent = <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("the second request was not forwarded to the idle peer within 30 s")
	}
	select {
	case cut = <-cancelled:
	case <-time.After(region.MaxFirstTokenTimeout):
		t.Fatalf("the forward was not cancelled at the peer within %v of reaching it", region.MaxFirstTokenTimeout)
	}
	if waited := cut.Sub(sent); waited < region.MinFirstTokenTimeout/2 {
		t.Errorf("the forward was cancelled %v after it reached the peer; its deadline is at least %v", waited, region.MinFirstTokenTimeout)
	}
	testwait.Eventually(t, 30*time.Second, "skywalker_forward_wasted_total{peer=eu-west,why=first_byte_timeout} to count the cut forward", func() (bool, string) {
		v := testutilValue(p.srv.metrics.forwardWasted.WithLabelValues("eu-west", "first_byte_timeout"))
		return v == 1, fmt.Sprintf("it is %v", v)
	})
	resp := releaseAndAwait(t, release, first, second)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-SkyWalker-Region") != "solo" {
		t.Errorf("after the cut forward: %d served in %q, want 200 here", resp.StatusCode, resp.Header.Get("X-SkyWalker-Region"))
	}
}
