package node_test

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
	"skywalker/internal/mesh"
	"skywalker/internal/node"
	"skywalker/internal/node/nodetest"
	"skywalker/internal/proxy"
	"skywalker/internal/region"
)

// TestConvergedSaysWhatIsMissing: a converged cluster says nothing is
// missing; once a region dies, the others name it and how stale its data
// is.
func TestConvergedSaysWhatIsMissing(t *testing.T) {
	c := nodetest.Start(t, nodetest.Options{EnginesPerRegion: 1})
	if ok, missing := node.Converged(c.Nodes()); !ok {
		t.Fatalf("a started cluster is not converged: %s", missing)
	}
	c.Region("ap-east").Kill()
	var missing string
	nodetest.Eventually(t, nodetest.Converge, "the others notice ap-east is gone", func() (bool, string) {
		var ok bool
		ok, missing = node.Converged(c.Nodes()[:2])
		return !ok && strings.Contains(missing, "ap-east"), "still converged: " + missing
	})
	t.Logf("what is missing: %s", missing)
	// Either survivor may notice first: the diagnosis must name one of them
	// and the peer it misses.
	said := false
	for _, who := range []string{"us-east", "eu-west"} {
		said = said || strings.Contains(missing, who+" sees ap-east unhealthy") || strings.Contains(missing, who+" has not heard of ap-east")
	}
	if !said {
		t.Errorf("diagnosis %q does not say which region misses which peer", missing)
	}
}

// TestAProxyTellsItsGossipAddressAndJoinsThroughAURL: a node started with
// a peer given by URL asks that peer for its mesh address and joins.
func TestAProxyTellsItsGossipAddressAndJoinsThroughAURL(t *testing.T) {
	c := nodetest.Start(t, nodetest.Options{EnginesPerRegion: 1})
	us := c.Region("us-east")
	resp, err := http.Get(us.URL + "/v1/skywalker/gossip")
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		GossipAddr string `json:"gossip_addr"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&g)
	resp.Body.Close()
	if g.GossipAddr != us.Mesh.Addr() {
		t.Errorf("gossip address %q, the mesh listens on %q", g.GossipAddr, us.Mesh.Addr())
	}

	cfg := proxy.DefaultConfig()
	cfg.Region, cfg.Jurisdiction, cfg.Listen, cfg.GossipBind = "sa-east", "sa", "127.0.0.1:0", "127.0.0.1:0"
	cfg.WorkerPool, cfg.GossipKeys, cfg.MeshPreset = []string{c.Region("us-east").Engines[0].URL}, []string{node.DevKey}, "local"
	cfg.InsecureForwarding = true // the mesh is under test, not forwarding
	cfg.Peers = []proxy.PeerSeed{{Region: "us-east", Addr: us.URL}}
	n, err := node.Start(context.Background(), node.Options{Proxy: cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Kill)
	ctx, cancel := context.WithTimeout(context.Background(), nodetest.Converge)
	defer cancel()
	go n.KeepJoined(ctx, 100*time.Millisecond, node.RejoinEvery)
	nodetest.Eventually(t, nodetest.Converge, "sa-east hears every region", func() (bool, string) {
		var names []string
		for _, p := range n.Mesh.Peers() {
			names = append(names, p.Region)
		}
		return len(names) == 3, "peers so far: " + strings.Join(names, ",")
	})
}

// TestEmulatedWANBetweenSeparateNodes: two proxies started as `serve`
// would start them (no shared link emulator, a real gossip bind), each
// told --emulate-wan toward the other: each learns the other's mesh
// address as it joins, and measures the emulated RTT on the link, as two
// processes on one host would.
func TestEmulatedWANBetweenSeparateNodes(t *testing.T) {
	engine := nodetest.Start(t, nodetest.Options{EnginesPerRegion: 1}).Region("us-east").Engines[0].URL
	start := func(region, peer string) *node.Node {
		cfg := proxy.DefaultConfig()
		cfg.Region, cfg.Jurisdiction, cfg.Listen, cfg.GossipBind = region, region, "127.0.0.1:0", "127.0.0.1:0"
		cfg.WorkerPool, cfg.GossipKeys, cfg.MeshPreset = []string{engine}, []string{node.DevKey}, "local"
		cfg.InsecureForwarding = true // the mesh is under test, not forwarding
		cfg.EmulateWAN = map[string]time.Duration{peer: 150 * time.Millisecond}
		n, err := node.Start(context.Background(), node.Options{Proxy: cfg})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Kill)
		return n
	}
	a, b := start("west", "east"), start("east", "west")
	if err := a.Join(b.Mesh.Addr()); err != nil {
		t.Fatal(err)
	}
	nodetest.Eventually(t, nodetest.Converge, "west measures the emulated 150 ms to east", func() (bool, string) {
		for _, p := range a.Mesh.Peers() {
			if p.Region == "east" {
				return p.RTT >= 130*time.Millisecond && p.RTT < time.Second, "RTT to east " + p.RTT.String()
			}
		}
		return false, "east not among west's peers"
	})
}

// TestASeedRestartedAloneIsFoundAgainAndHeardAtOnce: the seed of a mesh
// crashes and comes back under the same id and URL, with no peers of its
// own: at the same gossip address (a process restarted in place), or at
// another (a pod rescheduled). The others find it again by joining their
// seeds (asking its URL for the address) every rejoin interval, and hear
// its load at once although its new process's sequence numbers start far
// below the old one's.
func TestASeedRestartedAloneIsFoundAgainAndHeardAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name          string
		sameGossipAdr bool
	}{{"in place", true}, {"at another gossip address", false}} {
		t.Run(tc.name, func(t *testing.T) { restartTheSeed(t, tc.sameGossipAdr) })
	}
}

func restartTheSeed(t *testing.T, sameGossipAddr bool) {
	eng, err := server.StartLoopback(nodetest.EngineConfig(20))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Kill)
	seedListen, seedGossip := freeAddr(t), "127.0.0.1:0"
	if sameGossipAddr {
		seedGossip = freeAddr(t)
	}
	start := func(region, listen, gossip string, peers []proxy.PeerSeed, loadEvery time.Duration) *node.Node {
		cfg := proxy.DefaultConfig()
		cfg.Region, cfg.NodeID, cfg.Listen, cfg.GossipBind, cfg.AdminListen = region, region+"-proxy", listen, gossip, "off"
		cfg.WorkerPool, cfg.GossipKeys, cfg.MeshPreset, cfg.InsecureForwarding = []string{eng.URL}, []string{node.DevKey}, "local", true
		cfg.Peers = peers
		n, err := node.Start(context.Background(), node.Options{Proxy: cfg, Mesh: func(mc *mesh.Config) {
			mc.Control.LoadInterval, mc.Control.LoadCheck = loadEvery, min(loadEvery, 50*time.Millisecond)
		}})
		if err != nil {
			t.Fatalf("start %s: %v", region, err)
		}
		t.Cleanup(n.Kill)
		return n
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The first seed process sends a summary every millisecond (over a
	// thousand before it dies); its successor one every 500 ms, so that
	// without incarnations it would be ignored for many minutes.
	seed := start("sa-east", seedListen, seedGossip, nil, time.Millisecond)
	seeds := []proxy.PeerSeed{{Region: "sa-east", Addr: "http://" + seedListen}}
	others := []*node.Node{start("us-east", "127.0.0.1:0", "127.0.0.1:0", seeds, 100*time.Millisecond),
		start("eu-west", "127.0.0.1:0", "127.0.0.1:0", seeds, 100*time.Millisecond)}
	for _, o := range others {
		go o.KeepJoined(ctx, 100*time.Millisecond, 500*time.Millisecond)
	}
	members := func(n *node.Node, want int) func() (bool, string) {
		return func() (bool, string) {
			m := n.Mesh.Members()
			return len(m) == want, n.Region + " knows " + strings.Join(m, ", ")
		}
	}
	nodetest.Eventually(t, nodetest.Converge, "the mesh forms through the seed", members(seed, 3))
	hearsSeed := func(o *node.Node) func() (bool, string) {
		return func() (bool, string) {
			for _, p := range o.Mesh.Peers() {
				if p.Region == "sa-east" {
					return p.Healthy, fmt.Sprintf("sa-east healthy %v, data age %v", p.Healthy, p.DataAge)
				}
			}
			return false, "sa-east is not a peer"
		}
	}
	for _, o := range others {
		nodetest.Eventually(t, nodetest.Converge, o.Region+" hears the first seed process's load", hearsSeed(o))
	}

	seed.Kill()
	killed := time.Now()
	seed = start("sa-east", seedListen, seedGossip, nil, 500*time.Millisecond)
	nodetest.Eventually(t, nodetest.Converge, "the restarted seed, knowing nobody, is found again", members(seed, 3))
	t.Logf("the restarted seed knew every member %v after its restart", time.Since(killed).Round(10*time.Millisecond))
	maxAge := region.DefaultControlPlane().MaxDataAge
	for _, o := range others {
		nodetest.Eventually(t, nodetest.Converge, o.Region+" hears the restarted seed's load", func() (bool, string) {
			if time.Since(killed) <= maxAge {
				return false, "the old process's data may still be fresh"
			}
			return hearsSeed(o)()
		})
	}
	t.Logf("peers heard the restarted seed %v after its restart (data older than %v is not used)", time.Since(killed).Round(10*time.Millisecond), maxAge)
}

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
