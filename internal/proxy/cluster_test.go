package proxy_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"skywalker/internal/node"
	"skywalker/internal/node/nodetest"
	"skywalker/internal/proxy"
)

type clusterOpts struct {
	policy      string
	engines     int
	maxInFlight int
	maxQueue    int
	maxWait     time.Duration
	timeScale   float64
	objective   time.Duration // TTFT objective of every class; 0 keeps the default
	// responses turns the engines' Responses store on (vLLM's
	// VLLM_ENABLE_RESPONSES_API_STORE).
	responses bool
	// startOver lets chains whose home is gone start over
	// (Config.ResponsesStartOver).
	startOver bool
}

// startCluster runs three regions (us-east, eu-west, ap-east) on loopback:
// simulated A100 engines, proxies and a mesh with emulated WAN delays on
// both the gossip links and the proxies' forwarding, and waits until it
// has converged.
func startCluster(t *testing.T, o clusterOpts) *node.Cluster {
	t.Helper()
	if o.timeScale == 0 {
		o.timeScale = 20
	}
	engine := nodetest.EngineConfig(o.timeScale)
	engine.ResponsesStore = o.responses
	return nodetest.Start(t, nodetest.Options{EnginesPerRegion: o.engines, Engine: engine,
		Proxy: func(cfg *proxy.Config) {
			if o.policy != "" {
				cfg.Policy = o.policy
			}
			if o.maxInFlight > 0 {
				cfg.MaxInFlight = o.maxInFlight
			}
			if o.maxQueue > 0 {
				cfg.MaxQueue = o.maxQueue
			}
			if o.maxWait > 0 {
				cfg.MaxWait = o.maxWait
			}
			if o.objective > 0 {
				cfg.TTFTObjective = o.objective
			}
			cfg.ResponsesStartOver = o.startOver
			cfg.Profile = "llama3-8b-a100"
			cfg.TenantHeader = proxy.GatewayTenantHeader // as behind the Inference Gateway
		}})
}

// gateOpen waits until region from routes with the gate to peer open.
func gateOpen(t *testing.T, c *node.Cluster, from, peer string) {
	t.Helper()
	nodetest.Eventually(t, nodetest.Converge, from+"'s gate to "+peer+" opens", func() (bool, string) {
		for _, p := range c.Region(from).Proxy.Peers() {
			if p.Region == peer {
				return p.GateOpen, fmt.Sprintf("gate %s (rtt %v)", p.Gate, p.RTT)
			}
		}
		return false, peer + " not in the router's peers yet"
	})
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
// the TTFT is the first completion chunk (engines send the role chunk
// together with the first token, as vLLM does); an error event is not one.
func call(t *testing.T, base, body string, header map[string]string) result {
	t.Helper()
	return callWith(t, http.DefaultClient, base, body, header)
}

// callWith is call with a client of the caller's (one that trusts the
// cluster's CA, to reach a peer listener).
func callWith(t *testing.T, client *http.Client, base, body string, header map[string]string) result {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	start := time.Now()
	resp, err := client.Do(req)
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
			if r.ttft == 0 && strings.Contains(string(buf[:n]), `"chat.completion.chunk"`) {
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
	return burstWith(t, base, n, promptWords, nil)
}

// burstWith is burst with headers on every request.
func burstWith(t *testing.T, base string, n, promptWords int, header map[string]string) []result {
	t.Helper()
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			prompt := strings.Repeat(fmt.Sprintf("burst request %d asks about regional load. ", i), promptWords)
			results[i] = call(t, base, chat(prompt, 32, true, ""), header)
		}()
	}
	wg.Wait()
	return results
}
