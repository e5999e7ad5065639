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
	if !strings.Contains(missing, "us-east sees ap-east unhealthy") && !strings.Contains(missing, "us-east has not heard of ap-east") {
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
