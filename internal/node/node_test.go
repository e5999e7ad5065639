package node_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"skywalker/internal/node"
	"skywalker/internal/node/nodetest"
	"skywalker/internal/proxy"
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
	if reached := n.JoinPeers(ctx, 100*time.Millisecond); reached == 0 {
		t.Fatal("joined nobody through us-east's URL")
	}
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
