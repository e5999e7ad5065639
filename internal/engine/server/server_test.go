package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"skywalker/internal/engine"
	"skywalker/internal/profile"
)

func start(t *testing.T, cfg Config) (*Server, string) {
	t.Helper()
	return StartForTest(t, "", cfg)
}

func post(t *testing.T, url, body string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestBadRequestsGetOpenAIErrors(t *testing.T) {
	_, url := start(t, Config{MaxBodyBytes: 1000})
	tests := []struct {
		name, path, body string
		status           int
		code             string
	}{
		{"malformed JSON", "/v1/chat/completions", `{"messages":`, 400, "invalid_request"},
		{"missing messages", "/v1/chat/completions", `{"model":"test-model"}`, 400, "invalid_request"},
		{"missing prompt", "/v1/completions", `{"model":"test-model"}`, 400, "invalid_request"},
		{"unknown model", "/v1/chat/completions", `{"model":"gpt-9","messages":[{"role":"user","content":"hi"}]}`, 404, "model_not_found"},
		{"body over the limit", "/v1/chat/completions", `{"messages":[{"role":"user","content":"` + strings.Repeat("a", 2000) + `"}]}`, 413, "body_too_large"},
		{"too long for the model", "/v1/completions", `{"prompt":"hi","max_tokens":100000000}`, 400, "invalid_request"},
		{"missing input", "/v1/embeddings", `{"model":"test-model"}`, 400, "invalid_request"},
		{"unknown path", "/v1/audio/transcriptions", `{}`, 404, "not_found"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := post(t, url+tc.path, tc.body)
			var e struct {
				Error struct{ Message, Type, Code string }
			}
			if err := json.Unmarshal([]byte(body), &e); err != nil {
				t.Fatalf("body is not JSON: %s", body)
			}
			if resp.StatusCode != tc.status || e.Error.Code != tc.code || e.Error.Message == "" {
				t.Errorf("status %d code %q (%s), want %d %q", resp.StatusCode, e.Error.Code, e.Error.Message, tc.status, tc.code)
			}
		})
	}
}

// sse reads a whole SSE response into its data payloads.
func sse(t *testing.T, r io.Reader) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		if !strings.HasPrefix(line, "data: ") {
			t.Fatalf("unexpected SSE line %q", line)
		}
		out = append(out, strings.TrimPrefix(line, "data: "))
	}
	return out
}

func TestStreamingFormatMatchesVLLM(t *testing.T) {
	_, url := start(t, Config{})
	resp, err := http.Post(url+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"messages":[{"role":"user","content":"hello"}],"max_tokens":4,"stream":true,"stream_options":{"include_usage":true}}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("content type %q", ct)
	}
	events := sse(t, resp.Body)
	// role chunk, 4 tokens, finish chunk, usage chunk, [DONE]
	if len(events) != 8 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("events %d: %v", len(events), events)
	}
	for _, e := range events[:7] {
		if !json.Valid([]byte(e)) {
			t.Fatalf("chunk is not JSON: %s", e)
		}
	}
	if !strings.Contains(events[5], `"finish_reason":"length"`) || !strings.Contains(events[6], `"completion_tokens":4`) {
		t.Errorf("finish %s usage %s", events[5], events[6])
	}
}

func TestMetricsUseVLLMNamesAndCountHits(t *testing.T) {
	_, url := start(t, Config{})
	prompt := strings.Repeat("the same long system prompt ", 100) // ~2.8 KB: 5 blocks
	body := `{"prompt":"` + prompt + `","max_tokens":2}`
	post(t, url+"/v1/completions", body)
	post(t, url+"/v1/completions", body)
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	values := map[string]string{}
	for _, line := range strings.Split(string(text), "\n") {
		if f := strings.Fields(line); len(f) == 2 && !strings.HasPrefix(line, "#") {
			values[f[0][:strings.IndexAny(f[0]+"{", "{")]] = f[1]
		}
	}
	for _, name := range []string{"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
		"vllm:gpu_cache_usage_perc", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:cache_config_info",
		"vllm:time_to_first_token_seconds_count", "vllm:e2e_request_latency_seconds_count", "vllm:inter_token_latency_seconds_count"} {
		if _, ok := values[name]; !ok {
			t.Errorf("metric %s missing", name)
		}
	}
	// Prompt ~700 tokens, 5 complete 128-token blocks: the second request hits 640.
	if values["vllm:prefix_cache_hits_total"] != "640" {
		t.Errorf("prefix cache hits %s, want 640", values["vllm:prefix_cache_hits_total"])
	}
	if !strings.Contains(string(text), `vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="25000"} 1`) {
		t.Error("cache_config_info labels wrong")
	}
}

func TestSGLangMetricsStyle(t *testing.T) {
	_, url := start(t, Config{MetricsStyle: "sglang"})
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, name := range []string{"sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage", "sglang:cache_hit_rate"} {
		if !strings.Contains(string(text), name+"{") {
			t.Errorf("metric %s missing", name)
		}
	}
	if strings.Contains(string(text), "vllm:") {
		t.Error("sglang style must not expose vllm names")
	}
	if _, err := New(Config{Model: "m", MetricsStyle: "tgi"}); err == nil {
		t.Error("unknown metrics style must fail")
	}
}

func TestClientDisconnectAbortsTheSequence(t *testing.T) {
	srv, url := start(t, Config{TimeScale: 1})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/chat/completions",
		strings.NewReader(`{"messages":[{"role":"user","content":"hi"}],"max_tokens":5000,"stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 512)
	if _, err := resp.Body.Read(buf); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var running int
		var aborted int64
		srv.Engine(func(e *engine.Engine) { running, aborted = e.Running()+e.Waiting(), e.Stats().Aborted })
		if running == 0 && aborted == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sequence still held after disconnect: running %d aborted %d", running, aborted)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestFaultInjection(t *testing.T) {
	t.Run("errors", func(t *testing.T) {
		_, url := start(t, Config{Faults: Faults{ErrorRate: 1}})
		resp, _ := post(t, url+"/v1/completions", `{"prompt":"hi","max_tokens":1}`)
		if resp.StatusCode != 500 {
			t.Errorf("status %d, want 500", resp.StatusCode)
		}
	})
	t.Run("stall mid-stream", func(t *testing.T) {
		_, url := start(t, Config{Faults: Faults{StallRate: 1, StallAfter: 3}})
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/completions", strings.NewReader(`{"prompt":"hi","max_tokens":50,"stream":true}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		got, _ := io.ReadAll(resp.Body) // ends when the context times out
		if n := strings.Count(string(got), `"text":"`); n != 3 {
			t.Errorf("received %d tokens before the stall, want 3", n)
		}
		if strings.Contains(string(got), "[DONE]") {
			t.Error("a stalled stream must not claim success")
		}
	})
	t.Run("exit after N", func(t *testing.T) {
		var mu sync.Mutex
		exited := -1
		_, url := start(t, Config{Faults: Faults{ExitAfter: 2}, Exit: func(code int) { mu.Lock(); exited = code; mu.Unlock() }})
		for range 2 {
			post(t, url+"/v1/completions", `{"prompt":"hi","max_tokens":1}`)
		}
		mu.Lock()
		if exited != -1 {
			t.Error("exited too early")
		}
		mu.Unlock()
		post(t, url+"/v1/completions", `{"prompt":"hi","max_tokens":1}`)
		mu.Lock()
		defer mu.Unlock()
		if exited != 3 {
			t.Errorf("exit code %d, want 3 after the third request", exited)
		}
	})
}

func TestModelsAndHealth(t *testing.T) {
	_, url := start(t, Config{Model: "org/model-1"})
	resp, err := http.Get(url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Data []struct{ ID string } `json:"data"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if len(list.Data) != 1 || list.Data[0].ID != "org/model-1" {
		t.Errorf("models %+v", list)
	}
	h, err := http.Get(url + "/health")
	if err != nil || h.StatusCode != 200 {
		t.Errorf("health: %v %v", h, err)
	}
	if _, err := New(Config{Model: "bad name\""}); err == nil {
		t.Error("model names with quotes must be refused")
	}
}

func ExampleServer() {
	p, _ := profile.Lookup("llama3-8b-h100")
	srv, _ := New(Config{Model: "llama3", Engine: engine.Config{Profile: p}, TimeScale: 100})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go srv.Run(ctx)
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	resp, _ := http.Post(hs.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"hi","max_tokens":3}`))
	var body struct {
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	fmt.Println(body.Usage.CompletionTokens)
	// Output: 3
}

// LoRA adapters are served as vLLM serves --lora-modules: listed with the
// model as parent, answered under their own name, named in
// vllm:lora_requests_info with the slots; an adapter it does not serve is
// a 404.
func TestLoRAModulesAreServedAsVLLMServesThem(t *testing.T) {
	_, url := start(t, Config{Model: "llama-8b", LoRAModules: []string{"sql-lora", "chat-lora"}, TimeScale: 50})
	resp, err := http.Get(url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Data []struct {
			ID     string
			Parent *string
		} `json:"data"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if len(list.Data) != 3 || list.Data[0].ID != "llama-8b" || list.Data[0].Parent != nil ||
		list.Data[1].ID != "sql-lora" || list.Data[1].Parent == nil || *list.Data[1].Parent != "llama-8b" {
		t.Fatalf("models %+v: want llama-8b (no parent), then sql-lora and chat-lora with parent llama-8b", list.Data)
	}
	r, body := post(t, url+"/v1/chat/completions", `{"model":"sql-lora","messages":[{"role":"user","content":"select"}],"max_tokens":3}`)
	if r.StatusCode != 200 || !strings.Contains(body, `"model":"sql-lora"`) {
		t.Errorf("an adapter's request: %d %s", r.StatusCode, body)
	}
	if r, body := post(t, url+"/v1/chat/completions", `{"model":"math-lora","messages":[{"role":"user","content":"x"}]}`); r.StatusCode != 404 || !strings.Contains(body, "sql-lora") {
		t.Errorf("an adapter it does not serve: %d %s; want 404 naming what it serves", r.StatusCode, body)
	}
	m, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(m.Body)
	m.Body.Close()
	if !strings.Contains(string(page), `vllm:lora_requests_info{max_lora="1",running_lora_adapters="",waiting_lora_adapters=""}`) {
		t.Errorf("no vllm:lora_requests_info with max_lora 1 (vLLM's default) in:\n%s", page)
	}
}
