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
	backend := slowBackend(t, 200*time.Millisecond)
	p := startSolo(t, []string{backend.URL}, func(c *Config) {
		c.MaxInFlight, c.DrainTimeout, c.TTFTObjective = 1, 2*time.Second, 0
	})
	const n = 20
	type answer struct {
		status     int
		retryAfter string
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
			answers <- answer{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
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
	ok, unavailable := 0, 0
	for range n {
		a := <-answers
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
	if err := <-drained; err != nil {
		t.Errorf("drain: %v", err)
	}
}
