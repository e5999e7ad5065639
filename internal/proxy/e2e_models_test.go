package proxy_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"skywalker/internal/engine/server"
	"skywalker/internal/node/nodetest"
	"skywalker/internal/proxy"
)

// A fleet of two models and two LoRA adapters, not served everywhere:
// llama-8b (with adapters sql-lora and chat-lora) in every region,
// llama-70b only in us-east and eu-west.
func multiModelEngines(region string) []server.Config {
	small := nodetest.EngineConfig(20)
	small.Model, small.LoRAModules = "llama-8b", []string{"sql-lora", "chat-lora"}
	small.Engine.MaxLoRAs = 2
	big := nodetest.EngineConfig(20)
	big.Model = "llama-70b"
	if region == "ap-east" {
		return []server.Config{small, small}
	}
	return []server.Config{small, big}
}

// modelsServed maps each engine of the cluster (host:port) to the model
// ids its /v1/models lists.
func modelsServed(t *testing.T, engines map[string][]string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, urls := range engines {
		for _, u := range urls {
			resp, err := http.Get(u + "/v1/models")
			if err != nil {
				t.Fatal(err)
			}
			var list struct {
				Data []struct{ ID string } `json:"data"`
			}
			err = json.NewDecoder(resp.Body).Decode(&list)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range list.Data {
				out[strings.TrimPrefix(u, "http://")] = append(out[strings.TrimPrefix(u, "http://")], m.ID)
			}
		}
	}
	return out
}

// TestEveryModelGoesOnlyWhereItIsServed: requests for every model and
// adapter, from every region, reach only replicas that serve them (zero
// misroutes); llama-70b, which ap-east does not serve, is forwarded from
// there; a model nobody serves is a 404 that lists the models that exist;
// /v1/models lists the models only peers serve.
func TestEveryModelGoesOnlyWhereItIsServed(t *testing.T) {
	c := nodetest.Start(t, nodetest.Options{RegionEngines: multiModelEngines, Proxy: func(cfg *proxy.Config) {
		cfg.Profile = "llama3-8b-a100"
		cfg.ModelProfiles = map[string]string{"llama-70b": "llama3-70b-h100x4"}
	}})
	engines := map[string][]string{}
	for _, r := range c.Regions {
		for _, e := range r.Engines {
			engines[r.Region] = append(engines[r.Region], e.URL)
		}
	}
	served := modelsServed(t, engines)
	ap := c.Region("ap-east")
	nodetest.Eventually(t, nodetest.Converge, "ap-east lists llama-70b, which only its peers serve", func() (bool, string) {
		resp, err := http.Get(ap.URL + "/v1/models")
		if err != nil {
			return false, err.Error()
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return strings.Contains(string(body), `"llama-70b"`) && strings.Contains(string(body), "skywalker:"), string(body)
	})
	for _, ingress := range []string{"us-east", "eu-west", "ap-east"} {
		for _, model := range []string{"llama-8b", "sql-lora", "chat-lora", "llama-70b"} {
			for i := range 3 {
				body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"question %d for %s from %s"}],"max_tokens":4,"stream":true}`, model, i, model, ingress)
				r := call(t, c.Region(ingress).URL, body, nil)
				if r.status != 200 {
					t.Errorf("%s from %s: status %d %.200s", model, ingress, r.status, r.body)
					continue
				}
				// A forward's answer carries the serving proxy's headers.
				if !slices.Contains(served[r.replica], model) {
					t.Errorf("%s from %s reached %s in %s, which serves %v: a misroute", model, ingress, r.replica, r.region, served[r.replica])
				}
				if model == "llama-70b" && ingress == "ap-east" && r.ingress != "ap-east" {
					t.Errorf("llama-70b from ap-east was not forwarded (served in %q)", r.region)
				}
				if !strings.Contains(r.body, `"model":"`+model+`"`) {
					t.Errorf("%s from %s: the answer names another model: %.200s", model, ingress, r.body)
				}
			}
		}
	}
	// The engine that serves a forward answers the client's request with a
	// 4xx (a background Responses request to an engine without the store:
	// vLLM's 400): that answer is the client's at once, not a failed
	// forward held until no replica here serves it (the model has none
	// here: the forward's reason says so).
	start := time.Now()
	resp, err := http.Post(ap.URL+"/v1/responses", "application/json", strings.NewReader(`{"model":"llama-70b","input":"hi","background":true}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if took := time.Since(start); resp.StatusCode != 400 || !strings.Contains(string(body), "VLLM_ENABLE_RESPONSES_API_STORE") || took > 10*time.Second {
		t.Errorf("the peer engine's 400 to a request from ap-east: got %d after %v: %.300s", resp.StatusCode, took.Round(time.Millisecond), body)
	}
	if why := resp.Header.Get("X-SkyWalker-Route-Reason"); why != "not-served-here" {
		t.Errorf("a forward of a model ap-east does not serve: reason %q, want not-served-here", why)
	}
	r := call(t, c.Region("us-east").URL, `{"model":"gpt-9","messages":[{"role":"user","content":"hi"}]}`, nil)
	if r.status != 404 || !strings.Contains(r.body, "llama-70b") || !strings.Contains(r.body, "llama-8b") || !strings.Contains(r.body, "model_not_found") {
		t.Errorf("an unknown model: %d %s; want a 404 naming the models served", r.status, r.body)
	}
	r = call(t, c.Region("us-east").URL, `{"messages":[{"role":"user","content":"which model?"}]}`, nil)
	if r.status != 400 || !strings.Contains(r.body, "llama-8b") {
		t.Errorf("no model where two are served: %d %s; want a 400 naming them", r.status, r.body)
	}
}
