package proxy

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"skywalker/internal/engine"
	"skywalker/internal/engine/server"
	"skywalker/internal/mesh"
)

var clusterKey = base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))

// testRegion is one region of a test cluster: engines, a proxy, a mesh node.
type testRegion struct {
	name    string
	url     string // the proxy's base URL
	engines []*httptest.Server
	proxy   *Server
	mesh    *mesh.Mesh
	cancel  context.CancelFunc
}

type testCluster struct {
	links   *mesh.Links
	regions map[string]*testRegion
}

type clusterOpts struct {
	policy      string
	engines     int
	maxInFlight int
	maxQueue    int
	maxWait     time.Duration
	timeScale   float64
	profile     string
}

// startCluster runs three regions (us-east, eu-west, ap-east) on loopback:
// simulated engines, proxies and a mesh with emulated WAN delays on both
// the gossip links and the proxies' forwarding.
func startCluster(t *testing.T, o clusterOpts) *testCluster {
	t.Helper()
	if o.policy == "" {
		o.policy = "skywalker"
	}
	if o.engines == 0 {
		o.engines = 2
	}
	if o.maxInFlight == 0 {
		o.maxInFlight = 64
	}
	if o.timeScale == 0 {
		o.timeScale = 20
	}
	if o.profile == "" {
		o.profile = "llama3-8b-a100"
	}
	links := mesh.NewLinks()
	links.SetRTT("us-east", "eu-west", 72*time.Millisecond)
	links.SetRTT("us-east", "ap-east", 160*time.Millisecond)
	links.SetRTT("eu-west", "ap-east", 180*time.Millisecond)
	c := &testCluster{links: links, regions: map[string]*testRegion{}}
	var seed string
	for _, spec := range []struct{ name, jur string }{{"us-east", "us"}, {"eu-west", "eu"}, {"ap-east", "ap"}} {
		reg := &testRegion{name: spec.name}
		var pool []string
		for range o.engines {
			p, _ := engine.LookupProfile(o.profile)
			es, err := server.New(server.Config{Model: "m", Engine: engine.Config{Profile: p}, TimeScale: o.timeScale})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			go es.Run(ctx)
			hs := httptest.NewServer(es.Handler())
			t.Cleanup(func() { hs.Close(); cancel() })
			reg.engines = append(reg.engines, hs)
			pool = append(pool, hs.URL)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		reg.url = "http://" + l.Addr().String()
		cfg := DefaultConfig()
		cfg.Region, cfg.Jurisdiction, cfg.WorkerPool, cfg.Listen = spec.name, spec.jur, pool, l.Addr().String()
		cfg.GossipKeys, cfg.MeshPreset, cfg.Policy, cfg.Profile = []string{clusterKey}, "local", o.policy, o.profile
		cfg.MaxWANRTT, cfg.ScrapeInterval, cfg.MaxInFlight = 200*time.Millisecond, 50*time.Millisecond, o.maxInFlight
		if o.maxQueue > 0 {
			cfg.MaxQueue = o.maxQueue
		}
		if o.maxWait > 0 {
			cfg.MaxWait = o.maxWait
		}
		name := spec.name
		srv, err := New(cfg, Options{PeerDelay: func(peer string) time.Duration { return links.RTT(name, peer) / 2 }})
		if err != nil {
			t.Fatal(err)
		}
		tr, err := links.Transport(spec.name)
		if err != nil {
			t.Fatal(err)
		}
		mc := mesh.DefaultConfig(spec.name)
		mc.NodeID, mc.Jurisdiction, mc.APIAddr, mc.Preset, mc.Keys, mc.Transport = spec.name+"-0", spec.jur, reg.url, "local", cfg.GossipKeys, tr
		mc.MaxWANRTT, mc.ProbeInterval, mc.LoadInterval, mc.DigestInterval, mc.ReopenSamples = cfg.MaxWANRTT, 100*time.Millisecond, 100*time.Millisecond, 300*time.Millisecond, 3
		m, err := mesh.New(mc, srv.Router())
		if err != nil {
			t.Fatal(err)
		}
		srv.SetPeers(m)
		ctx, cancel := context.WithCancel(context.Background())
		if err := srv.Start(ctx); err != nil {
			t.Fatal(err)
		}
		go func() { _ = srv.Serve(ctx, l) }()
		reg.proxy, reg.mesh, reg.cancel = srv, m, cancel
		t.Cleanup(func() { cancel(); _ = m.Shutdown() })
		if seed == "" {
			seed = m.Addr()
		} else if _, err := m.Join([]string{seed}); err != nil {
			t.Fatal(err)
		}
		c.regions[spec.name] = reg
	}
	// Ready when every region sees both peers healthy and every gate it
	// should have open is open.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok := true
		for _, reg := range c.regions {
			peers := reg.mesh.Peers()
			healthy := 0
			for _, p := range peers {
				if p.Healthy && p.GateOpen {
					healthy++
				}
			}
			ok = ok && len(peers) == 2 && healthy == 2 && reg.proxy.router.healthyReplicas() == o.engines
		}
		if ok {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatal("cluster did not converge")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// result is what a client saw of one request.
type result struct {
	status      int
	region      string // X-SkyWalker-Region: where it was served
	replica     string
	reason      string
	ingress     string
	ttft        time.Duration
	body        string
	retryAfter  string
	contentType string
}

// call sends one chat request and reads the whole response; for streams
// the TTFT is the first content chunk.
func call(t *testing.T, base, body string, header map[string]string) result {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := result{status: resp.StatusCode, region: resp.Header.Get("X-SkyWalker-Region"), replica: resp.Header.Get("X-SkyWalker-Replica"),
		reason: resp.Header.Get("X-SkyWalker-Route-Reason"), ingress: resp.Header.Get("X-SkyWalker-Ingress-Region"),
		retryAfter: resp.Header.Get("Retry-After"), contentType: resp.Header.Get("Content-Type")}
	var sb strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if r.ttft == 0 && strings.Contains(string(buf[:n]), `"content":"`) && !strings.Contains(string(buf[:n]), `"content":""`) {
				r.ttft = time.Since(start)
			}
			sb.Write(buf[:n])
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("read response: %v", err)
		}
	}
	r.body = sb.String()
	return r
}

func chat(prompt string, maxTokens int, stream bool, extra string) string {
	return fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":%q}],"max_tokens":%d,"stream":%v%s}`, prompt, maxTokens, stream, extra)
}

// burst sends n concurrent streaming requests with distinct prompts to a
// region and returns what each client saw.
func burst(t *testing.T, base string, n, promptWords int) []result {
	t.Helper()
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			prompt := strings.Repeat(fmt.Sprintf("burst request %d asks about regional load. ", i), promptWords)
			results[i] = call(t, base, chat(prompt, 32, true, ""), nil)
		}()
	}
	wg.Wait()
	return results
}

func asErr[T error](err error, target *T) bool { return errors.As(err, target) }
