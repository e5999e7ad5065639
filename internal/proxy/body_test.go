package proxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"skywalker/internal/policy"
	"skywalker/internal/request"
	"skywalker/internal/testwait"
)

// serveOne starts one proxy in front of the given replicas, with the
// defaults changed by tune, and returns its address (host:port).
func serveOne(tb testing.TB, replicas []string, tune func(*Config)) string {
	tb.Helper()
	return startSolo(tb, replicas, tune).addr
}

// solo is one proxy serving on loopback.
type solo struct {
	addr  string
	srv   *Server
	drain func() error // ends serving as SIGTERM does and waits for the drain
}

func startSolo(tb testing.TB, replicas []string, tune func(*Config)) solo {
	tb.Helper()
	return startSoloWith(tb, replicas, tune, Options{})
}

func startSoloWith(tb testing.TB, replicas []string, tune func(*Config), opts Options) solo {
	tb.Helper()
	cfg := DefaultConfig()
	cfg.Region, cfg.WorkerPool, cfg.Listen = "solo", replicas, "127.0.0.1:0"
	cfg.DrainTimeout = 5 * time.Second // tests stop quickly (a half-second lame duck)
	if tune != nil {
		tune(&cfg)
	}
	srv, err := New(cfg, opts)
	if err != nil {
		tb.Fatal(err)
	}
	loops, stopLoops := context.WithCancel(context.Background())
	if err := srv.Start(loops); err != nil {
		tb.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	serving, stopServing := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(serving, l) }()
	var once sync.Once
	var drainErr error
	drain := func() error {
		once.Do(func() { stopServing(); drainErr = <-served })
		return drainErr
	}
	tb.Cleanup(func() { _ = drain(); stopLoops() })
	return solo{addr: l.Addr().String(), srv: srv, drain: drain}
}

// replica is the i-th replica as the policy sees it now.
func (p solo) replica(i int) policy.Replica {
	req := &request.Request{}
	base, _, _ := p.srv.router.resolve("") // the pool a request naming no model goes to
	req.SetPool(base, "")
	return p.srv.router.View(req).Local.Replicas[i]
}

// countingBackend answers every request with a small completion and counts
// the requests that reached it.
func countingBackend(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var n atomic.Int64
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/chat/completions" {
			n.Add(1)
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"choices":[{"message":{"content":"ok"}}],"usage":{"prompt_tokens":1,"completion_tokens":1}}`))
	}))
	t.Cleanup(b.Close)
	return b, &n
}

// readResponse reads one HTTP response from conn within a generous deadline.
func readResponse(t *testing.T, conn net.Conn) (*http.Response, string) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no response from the proxy within 30 s: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

// A body dribbled at 1 byte per 100 ms is cut off at its deadline with a
// 408: the proxy's goroutine and buffer are freed and nothing goes upstream.
func TestASlowBodyIsCutOffAtItsDeadline(t *testing.T) {
	t.Parallel() // it waits on time, not on the CPU: beside the others
	backend, upstream := countingBackend(t)
	addr := serveOne(t, []string{backend.URL}, func(c *Config) { c.BodyTimeout, c.MinBodyRate = 500*time.Millisecond, 1<<10 })
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for _, c := range []byte(`{"messages":[{"role":"user","content":"` + strings.Repeat("a", 1000)) {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := conn.Write([]byte{c}); err != nil {
				return
			}
		}
	}()
	start := time.Now()
	resp, body := readResponse(t, conn)
	if resp.StatusCode != 408 || !strings.Contains(body, "did not arrive in time") {
		t.Fatalf("status %d %s, want 408 saying the body did not arrive in time", resp.StatusCode, body)
	}
	if waited := time.Since(start); waited > 15*time.Second {
		t.Errorf("cut off after %v; the deadline was 0.5 s + 1 s per KiB received", waited)
	}
	if n := upstream.Load(); n != 0 {
		t.Errorf("%d requests reached the replica; a body that never arrived must not", n)
	}
}

// A body that turns invalid after 300 KB is a 400 naming the byte, sent
// before the client has finished, and nothing reaches the replica.
func TestABodyInvalidAfter300KBIsRefusedAtThatByte(t *testing.T) {
	backend, upstream := countingBackend(t)
	addr := serveOne(t, []string{backend.URL}, nil)
	good := `{"messages":[{"role":"user","content":"` + strings.Repeat("a", 300<<10)
	rest := strings.Repeat("b", 4<<20) + `"}]}`
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	go func() {
		fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s\x01", len(good)+1+len(rest), good)
		_, _ = io.WriteString(conn, rest) // fails once the proxy has answered and closed
	}()
	resp, body := readResponse(t, conn)
	if want := fmt.Sprintf("at byte %d: control character 0x01", len(good)); resp.StatusCode != 400 || !strings.Contains(body, want) {
		t.Fatalf("status %d %s, want 400 containing %q", resp.StatusCode, body, want)
	}
	if n := upstream.Load(); n != 0 {
		t.Errorf("%d requests reached the replica", n)
	}
}

// A marker captured on the inter-region hop is refused when replayed —
// with the same body or another — and the refusals from one source are
// logged once.
func TestAReplayedMarkerIsRefusedAndLoggedOnce(t *testing.T) {
	backend, _ := countingBackend(t)
	var logs bytes.Buffer
	var mu sync.Mutex
	p := startSoloWith(t, []string{backend.URL}, nil, Options{Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))})
	body := `{"messages":[{"role":"user","content":"forwarded"}]}`
	marker := SignMarker(p.srv, "us-east", "us-east-7", []byte(body))
	send := func(body string) int { return postChat(t, p.addr, body, map[string]string{ForwardHeader: marker}) }
	if s := send(body); s != 200 {
		t.Fatalf("the first use of a marker: status %d, want 200", s)
	}
	for i, b := range []string{body, `{"messages":[{"role":"user","content":"something else"}]}`, body, body} {
		if s := send(b); s != 403 {
			t.Errorf("replay %d: status %d, want 403", i, s)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(logs.String(), "forwarding marker refused"); n != 1 {
		t.Errorf("%d log lines for four refusals from one source, want 1:\n%s", n, logs.String())
	}
}

// postChat posts body to the proxy at addr's chat endpoint with header
// and returns the status.
func postChat(t *testing.T, addr, body string, header map[string]string) int {
	t.Helper()
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Past the body budget a request is refused 429 + Retry-After; a declared
// length that does not fit is refused before a byte of it is read.
func TestTheBodyBudgetRefusesWhatItCannotHold(t *testing.T) {
	backend, upstream := countingBackend(t)
	addr := serveOne(t, []string{backend.URL}, func(c *Config) { c.BodyBudget = 100 << 10 })
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", 200<<10)
	resp, body := readResponse(t, conn) // no body sent: the answer must not wait for it
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "body_budget") {
		t.Errorf("declared over the budget: status %d Retry-After %q %s; want 429 with a Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	// Chunked (no length declared): refused once what arrived passes it. The
	// body is written on a raw connection while the answer is read, because
	// the proxy answers and closes before the client has finished writing
	// (an http.Client would then report the reset, not the 429).
	chunked, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer chunked.Close()
	fmt.Fprintf(chunked, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
	go func() {
		big := `{"messages":[{"role":"user","content":"` + strings.Repeat("a", 300<<10) + `"}]}`
		for len(big) > 0 {
			n := min(len(big), 16<<10)
			if _, err := fmt.Fprintf(chunked, "%x\r\n%s\r\n", n, big[:n]); err != nil {
				return // refused: the proxy stopped reading, as it should
			}
			big = big[n:]
		}
		_, _ = io.WriteString(chunked, "0\r\n\r\n")
	}()
	if r2, _ := readResponse(t, chunked); r2.StatusCode != 429 {
		t.Errorf("chunked body over the budget: status %d, want 429", r2.StatusCode)
	}
	small := `{"messages":[{"role":"user","content":"hi"}]}`
	r3, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(small))
	if err != nil {
		t.Fatal(err)
	}
	r3.Body.Close()
	if r3.StatusCode != 200 || upstream.Load() != 1 {
		t.Errorf("a body within the budget: status %d, %d upstream; want it served (the refused ones gave their bytes back)", r3.StatusCode, upstream.Load())
	}
}

// When the body budget is full, a client under its fair share takes room
// from the clients over theirs: two addresses hold the whole budget with
// uploads that withhold their last byte; a third address's small request
// is served at once (one upload of the largest holder is cut 429, with a
// Retry-After, long before its body timeout), and a holder over its share
// asking for more waits (429). Before the budget was shared, the third
// address got 429 until the withheld uploads timed out.
func TestTheBodyBudgetIsSharedFairlyByAddress(t *testing.T) {
	backend, upstream := countingBackend(t)
	const upload = 1 << 20 // declared; charged BodyMemoryFactor times
	p := startSolo(t, []string{backend.URL}, func(c *Config) {
		c.BodyBudget, c.ClientBodyBudget = 4*BodyMemoryFactor*upload, 4*BodyMemoryFactor*upload
		c.BodyTimeout = 5 * time.Minute // the withheld uploads outlive the test unless cut
	})
	type answer struct {
		from   int
		status int
		body   string
	}
	answers := make(chan answer, 8)
	send := func(hog int) {
		conn, err := dialerFrom(net.IPv4(127, 0, 0, byte(hog))).Dial("tcp", p.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		go func() {
			prefix := `{"messages":[{"role":"user","content":"`
			_, _ = fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s%s", upload, prefix, strings.Repeat("a", upload-1-len(prefix)))
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Minute))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				return // the test ended
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			answers <- answer{hog, resp.StatusCode, string(body)}
		}()
	}
	for _, hog := range []int{3, 3, 4, 4} {
		send(hog)
	}
	testwait.Eventually(t, time.Minute, "the four withheld uploads to hold the whole budget", func() (bool, string) {
		n := p.srv.bodies.held()
		return n == 4*BodyMemoryFactor*upload, fmt.Sprintf("%d of %d bytes held", n, 4*BodyMemoryFactor*upload)
	})

	quiet := fromAddress(net.IPv4(127, 0, 0, 2))
	resp, err := quiet.Post("http://"+p.addr+"/v1/chat/completions", "application/json", strings.NewReader(`{"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || upstream.Load() != 1 {
		t.Fatalf("a third address while two hold the whole body budget: %d %s; want it served (room taken from the holders over their share)", resp.StatusCode, body)
	}
	select {
	case a := <-answers:
		if a.status != 429 || !strings.Contains(a.body, "share") {
			t.Errorf("the upload cut to make room: from 127.0.0.%d %d %s; want 429 naming the share", a.from, a.status, a.body)
		}
	case <-time.After(time.Minute):
		t.Fatal("no withheld upload was cut to make room within a minute (the body timeout is 5 minutes)")
	}
	select {
	case a := <-answers:
		t.Errorf("a second upload answered (127.0.0.%d: %d %s); want one cut, the rest still held", a.from, a.status, a.body)
	default:
	}
	// A holder over its share that asks for more is refused, and cuts nothing.
	conn, err := dialerFrom(net.IPv4(127, 0, 0, 4)).Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", 2*upload)
	if r, b := readResponse(t, conn); r.StatusCode != 429 || r.Header.Get("Retry-After") == "" {
		t.Errorf("a holder over its share asking for more: %d %s; want 429 with a Retry-After", r.StatusCode, b)
	}
	select {
	case a := <-answers:
		t.Errorf("a holder's request over its share cut an upload (127.0.0.%d: %d %s)", a.from, a.status, a.body)
	default:
	}
}

// 100 clients that declare 16 MiB bodies and send a trickle: the proxy's
// memory grows with what arrived, not with what was declared.
func TestDeclaredButUnsentBodiesCostLittleMemory(t *testing.T) {
	backend, _ := countingBackend(t)
	p := startSolo(t, []string{backend.URL}, nil)
	addr := p.addr
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 100 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n{\"messages\":[{\"role\":\"user\",\"content\":\"%s", 16<<20, strings.Repeat("a", 1000))
	}
	var after runtime.MemStats
	testwait.Eventually(t, 30*time.Second, "the proxy to read what the 100 clients sent", func() (bool, string) {
		n := p.srv.bodies.held()
		return n >= 100*1000, fmt.Sprintf("%d bytes of bodies held", n)
	})
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapInuse) - int64(before.HeapInuse); grew > 100<<20 {
		t.Errorf("heap grew %d MiB for 100 declared 16 MiB bodies of which 1 KB arrived; want at most 100", grew>>20)
	} else {
		t.Logf("heap grew %d MiB for 100 declared 16 MiB bodies (1 KB each arrived)", grew>>20)
	}
}

// 2,000 idle keep-alive connections are closed by the idle timeout.
func TestIdleConnectionsAreClosed(t *testing.T) {
	backend, _ := countingBackend(t)
	addr := serveOne(t, []string{backend.URL}, func(c *Config) { c.IdleTimeout = 300 * time.Millisecond })
	n := 2000
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < 3*uint64(n) {
		n = int(lim.Cur / 3) // both ends of each connection are in this process
		t.Logf("open-file limit %d: %d connections", lim.Cur, n)
	}
	var conns []net.Conn
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
		fmt.Fprintf(c, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp, _ := readResponse(t, c); resp.StatusCode != 200 {
			t.Fatalf("health: %d", resp.StatusCode)
		}
	}
	for i, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if n, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("connection %d: read %d bytes, err %v; want the server to have closed it (EOF) by the idle timeout", i, n, err)
		}
	}
}

// A forwarded request keeps the class and engine priority its origin
// admitted: a region whose own clients may not ask for critical or a
// priority serves its peers' critical requests; its own client asking
// for the same is refused 400.
func TestAForwardKeepsTheClassItsOriginAdmitted(t *testing.T) {
	backend, _ := countingBackend(t)
	p := startSolo(t, []string{backend.URL}, nil) // defaults: standard at most, priority 0 only
	body := `{"priority":5,"messages":[{"role":"user","content":"urgent"}]}`
	send := func(marker string) int {
		h := map[string]string{PriorityHeader: "critical"}
		if marker != "" {
			h[ForwardHeader] = marker
		}
		return postChat(t, p.addr, body, h)
	}
	if s := send(SignMarker(p.srv, "us-east", "us-east-critical", []byte(body))); s != 200 {
		t.Errorf("a peer's critical request with priority 5: status %d, want 200", s)
	}
	if s := send(""); s != 400 {
		t.Errorf("a client's own critical request with priority 5: status %d, want 400", s)
	}
}

// A forward from a region whose clock runs 30 s ahead is refused while
// the offset is unknown, and taken once the mesh has measured it: the
// marker's time is read through the origin's clock.
func TestAMarkerIsReadThroughItsOriginsClock(t *testing.T) {
	t.Parallel() // it waits on time, not on the CPU: beside the others
	const ahead = 30 * time.Second
	backend, _ := countingBackend(t)
	body := `{"messages":[{"role":"user","content":"from a skewed clock"}]}`
	send := func(p solo, id string) int {
		marker := p.srv.markers.sign(forward{Origin: "us-east", Dest: p.srv.cfg.Region, DestProxy: p.srv.cfg.AdvertiseURL, ID: id}, []byte(body), time.Now().Add(ahead))
		return postChat(t, p.addr, body, map[string]string{ForwardHeader: marker})
	}
	unmeasured := startSolo(t, []string{backend.URL}, nil)
	if s := send(unmeasured, "skewed-1"); s != 403 {
		t.Errorf("a marker 30 s ahead with no measured offset: status %d, want 403", s)
	}
	measured := startSoloWith(t, []string{backend.URL}, nil, Options{Peers: staticPeers{{Region: "us-east", Healthy: true, Nodes: 1, ClockOffset: ahead}}})
	measured.srv.router.Pump()
	if s := send(measured, "skewed-2"); s != 200 {
		t.Errorf("a marker 30 s ahead from a region measured 30 s ahead: status %d, want 200", s)
	}
}
