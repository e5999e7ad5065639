package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"skywalker/internal/engine"
	"skywalker/internal/engine/server"
	"skywalker/internal/policy"
	"skywalker/internal/profile"
	"skywalker/internal/region"
	"skywalker/internal/testwait"
)

// The chaos suite reproduces, against simulated engines on loopback, the
// faults an adversarial probe found (shutdown with requests held, engines
// that hang or stall, slow uploads, an engine killed mid-stream) and
// counts how each request ended. Lost means the client got no status, or a
// stream cut off without an error event: the one outcome that must never
// happen. `go test ./internal/proxy -run Chaos -v` prints the table the
// README quotes; -short skips it.

// simEngine is one simulated engine on loopback; kill closes it and every
// connection it holds, as SIGKILL would.
func simEngine(t *testing.T, faults server.Faults) (url string, kill func()) {
	t.Helper()
	p, err := profile.Lookup("llama3-8b-a100")
	if err != nil {
		t.Fatal(err)
	}
	e, err := server.StartLoopback(server.Config{Model: "m", TimeScale: 4, Engine: engine.Config{Profile: p}, Faults: faults, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Kill)
	return e.URL, e.Kill
}

// ending is how one request ended, as its client saw it.
type ending int

const (
	served     ending = iota // 200, the whole response (a stream through [DONE])
	answered                 // an OpenAI-style error with its status (429/503 with Retry-After, 408, ...)
	errorEvent               // a stream that ended with an error event after some tokens
	lost                     // no status, or a stream cut off without a word
)

var endingNames = []string{"served", "answered with a status", "stream ended by an error event", "lost"}

type tally struct {
	counts  [4]int
	slowest time.Duration
	mu      sync.Mutex
}

func (t *tally) add(e ending, took time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.counts[e]++
	t.slowest = max(t.slowest, took)
}

// count is how many ended as e so far.
func (t *tally) count(e ending) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.counts[e]
}

func (t *tally) String() string {
	var parts []string
	for i, n := range t.counts {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, endingNames[i]))
		}
	}
	return strings.Join(parts, ", ") + fmt.Sprintf("; slowest %v", t.slowest.Round(10*time.Millisecond))
}

// streamOnce sends one streaming chat request and classifies its end.
func streamOnce(addr string, i, maxTokens int) (ending, time.Duration) {
	return streamAs(&http.Client{Timeout: 60 * time.Second}, addr, nil, i, maxTokens)
}

// streamAs is streamOnce from client, with extra headers.
func streamAs(client *http.Client, addr string, header map[string]string, i, maxTokens int) (ending, time.Duration) {
	start := time.Now()
	body := fmt.Sprintf(`{"stream":true,"max_tokens":%d,"messages":[{"role":"user","content":"chaos %d: %s"}]}`, maxTokens, i, strings.Repeat("words ", 50))
	req, err := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return lost, 0
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		return lost, time.Since(start)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	switch {
	case resp.StatusCode != 200 && resp.StatusCode >= 400 && strings.Contains(string(data), `"error"`):
		return answered, time.Since(start)
	case err == nil && strings.Contains(string(data), "data: [DONE]"):
		return served, time.Since(start)
	case strings.Contains(string(data), `"error"`):
		return errorEvent, time.Since(start)
	}
	return lost, time.Since(start)
}

// burst runs n streaming requests at once and tallies them.
func burst(addr string, n, maxTokens int) *tally {
	var t tally
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.add(streamOnce(addr, i, maxTokens))
		}()
	}
	wg.Wait()
	return &t
}

func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("the chaos suite is not short")
	}
	var table strings.Builder
	row := func(scenario string, tl *tally) {
		fmt.Fprintf(&table, "%-72s %s\n", scenario, tl)
		if tl.counts[lost] > 0 {
			t.Errorf("%s: %d requests lost", scenario, tl.counts[lost])
		}
	}

	// The probe's case: 150 requests, 64 at the engine and 86 held when
	// SIGTERM comes. Short answers let the queue drain into the freed
	// slots; long ones cannot finish, and are ended with an error event.
	for _, tokens := range []int{150, 1000} {
		t.Run(fmt.Sprintf("SIGTERM with requests held, %d-token answers", tokens), func(t *testing.T) {
			url, _ := simEngine(t, server.Faults{})
			p := startSolo(t, []string{url}, func(c *Config) { c.MaxInFlight, c.DrainTimeout, c.TTFTObjective = 64, 3*time.Second, 0 })
			done := make(chan *tally)
			go func() { done <- burst(p.addr, 150, tokens) }()
			var inFlight, held int
			testwait.Eventually(t, 60*time.Second, "64 requests in flight and 86 held", func() (bool, string) {
				inFlight, held = p.replica(0).InFlight, p.srv.QueueLength()
				return inFlight == 64 && held == 86, fmt.Sprintf("%d in flight, %d held", inFlight, held)
			})
			if err := p.drain(); err != nil {
				t.Errorf("drain: %v", err)
			}
			row(fmt.Sprintf("SIGTERM, %d in flight + %d held, %d-token answers, 3 s drain", inFlight, held, tokens), <-done)
		})
	}

	t.Run("one of two engines hangs every request", func(t *testing.T) {
		hung, _ := simEngine(t, server.Faults{HangRate: 1})
		good, _ := simEngine(t, server.Faults{})
		p := startSolo(t, []string{hung, good}, nil) // the default first-byte timeout
		start := time.Now()
		ejected := make(chan time.Duration, 1)
		go func() { // when the hung engine leaves the healthy set
			for p.srv.HealthyReplicas() == 2 && time.Since(start) < time.Minute {
				time.Sleep(5 * time.Millisecond)
			}
			ejected <- time.Since(start)
		}()
		tl := burst(p.addr, 30, 20)
		row("1 of 2 engines hangs (the learned first-byte timeout)", tl)
		if n := p.srv.HealthyReplicas(); n != 1 {
			t.Errorf("%d healthy replicas after the burst; the hung one should have been ejected", n)
		}
		fmt.Fprintf(&table, "%-72s the hung engine ejected %v after the burst began\n", "", (<-ejected).Round(10*time.Millisecond))
	})

	for _, failover := range []bool{false, true} {
		t.Run(fmt.Sprintf("streams stall, failover %v", failover), func(t *testing.T) {
			var urls []string
			for range 2 {
				u, _ := simEngine(t, server.Faults{StallRate: 0.2, StallAfter: 5})
				urls = append(urls, u)
			}
			p := startSolo(t, urls, func(c *Config) { c.StallTimeout, c.MidStreamFailover = time.Second, failover })
			row(fmt.Sprintf("20%% of streams stall after 5 tokens (1 s stall timeout), failover %v", failover), burst(p.addr, 40, 30))
		})
		t.Run(fmt.Sprintf("an engine is killed mid-stream, failover %v", failover), func(t *testing.T) {
			first, killFirst := simEngine(t, server.Faults{})
			second, killSecond := simEngine(t, server.Faults{})
			p := startSolo(t, []string{first, second}, func(c *Config) { c.MidStreamFailover = failover })
			done := make(chan *tally)
			go func() { done <- burst(p.addr, 30, 150) }()
			// Kill an engine only once streams are under way there (the
			// one prefix affinity chose), every request in flight there
			// past its first token: a kill after the burst, of an idle
			// engine, or of requests still before their first byte (they
			// are retried elsewhere) would test nothing.
			var kill func()
			testwait.Eventually(t, 30*time.Second, "streams past their first token at an engine", func() (bool, string) {
				for i := range 2 {
					if r := p.replica(i); r.InFlight >= 3 && r.PrefillTokens == 0 {
						kill = killSecond
						if strings.Contains(first, r.Name) {
							kill = killFirst
						}
						return true, ""
					}
				}
				return false, "fewer than 3 requests in flight at either engine, all past their first token"
			})
			kill()
			tl := <-done
			row(fmt.Sprintf("1 of 2 engines killed mid-stream, failover %v", failover), tl)
			// Without failover, the three or more streams under way at the
			// engine when it died cannot have been served: each ends with
			// an error event.
			if !failover && tl.counts[served] > 30-3 {
				t.Errorf("the kill hit no request: %s", tl)
			}
		})
	}

	t.Run("slow uploads", func(t *testing.T) {
		url, _ := simEngine(t, server.Faults{})
		p := startSolo(t, []string{url}, func(c *Config) { c.BodyTimeout = time.Second })
		var tl tally
		var wg sync.WaitGroup
		for range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				conn, err := net.Dial("tcp", p.addr)
				if err != nil {
					tl.add(lost, 0)
					return
				}
				defer conn.Close()
				fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n"+`{"messages":[{"role":"user","content":"`)
				go func() {
					for range 100 {
						if _, err := conn.Write([]byte("a")); err != nil {
							return
						}
						time.Sleep(100 * time.Millisecond)
					}
				}()
				_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
				resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
				if err != nil {
					tl.add(lost, time.Since(start))
					return
				}
				resp.Body.Close()
				if resp.StatusCode != 408 {
					t.Errorf("a slow upload got %d, want 408", resp.StatusCode)
				}
				tl.add(answered, time.Since(start))
			}()
		}
		wg.Wait()
		row("20 uploads at 1 byte / 100 ms (1 s body timeout)", &tl)
	})
	// A flooder rotating tenant names in the trusted header (fair queuing
	// holds at most so many tenants' shares), or rotating API keys under
	// the default setting (an unlisted key is its client's address: one
	// tenant, however many keys).
	for _, flood := range []struct {
		name         string
		floodHeader  func(n int) map[string]string
		quietHeader  map[string]string
		tenantsLabel string
	}{
		{"a flooder rotating tenant names", func(n int) map[string]string {
			return map[string]string{GatewayTenantHeader: fmt.Sprint("rotating-", n)}
		},
			map[string]string{GatewayTenantHeader: "quiet"}, "200 tenant names"},
		{"a flooder rotating API keys", func(n int) map[string]string {
			return map[string]string{"Authorization": fmt.Sprint("Bearer sk-rotating-", n)}
		},
			map[string]string{"Authorization": "Bearer sk-quiet"}, "200 API keys"},
	} {
		t.Run(flood.name, func(t *testing.T) {
			url, _ := simEngine(t, server.Faults{})
			p := startSolo(t, []string{url}, func(c *Config) { c.MaxInFlight, c.TTFTObjective = 2, 2*time.Second })
			flooder := &http.Client{Timeout: time.Minute}
			quiet := fromAddress(net.IPv4(127, 0, 0, 2))
			stop := make(chan struct{})
			var floodTally tally
			var wg sync.WaitGroup
			for g := range 40 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						e, took := streamAs(flooder, p.addr, flood.floodHeader((g*1000+i)%200), i, 64)
						floodTally.add(e, took)
						if e == answered {
							time.Sleep(20 * time.Millisecond) // refused: a moment before the next
						}
					}
				}()
			}
			// Saturated: the queue holds what the objective allows (how many
			// that is depends on the machine's speed), and the rest is refused.
			testwait.Eventually(t, 30*time.Second, "the flood to fill the queue", func() (bool, string) {
				n, refused := p.srv.QueueLength(), floodTally.count(answered)
				return n >= 4 && refused >= 10, fmt.Sprintf("%d held, %d refused", n, refused)
			})
			var quietTally tally
			for i := range 20 {
				quietTally.add(streamAs(quiet, p.addr, flood.quietHeader, i, 64))
			}
			close(stop)
			wg.Wait()
			row("a flooder (40 at once, "+flood.tenantsLabel+") beside a quiet client: the quiet one", &quietTally)
			fmt.Fprintf(&table, "%-72s the flood: %s\n", "", &floodTally)
			if quietTally.counts[served] < 18 {
				t.Errorf("the quiet client had %d of 20 served beside a flooder rotating %s; want at least 18 (90%%)", quietTally.counts[served], flood.tenantsLabel)
			}
		})
	}
	t.Run("a lying peer", func(t *testing.T) {
		hits := lyingPeer(t)
		url, _ := simEngine(t, server.Faults{})
		prof, _ := profile.Lookup("llama3-8b-a100")
		peers := staticPeers{{Region: "eu-liar", Jurisdiction: "eu", Healthy: true, Nodes: 1, APIAddrs: []string{hits.url}, RTT: 20 * time.Millisecond,
			GateOpen: true, Load: region.Load{Replicas: 64, Slots: 4096, Prefill: policy.PrefillOf(prof)}}}
		p := startSoloWith(t, []string{url}, func(c *Config) { c.MaxInFlight, c.Profile = 1, prof.Name }, Options{Peers: peers})
		testwait.Eventually(t, 30*time.Second, "the router to see the lying peer", func() (bool, string) {
			p.srv.router.Pump()
			return len(p.srv.router.snapshot().Peers) == 1, "no peer in the router's view"
		})
		tl := burst(p.addr, 30, 20)
		row("a peer that advertises idle capacity and swallows every forward (30 at once)", tl)
		fmt.Fprintf(&table, "%-72s forwards the liar swallowed: %d\n", "", hits.n.Load())
		if n := hits.n.Load(); n > 4 {
			t.Errorf("the lying peer swallowed %d forwards; want at most a handful (3 before it is distrusted, 1 on probation)", n)
		}
		if tl.counts[served] != 30 {
			t.Errorf("%s: want all 30 served here once the forwards failed", tl)
		}
	})
	t.Run("withheld uploads", func(t *testing.T) {
		row("32 uploads of 16 MiB - 1 from one client, the last byte withheld", withheldUploads(t))
	})
	t.Log("\n" + table.String())
}

// withheldUploads: with the default settings, 32
// connections from one client each send 16 MiB − 1 of a 16 MiB body at
// once and withhold the last byte. The client may hold only its share of
// the body budget (the rest are refused 429 before a byte is read), the
// held ones are cut with a 408 one body timeout after their last byte (not
// after the 512 s their bytes earned), and another client is served all
// the while.
func withheldUploads(t *testing.T) *tally {
	backend, _ := countingBackend(t)
	p := startSolo(t, []string{backend.URL}, nil)
	cfg := DefaultConfig()
	const uploads, size = 32, 16 << 20
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	prefix := `{"messages":[{"role":"user","content":"`
	payload := []byte(prefix + strings.Repeat("a", size-1-len(prefix))) // shared: the clients' memory is not the proxy's
	type answer struct {
		status int
		body   string
		after  time.Duration // since the last byte was sent
	}
	answers := make(chan answer, uploads)
	for range uploads {
		conn, err := net.Dial("tcp", p.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		go func() {
			_, _ = fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", size)
			_, _ = conn.Write(payload)
			sent := time.Now()
			_ = conn.SetReadDeadline(time.Now().Add(3 * time.Minute))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				answers <- answer{status: 0, body: err.Error(), after: time.Since(sent)}
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			answers <- answer{status: resp.StatusCode, body: string(body), after: time.Since(sent)}
		}()
	}
	// Another client (another loopback address) is served while the
	// uploads are held.
	other := fromAddress(net.IPv4(127, 0, 0, 2))
	var peak int64
	testwait.Eventually(t, time.Minute, "the uploads to reach the client's share of the body budget", func() (bool, string) {
		peak = max(peak, p.srv.bodies.held())
		return peak >= int64(cfg.ClientBodyBudget)-size, fmt.Sprintf("%d MiB held", peak>>20)
	})
	resp, err := other.Post("http://"+p.addr+"/v1/chat/completions", "application/json", strings.NewReader(`{"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("another client, while one client withholds %d uploads: status %d, want 200", uploads, resp.StatusCode)
	}
	var during, live runtime.MemStats
	runtime.ReadMemStats(&during)
	runtime.GC()
	runtime.ReadMemStats(&live)
	heldBytes := p.srv.bodies.held() / BodyMemoryFactor // the uploads held now, at their size
	counts := map[int]int{}
	var tl tally
	for range uploads {
		select {
		case a := <-answers:
			counts[a.status]++
			if a.status == 0 {
				tl.add(lost, a.after)
			} else {
				tl.add(answered, a.after)
			}
			switch a.status {
			case 408:
				if a.after > 2*time.Minute {
					t.Errorf("a withheld upload was cut %v after its last byte; the body timeout is %v", a.after, cfg.BodyTimeout)
				}
			case 429:
				if !strings.Contains(a.body, "client_body_budget") {
					t.Errorf("429 %s: want it to name client_body_budget", a.body)
				}
			default:
				t.Errorf("a withheld upload was answered %d %s, want 408 or 429", a.status, a.body)
			}
		case <-time.After(3 * time.Minute):
			t.Fatalf("answers so far %v: the other withheld uploads were not answered within 3 minutes (the body timeout is %v)", counts, cfg.BodyTimeout)
		}
	}
	if counts[408] == 0 || counts[429] == 0 || peak > int64(cfg.ClientBodyBudget) {
		t.Errorf("answers %v, peak held %d MiB: want some held and cut (408), the rest refused (429), at most the client's %d MiB held",
			counts, peak>>20, cfg.ClientBodyBudget>>20)
	}
	grew := int64(during.HeapInuse) - int64(before.HeapInuse)
	liveGrew := int64(live.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%d withheld 16 MiB uploads: %v; peak held %d MiB; heap grew %d MiB, live after a collection %d MiB for %d MiB of bodies held",
		uploads, counts, peak>>20, grew>>20, liveGrew>>20, heldBytes>>20)
	if liveGrew > heldBytes*3/2 {
		t.Errorf("the held uploads' %d MiB cost %d MiB of live heap; want at most 1.5x", heldBytes>>20, liveGrew>>20)
	}
	if grew > 1<<30 {
		t.Errorf("heap grew %d MiB, over the Helm chart's 1 GiB limit", grew>>20)
	}
	return &tl
}

// fromAddress is an HTTP client whose connections come from ip (another
// loopback address is another client to the proxy).
func fromAddress(ip net.IP) *http.Client {
	return &http.Client{Timeout: time.Minute, Transport: &http.Transport{DialContext: dialerFrom(ip).DialContext}}
}

// dialerFrom dials from a loopback address of its own: another client to
// the proxy.
func dialerFrom(ip net.IP) *net.Dialer {
	return &net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}}
}

// swallower is a peer proxy that takes every forwarded request and never
// answers (until the test ends).
type swallower struct {
	url string
	n   atomic.Int64
}

func lyingPeer(t *testing.T) *swallower {
	sw := &swallower{}
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw.n.Add(1)
		select {
		case <-r.Context().Done():
		case <-done:
		}
	}))
	t.Cleanup(func() { close(done); srv.Close() })
	sw.url = srv.URL
	return sw
}
