package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"skywalker/internal/engine"
	"skywalker/internal/engine/server"
	"skywalker/internal/profile"
	"skywalker/internal/proxy"
)

func TestServeConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "serve.yaml")
	if err := os.WriteFile(file, []byte("region: file-region\nlisten: ':7000'\npolicy: local\nworker_pool: [http://file:8000]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := newServeCommand(&logFlags{})
	if err := cmd.ParseFlags([]string{"--listen", ":9100"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"REGION_ID": "env-region", "SKYWALKER_LISTEN": ":8100", "LOCAL_WORKER_POOL": "http://env:8000"}
	cfg, err := loadServeConfig(cmd.Flags(), file, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != ":9100" || cfg.Region != "env-region" || cfg.Policy != "local" || cfg.WorkerPool[0] != "http://env:8000" || cfg.Profile != profile.Default {
		t.Errorf("flags > env > file > defaults violated: %+v", cfg)
	}
	if _, err := loadServeConfig(cmd.Flags(), "", func(string) string { return "" }); err == nil ||
		!strings.Contains(err.Error(), "REGION_ID") {
		t.Errorf("missing region: err = %v", err)
	}
}

// TestServeFlagsAreTheSettings: each flag reads its setting as the
// environment does, over the environment, and refuses bad text by name.
func TestServeFlagsAreTheSettings(t *testing.T) {
	required := map[string]string{"REGION_ID": "us-east", "LOCAL_WORKER_POOL": "http://a:8000", "SKYWALKER_FAIR_QUEUING": "true"}
	tests := []struct {
		args []string
		want func(proxy.Config) bool
	}{
		{[]string{"--max-wan-rtt-ms", "150"}, func(c proxy.Config) bool { return c.MaxWANRTT == 150*time.Millisecond }},
		{[]string{"--fair-queuing=false"}, func(c proxy.Config) bool { return !c.FairQueuing }},
		{[]string{"--midstream-failover"}, func(c proxy.Config) bool { return c.MidStreamFailover }},
		{[]string{"--emulate-wan", "eu-west=72ms"}, func(c proxy.Config) bool { return c.EmulateWAN["eu-west"] == 72*time.Millisecond }},
		{[]string{"--workers", "http://b:8000,http://c:8000"}, func(c proxy.Config) bool { return len(c.WorkerPool) == 2 }},
		{[]string{"--ttft-objective", "2s", "--tenant-max-held", "4"}, func(c proxy.Config) bool { return c.TTFTObjective == 2*time.Second && c.TenantMaxHeld == 4 }},
	}
	for _, tc := range tests {
		cmd := newServeCommand(&logFlags{})
		if err := cmd.ParseFlags(tc.args); err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		cfg, err := loadServeConfig(cmd.Flags(), "", func(k string) string { return required[k] })
		if err != nil || !tc.want(cfg) {
			t.Errorf("%v: not applied (err %v)", tc.args, err)
		}
	}
	for _, bad := range [][]string{{"--max-in-flight", "many"}, {"--max-wan-rtt-ms", "fast"}, {"--peers", "no-colon"}, {"--fair-queuing=perhaps"}} {
		if err := newServeCommand(&logFlags{}).ParseFlags(bad); err == nil || !strings.Contains(err.Error(), bad[0][:strings.IndexAny(bad[0]+"=", "=")]) {
			t.Errorf("%v: err = %v, want it refused naming the flag", bad, err)
		}
	}
	cmd := newServeCommand(&logFlags{})
	if err := cmd.ParseFlags([]string{"--max-in-flight", "0"}); err != nil {
		t.Fatal(err)
	}
	if _, err := loadServeConfig(cmd.Flags(), "", func(k string) string { return required[k] }); err == nil || !strings.Contains(err.Error(), "--max-in-flight): must be positive") {
		t.Errorf("--max-in-flight 0: err = %v", err)
	}
}

func TestServeASingleRegion(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	engURL := testEngine(t, ctx)

	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	cfg := cmdFlagsConfig(addr)
	cfg.Region, cfg.WorkerPool = "solo", []string{engURL}
	done := make(chan error, 1)
	go func() { done <- runServe(ctx, cfg, slog.New(slog.DiscardHandler)) }()

	var resp *http.Response
	var err error
	for range 100 {
		resp, err = http.Post("http://"+addr+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"messages":[{"role":"user","content":"hi"}],"max_tokens":3}`))
		if err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-SkyWalker-Region") != "solo" {
		t.Fatalf("status %d region %q body %s", resp.StatusCode, resp.Header.Get("X-SkyWalker-Region"), body)
	}
	cancel() // SIGTERM: drain and return
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not shut down")
	}
}

func TestBenchAgainstAnEngine(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, err := run(t, "bench", "--scenario", "quickstart", "--endpoints", testEngine(t, ctx), "--limit", "15", "--speedup", "20", "--format", "json")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, `"completed": 15`) || !strings.Contains(out, `"policy": "live"`) {
		t.Errorf("bench output:\n%s", out)
	}
}

// testEngine runs a fast simulated engine on loopback until ctx ends.
func testEngine(t *testing.T, ctx context.Context) string {
	t.Helper()
	p, _ := profile.Lookup("llama3-8b-h100")
	_, url, err := server.ServeLoopback(ctx, server.Config{Model: "m", Engine: engine.Config{Profile: p}, TimeScale: 50})
	if err != nil {
		t.Fatal(err)
	}
	return url
}

// cmdFlagsConfig is the default configuration with a listen address, as
// the flags would give it.
func cmdFlagsConfig(listen string) proxy.Config {
	c := proxy.DefaultConfig()
	c.Listen = listen
	return c
}
