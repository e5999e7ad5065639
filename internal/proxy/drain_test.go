package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"skywalker/internal/testwait"
)

// slowBackend serves one request at a time, each taking d.
func slowBackend(t *testing.T, d time.Duration) *httptest.Server {
	var busy atomic.Bool
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		if !busy.CompareAndSwap(false, true) {
			t.Errorf("the proxy sent a second request to a one-slot replica")
		}
		time.Sleep(d)
		busy.Store(false)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"choices":[{"message":{"content":"ok"}}],"usage":{"prompt_tokens":1,"completion_tokens":1}}`))
	}))
	t.Cleanup(b.Close)
	return b
}

// SIGTERM with one request in flight and the rest held: the proxy tells
// its peers at once, keeps serving what it holds, and answers what it
// cannot finish before its deadline with 503 and a Retry-After. No request
// is cut off without a status.
func TestADrainServesOrAnswersEveryRequestItHolds(t *testing.T) {
	t.Parallel() // it waits on time, not on the CPU: beside the others
	backend := slowBackend(t, 200*time.Millisecond)
	p := startSolo(t, []string{backend.URL}, func(c *Config) {
		c.MaxInFlight, c.DrainTimeout, c.TTFTObjective = 1, 2*time.Second, 0
	})
	const n = 20
	type answer struct {
		status     int
		retryAfter string
		closed     bool // the proxy asked the client to close the connection after it
		err        error
	}
	answers := make(chan answer, n)
	for i := range n {
		go func() {
			resp, err := http.Post("http://"+p.addr+"/v1/chat/completions", "application/json",
				strings.NewReader(fmt.Sprintf(`{"messages":[{"role":"user","content":"request %d"}]}`, i)))
			if err != nil {
				answers <- answer{err: err}
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			answers <- answer{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), closed: resp.Close}
		}()
	}
	testwait.Eventually(t, 30*time.Second, "all but one request held", func() (bool, string) {
		q := p.srv.QueueLength()
		return q == n-1, fmt.Sprintf("%d of %d held", q, n-1)
	})
	drained := make(chan error, 1)
	go func() { drained <- p.drain() }()
	testwait.Eventually(t, 10*time.Second, "the load summary to say draining", func() (bool, string) {
		return p.srv.Router().Load().Draining, "Load().Draining is false"
	})
	ok, unavailable, closed := 0, 0, 0
	for range n {
		a := <-answers
		if a.closed {
			closed++
		}
		switch {
		case a.err != nil:
			t.Errorf("a request got no status: %v", a.err)
		case a.status == 200:
			ok++
		case a.status == 503 && a.retryAfter != "":
			unavailable++
		default:
			t.Errorf("status %d (Retry-After %q); want 200, or 503 with a Retry-After", a.status, a.retryAfter)
		}
	}
	if ok < 2 || ok+unavailable != n {
		t.Errorf("%d served, %d answered 503 of %d; the drain should serve what it can in time and answer the rest", ok, unavailable, n)
	}
	// Every answer given while draining (all but, perhaps, the one in
	// flight when it began) asks the client to reconnect elsewhere.
	if closed < n-1 {
		t.Errorf("%d of %d answers carried Connection: close; want every one given while draining", closed, n)
	}
	if err := <-drained; err != nil {
		t.Errorf("drain: %v", err)
	}
}

// What is in flight when the drain deadline nears is ended with what the
// client can act on: a request nothing was sent for yet is answered 503
// with a Retry-After, a stream that had begun ends with an error event,
// and the replica is not blamed for it. Without this the server's final
// close cut both off with no word.
func TestADrainEndsWhatIsStillInFlightWithAStatusOrAnErrorEvent(t *testing.T) {
	t.Parallel() // it waits on time, not on the CPU: beside the others
	// A very long answer; one failure would eject the replica.
	engine := stallingBackend(t, "data: {\"choices\":[{\"delta\":{\"content\":\"once\"}}]}\n\n")
	p := startSolo(t, []string{engine.URL}, func(c *Config) { c.DrainTimeout, c.EjectAfter = 2*time.Second, 1 })
	tests := []struct {
		name   string
		stream bool
	}{
		{"not streamed, nothing sent yet", false},
		{"a stream that had begun", true},
	}
	type answer struct {
		status     int
		retryAfter string
		body       string
		err        error
	}
	answers := make([]chan answer, len(tests))
	for i, tc := range tests {
		answers[i] = make(chan answer, 1)
		go func() {
			resp, err := http.Post("http://"+p.addr+"/v1/chat/completions", "application/json",
				strings.NewReader(fmt.Sprintf(`{"messages":[{"role":"user","content":"hi"}],"stream":%v}`, tc.stream)))
			if err != nil {
				answers[i] <- answer{err: err}
				return
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			answers[i] <- answer{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), body: string(body), err: err}
		}()
	}
	testwait.Eventually(t, 30*time.Second, "both requests in flight at the engine", func() (bool, string) {
		n := p.replica(0).InFlight
		return n == 2, fmt.Sprintf("%d in flight", n)
	})
	if err := p.drain(); err != nil {
		t.Errorf("drain: %v", err)
	}
	for i, tc := range tests {
		a := <-answers[i]
		switch {
		case a.err != nil:
			t.Errorf("%s: cut off without a word: %v (read %q)", tc.name, a.err, a.body)
		case !tc.stream && (a.status != 503 || a.retryAfter == "" || !strings.Contains(a.body, "shutting down")):
			t.Errorf("%s: status %d, Retry-After %q, body %q; want 503 saying the proxy is shutting down, with a Retry-After", tc.name, a.status, a.retryAfter, a.body)
		case tc.stream && (a.status != 200 || !strings.Contains(a.body, `"code":"service_unavailable"`) || !strings.Contains(a.body, "shutting down")):
			t.Errorf("%s: status %d, body %q; want the stream ended by a service_unavailable error event", tc.name, a.status, a.body)
		}
	}
	if !p.replica(0).Healthy {
		t.Error("the replica was blamed for the requests the drain ended")
	}
}
