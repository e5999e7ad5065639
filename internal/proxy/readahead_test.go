package proxy

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"skywalker/internal/testwait"
)

// longStream answers a streamed chat request with events of about 1 KiB
// each, as fast as the connection takes them, then [DONE]; finished
// closes when the engine is done.
func longStream(t *testing.T, events int) (url string, finished <-chan struct{}) {
	done := make(chan struct{})
	var once sync.Once
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		defer once.Do(func() { close(done) })
		w.Header().Set("Content-Type", "text/event-stream")
		word := strings.Repeat("x", 1000)
		for i := range events {
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"%d%s\"}}]}\n\n", i, word)
			w.(http.Flusher).Flush()
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(b.Close)
	return b.URL, done
}

// stuckClient is a client connection that takes its first freeWrites
// writes and then stops reading: a write blocks until released, or fails
// as a real connection's would once the write deadline the server set
// passes.
type stuckClient struct {
	header     http.Header
	release    chan struct{}
	freeWrites int

	mu       sync.Mutex
	deadline time.Time
	writes   int
	got      bytes.Buffer
	status   int
}

func newStuckClient(freeWrites int) *stuckClient {
	return &stuckClient{header: http.Header{}, release: make(chan struct{}), freeWrites: freeWrites}
}

func (c *stuckClient) Header() http.Header { return c.header }

func (c *stuckClient) WriteHeader(code int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.status == 0 {
		c.status = code
	}
}

func (c *stuckClient) Write(p []byte) (int, error) {
	c.WriteHeader(http.StatusOK)
	c.mu.Lock()
	c.writes++
	stuck, deadline := c.writes > c.freeWrites, c.deadline
	c.mu.Unlock()
	if stuck {
		var expired <-chan time.Time
		if !deadline.IsZero() {
			expired = time.After(time.Until(deadline))
		}
		select {
		case <-c.release:
		case <-expired:
			return 0, os.ErrDeadlineExceeded
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.got.Write(p)
}

func (c *stuckClient) FlushError() error { return nil }

func (c *stuckClient) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deadline = t
	return nil
}

func (c *stuckClient) received() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.got.String()
}

// serveStuck runs one streamed chat request through the proxy's handler
// to client; the channel closes when the handler has returned.
func serveStuck(p solo, client *stuckClient) <-chan struct{} {
	returned := make(chan struct{})
	req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"a long answer, please"}]}`))
	req.Header.Set("Content-Type", "application/json")
	go func() {
		defer close(returned)
		p.srv.Handler().ServeHTTP(client, req)
	}()
	return returned
}

// TestASlowClientDoesNotHoldTheEngine: a client that takes the first
// chunk of a 256 KiB stream and then reads nothing does not keep the
// replica's slot: the proxy reads the stream ahead, the attempt ends when
// the engine is done, and the client, once it reads again, still gets
// every byte through [DONE].
func TestASlowClientDoesNotHoldTheEngine(t *testing.T) {
	backend, finished := longStream(t, 256)
	p := startSolo(t, []string{backend}, nil)
	client := newStuckClient(1)
	returned := serveStuck(p, client)

	testwait.Eventually(t, 30*time.Second, "the engine finishes its stream", func() (bool, string) {
		select {
		case <-finished:
			return true, ""
		default:
			return false, "the engine is still writing"
		}
	})
	testwait.Eventually(t, 30*time.Second, "the replica's slot frees while the client is not reading", func() (bool, string) {
		r := p.replica(0)
		return r.InFlight == 0, fmt.Sprintf("%d in flight at the replica; the client has %d bytes", r.InFlight, len(client.received()))
	})
	close(client.release)
	select {
	case <-returned:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler did not return within 30 s of the client reading again")
	}
	got := client.received()
	if !strings.HasSuffix(got, "data: [DONE]\n\n") || strings.Count(got, "data: {") != 256 {
		t.Fatalf("the client got %d events and %d bytes, ending %q; want all 256 and [DONE]", strings.Count(got, "data: {"), len(got), got[max(len(got)-40, 0):])
	}
	// The read-ahead goroutine gives its bytes back as it ends, which
	// can be just after the handler returns.
	testwait.Eventually(t, 30*time.Second, "no bytes counted as read ahead after the response", func() (bool, string) {
		n := p.srv.readAheadHeld.Load()
		return n == 0, fmt.Sprintf("%d bytes still counted", n)
	})
	if n := testutilValue(p.srv.metrics.requests.WithLabelValues("solo", "solo", "ok")); n != 1 {
		t.Errorf("requests ok = %v, want 1", n)
	}
}

// TestAClientThatNeverReadsIsCut: a client that stops reading a stream
// longer than the read-ahead buffer is cut after write_timeout, its
// request counted cancelled and the slot freed.
func TestAClientThatNeverReadsIsCut(t *testing.T) {
	backend, _ := longStream(t, 4096) // 4 MiB: more than the 1 MiB buffer
	p := startSolo(t, []string{backend}, func(c *Config) {
		c.WriteTimeout, c.ResponseBuffer = 300*time.Millisecond, 1<<20
	})
	client := newStuckClient(1)
	returned := serveStuck(p, client)
	select {
	case <-returned:
	case <-time.After(60 * time.Second):
		t.Fatalf("a client that stopped reading was not cut within 60 s (write_timeout 300ms); it has %d bytes", len(client.received()))
	}
	testwait.Eventually(t, 30*time.Second, "the replica's slot frees", func() (bool, string) {
		r := p.replica(0)
		return r.InFlight == 0, fmt.Sprintf("%d in flight at the replica", r.InFlight)
	})
	if n := testutilValue(p.srv.metrics.requests.WithLabelValues("solo", "solo", "cancelled")); n != 1 {
		t.Errorf("requests cancelled = %v, want 1", n)
	}
	// The read-ahead goroutine gives its bytes back as it ends, which
	// can be just after the handler returns.
	testwait.Eventually(t, 30*time.Second, "no bytes counted as read ahead after the cut", func() (bool, string) {
		n := p.srv.readAheadHeld.Load()
		return n == 0, fmt.Sprintf("%d bytes still counted", n)
	})
}

// TestAClientThatStopsReadingIsNotTheEnginesStall: a client that stops
// reading a long stream fills the read-ahead buffer and the proxy stops
// reading the engine; that quiet is the client's doing. The stall timeout
// (short here) does not fire while the client is behind; the client is
// cut at the write timeout and the request counts as cancelled, never as
// the engine's failure.
func TestAClientThatStopsReadingIsNotTheEnginesStall(t *testing.T) {
	t.Parallel() // it waits on time, not on the CPU: beside the others

	backend, _ := longStream(t, 4096) // 4 MiB: more than the 64 KiB buffer
	p := startSolo(t, []string{backend}, func(c *Config) {
		c.WriteTimeout, c.ResponseBuffer, c.StallTimeout = 3*time.Second, 64<<10, 200*time.Millisecond
	})
	client := newStuckClient(1)
	returned := serveStuck(p, client)
	select {
	case <-returned:
	case <-time.After(60 * time.Second):
		t.Fatalf("a client that stopped reading was not cut within 60 s (write_timeout 3s); it has %d bytes", len(client.received()))
	}
	testwait.Eventually(t, 30*time.Second, "the request to be counted", func() (bool, string) {
		cancelled := testutilValue(p.srv.metrics.requests.WithLabelValues("solo", "solo", "cancelled"))
		failed := testutilValue(p.srv.metrics.requests.WithLabelValues("solo", "solo", "failed_midstream"))
		return cancelled+failed == 1, fmt.Sprintf("cancelled %v, failed midstream %v", cancelled, failed)
	})
	if n := testutilValue(p.srv.metrics.requests.WithLabelValues("solo", "solo", "cancelled")); n != 1 {
		t.Errorf("a client that stopped reading: cancelled = %v, want 1 (the client's doing, not the engine's)", n)
	}
	if n := testutilValue(p.srv.metrics.upstreamTimeouts.WithLabelValues("stall")); n != 0 {
		t.Errorf("stall timeouts = %v while only the client was behind, want 0", n)
	}
}

// blockingSource is an upstream body whose Read waits for release, then
// returns n bytes.
type blockingSource struct {
	reading chan struct{} // closed when the first Read began
	release chan struct{}
	n       int
	once    sync.Once
}

func (b *blockingSource) Read(p []byte) (int, error) {
	b.once.Do(func() { close(b.reading) })
	<-b.release
	return copy(p, make([]byte, b.n)), nil
}

func (b *blockingSource) Close() error { return nil }

// TestBytesReadAfterCloseAreNotCounted: a read under way when the body is
// closed (a client cut while the pump waits on the engine) brings bytes
// nobody will take: they are not counted against the read-ahead budget.
func TestBytesReadAfterCloseAreNotCounted(t *testing.T) {
	s := &Server{cfg: DefaultConfig()}
	x := &exchange{s: s, abandon: func(error) {}}
	src := &blockingSource{reading: make(chan struct{}), release: make(chan struct{}), n: 1000}
	r := newReadAhead(x, src)
	go func() { _, _ = r.Read(make([]byte, 10)) }() // starts the pump, which waits in src.Read
	<-src.reading
	closed := make(chan struct{})
	go func() { _ = r.Close(); close(closed) }()
	testwait.Eventually(t, 10*time.Second, "Close marks the body closed", func() (bool, string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.closed, "not closed yet"
	})
	close(src.release)
	<-closed
	if n := s.readAheadHeld.Load(); n != 0 {
		t.Errorf("%d bytes read after Close are counted as read ahead", n)
	}
}
