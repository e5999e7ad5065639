package proxy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"skywalker/internal/engine/server"
	"skywalker/internal/kvevents"
	"skywalker/internal/node"
	"skywalker/internal/node/nodetest"
	"skywalker/internal/proxy"
	"skywalker/internal/request"
)

// kvEngine starts a simulated vLLM that publishes its KV events on
// loopback ports of its own, as --kv-events-config asks, with tune's
// changes (faults, shape, cache size).
func kvEngine(t *testing.T, tune func(*server.Config)) *server.Loopback {
	t.Helper()
	cfg := nodetest.EngineConfig(20)
	cfg.KVEvents = server.KVEventsConfig{Enable: true, Publisher: "zmq", Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0", Topic: "kv"}
	if tune != nil {
		tune(&cfg)
	}
	e, err := server.StartLoopback(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Kill)
	return e
}

// kvProxy starts a proxy of us-east named name in front of engines,
// following their KV events as kvEvents says.
func kvProxy(t *testing.T, name, kvEvents string, engines []string, tune func(*proxy.Config)) *node.Node {
	t.Helper()
	cfg := proxy.DefaultConfig()
	cfg.Region, cfg.NodeID, cfg.Listen, cfg.AdminListen = "us-east", name, "127.0.0.1:0", "127.0.0.1:0"
	cfg.WorkerPool, cfg.KVEvents, cfg.Profile = engines, kvEvents, "llama3-8b-a100"
	cfg.ScrapeInterval, cfg.DrainTimeout = 50*time.Millisecond, 5*time.Second
	if tune != nil {
		tune(&cfg)
	}
	n, err := node.Start(context.Background(), node.Options{Proxy: cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Kill)
	return n
}

// debugReplica is a replica as /debug/skywalker shows it.
type debugReplica struct {
	Name          string `json:"name"`
	CacheSource   string `json:"cache_source"`
	IndexedBlocks int    `json:"indexed_blocks"`
}

func debugReplicas(t *testing.T, n *node.Node) map[string]debugReplica {
	t.Helper()
	page := debugPage(t, n)
	out := map[string]debugReplica{}
	for _, r := range page.Replicas {
		out[r.Name] = r
	}
	return out
}

// debugPage is n's /debug/skywalker, the parts these tests read.
type debugPageView struct {
	SharingDispatches bool           `json:"sharing_dispatches"`
	Replicas          []debugReplica `json:"replicas"`
}

func debugPage(t *testing.T, n *node.Node) debugPageView {
	t.Helper()
	resp, err := http.Get(n.AdminURL + "/debug/skywalker")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var page debugPageView
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		t.Fatal(err)
	}
	return page
}

// conversation is request i of a client under one of three long system
// prompts (about 600 tokens each) with a question of its own (about 300
// tokens: the engine stores blocks for every request), streamed with its
// usage.
func conversation(i int) string {
	system := strings.Repeat(fmt.Sprintf("You are assistant %d of the travel desk; answer briefly. ", i%3), 40)
	question := strings.Repeat(fmt.Sprintf("Question %d asks about trip %d. ", i, i), 40)
	return fmt.Sprintf(`{"model":"m","messages":[{"role":"system","content":%q},{"role":"user","content":%q}],"max_tokens":4,"stream":true,"stream_options":{"include_usage":true}}`,
		system, question)
}

// kvStream counts a proxy's KV-event stream events of kind (batch,
// restart, lost) over every replica.
func kvStream(t *testing.T, n *node.Node, kind string) float64 {
	t.Helper()
	return seriesSum(t, n.AdminURL, "skywalker_kv_events_total", `event="`+kind+`"`)
}

// TestKVEventsFromTheEnginesDriveTheIndex: a proxy follows each engine's
// KV events — found by GET /kv_event_sources, or at a configured
// endpoint — in both wire shapes; a batch lost on the way is replayed
// (nothing is lost), a batch lost for good turns the replica's index to
// belief (lost), an engine that starts its sequence over empties it; and
// the blocks the engine evicts leave the index, which stays the size of
// the engine's cache rather than the twice that its bound allows.
func TestKVEventsFromTheEnginesDriveTheIndex(t *testing.T) {
	for _, tc := range []struct {
		name     string
		engine   func(*server.Config)
		template bool // kv_events names the endpoints instead of discover
		requests int
		// check says whether the replica is where the case leaves it, and
		// what it saw else: waited for, as the last batches arrive.
		check func(t *testing.T, p *node.Node, r debugReplica) (bool, string)
	}{
		{name: "dropped batches are replayed", requests: 12,
			engine: func(c *server.Config) { c.Faults.KVDropEvery = 2 },
			check: func(t *testing.T, p *node.Node, r debugReplica) (bool, string) {
				// Every request stores blocks; half the batches are dropped, and
				// all but a last one (no later batch shows its gap) replayed.
				lost, replayed := kvStream(t, p, "lost"), kvStream(t, p, "batch")
				return lost == 0 && replayed >= 11, fmt.Sprintf("%v batches applied of 12 requests', %v losses; want every batch, the dropped ones replayed", replayed, lost)
			}},
		{name: "the older array shape at a configured endpoint", requests: 6, template: true,
			engine: func(c *server.Config) { c.KVEventsShape = kvevents.ArrayShape },
			check: func(t *testing.T, p *node.Node, r debugReplica) (bool, string) {
				lost, n := kvStream(t, p, "lost"), kvStream(t, p, "batch")
				return lost == 0 && n >= 3, fmt.Sprintf("%v batches applied, %v losses", n, lost)
			}},
		{name: "batches lost for good fall back to belief", requests: 8,
			engine: func(c *server.Config) { c.Faults.KVForgetEvery = 3 },
			check: func(t *testing.T, p *node.Node, r debugReplica) (bool, string) {
				lost := kvStream(t, p, "lost")
				return lost >= 1 && strings.HasPrefix(r.CacheSource, "lost"), fmt.Sprintf("%v losses, source %q; want the replica's index on belief (lost)", lost, r.CacheSource)
			}},
		{name: "an engine that starts over is emptied", requests: 8,
			engine: func(c *server.Config) { c.Faults.KVRestartAfter = 4 },
			check: func(t *testing.T, p *node.Node, r debugReplica) (bool, string) {
				restarts, lost := kvStream(t, p, "restart"), kvStream(t, p, "lost")
				return restarts == 1 && lost == 0, fmt.Sprintf("%v restarts, %v losses; want the one restart heard, nothing lost", restarts, lost)
			}},
		{name: "evicted blocks leave the index", requests: 14,
			engine: func(c *server.Config) { c.Engine.KVBlocks = 160 }, // 2,560 tokens: 20 of the router's blocks
			check: func(t *testing.T, p *node.Node, r debugReplica) (bool, string) {
				return r.IndexedBlocks <= 24, fmt.Sprintf("%d blocks indexed for an engine that holds 20: evictions did not reach the index", r.IndexedBlocks)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tune := tc.engine
			var pub, replay string
			if tc.template {
				pub, replay = freePort(t), freePort(t)
				tune = func(c *server.Config) {
					tc.engine(c)
					c.KVEvents.Endpoint, c.KVEvents.ReplayEndpoint = "tcp://127.0.0.1:"+pub, "tcp://127.0.0.1:"+replay
				}
			}
			e := kvEngine(t, tune)
			kv := "discover"
			if tc.template {
				kv = "tcp://{host}:" + pub + "|tcp://{host}:" + replay + "|kv"
			}
			p := kvProxy(t, "us-east-1", kv, []string{e.URL}, nil)
			host := strings.TrimPrefix(e.URL, "http://")
			cachedSeen := false
			for i := range tc.requests {
				r := call(t, p.URL, conversation(i), nil)
				if r.status != 200 {
					t.Fatalf("request %d: %d %.200s", i, r.status, r.body)
				}
				cachedSeen = cachedSeen || i >= 3 && !strings.Contains(r.body, `"cached_tokens":0}`)
			}
			if !cachedSeen {
				t.Errorf("no request reused a system prompt's cache")
			}
			nodetest.Eventually(t, 10*time.Second, "the replica's index rests on its engine's events", func() (bool, string) {
				r := debugReplicas(t, p)[host]
				return r.CacheSource != "belief" && kvStream(t, p, "batch") > 0, fmt.Sprintf("replica %+v, %v batches", r, kvStream(t, p, "batch"))
			})
			nodetest.Eventually(t, 10*time.Second, "the last batches are applied: "+tc.name, func() (bool, string) {
				return tc.check(t, p, debugReplicas(t, p)[host])
			})
		})
	}
}

// freePort is a loopback port nothing listens on.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}

// TestTwoProxiesOfARegionHoldTheSameIndex: two proxies in front of the
// same two engines, both following their KV events, meshed as one
// region. Each client's conversation starts on one proxy and goes on
// through the other, which sends it where its cache is (it was told what
// the first dispatched); once quiet, both index the same blocks on every
// replica.
func TestTwoProxiesOfARegionHoldTheSameIndex(t *testing.T) {
	engines := []string{kvEngine(t, nil).URL, kvEngine(t, nil).URL}
	meshed := func(c *proxy.Config) {
		c.GossipKeys, c.MeshPreset, c.GossipBind, c.InsecureForwarding = []string{node.DevKey}, "local", "127.0.0.1:0", true
	}
	a := kvProxy(t, "us-east-a", "discover", engines, meshed)
	b := kvProxy(t, "us-east-b", "discover", engines, meshed)
	if err := b.Join(a.Mesh.Addr()); err != nil {
		t.Fatal(err)
	}
	nodetest.Eventually(t, nodetest.Converge, "the two proxies meet as one region", func() (bool, string) {
		return a.Mesh.Siblings() == 1 && b.Mesh.Siblings() == 1, fmt.Sprintf("a knows %v, b knows %v", a.Mesh.Members(), b.Mesh.Members())
	})
	for _, p := range []*node.Node{a, b} {
		nodetest.Eventually(t, nodetest.Converge, p.Mesh.Name()+" tells its sibling what it dispatches", func() (bool, string) {
			return debugPage(t, p).SharingDispatches, "not sharing yet"
		})
	}

	for i := range 8 {
		first, then := a, b
		if i%2 == 1 {
			first, then = b, a
		}
		system := strings.Repeat(fmt.Sprintf("Client %d's standing instructions, long enough to span blocks. ", i), 30)
		ask := func(p *node.Node, turn string) result {
			r := call(t, p.URL, fmt.Sprintf(`{"model":"m","messages":[{"role":"system","content":%q},{"role":"user","content":%q}],"max_tokens":4,"stream":true,"stream_options":{"include_usage":true}}`,
				system, turn), nil)
			if r.status != 200 {
				t.Fatalf("client %d %s: %d %.200s", i, turn, r.status, r.body)
			}
			return r
		}
		opened := ask(first, "first turn")
		// then has heard the first turn once its view of the second turn
		// matches at that replica the prefix first's does; and it sees the
		// replica idle again (a scrape still counting the first turn, on a
		// starved machine, would make it look busier than the others).
		second := fmt.Sprintf(`{"model":"m","messages":[{"role":"system","content":%q},{"role":"user","content":"second turn"}]}`, system)
		probe, err := request.Parse(request.Chat, []byte(second), request.Options{})
		if err != nil {
			t.Fatal(err)
		}
		probe.SetPool("m", "")
		seen := func(p *node.Node) (prefix, busy int) {
			for _, rp := range p.Proxy.Router().View(probe).Local.Replicas {
				if rp.Name == opened.replica {
					return rp.PrefixBlocks, rp.Running + rp.Waiting + rp.InFlight
				}
			}
			return -1, -1
		}
		nodetest.Eventually(t, nodetest.Converge, "what "+first.Mesh.Name()+" dispatched reaches "+then.Mesh.Name()+", and the replica is idle there", func() (bool, string) {
			want, _ := seen(first)
			now, busy := seen(then)
			return want > 0 && now >= want && busy == 0, fmt.Sprintf("%s matches %d blocks of the second turn at %s (%s %d), %d requests there", then.Mesh.Name(), now, opened.replica, first.Mesh.Name(), want, busy)
		})
		next := ask(then, "second turn")
		if next.replica != opened.replica || next.reason != "local-prefix" || strings.Contains(next.body, `"cached_tokens":0}`) {
			t.Errorf("client %d began on %s through %s and went on to %s through %s for %q (usage %s): not routed to where its cache is",
				i, opened.replica, first.Mesh.Name(), next.replica, then.Mesh.Name(), next.reason, next.body[strings.LastIndex(next.body, "usage"):])
		}
	}
	// Clients only a serves: b learns their prompts all the same.
	for i := range 3 {
		ask := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":%q}],"max_tokens":4}`, strings.Repeat(fmt.Sprintf("Only a hears client %d. ", i), 60))
		if r := call(t, a.URL, ask, nil); r.status != 200 {
			t.Fatalf("a's client %d: %d %.200s", i, r.status, r.body)
		}
	}
	nodetest.Eventually(t, 10*time.Second, "both proxies index the same blocks on every replica", func() (bool, string) {
		ra, rb := debugReplicas(t, a), debugReplicas(t, b)
		same := len(ra) == 2
		for name, r := range ra {
			same = same && r.IndexedBlocks > 0 && r.IndexedBlocks == rb[name].IndexedBlocks && strings.HasPrefix(r.CacheSource, "events")
		}
		return same, fmt.Sprintf("a %+v, b %+v", ra, rb)
	})
}
