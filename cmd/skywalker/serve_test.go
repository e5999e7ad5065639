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
	listen, _ := cmd.Flags().GetString("listen")
	base := cmdFlagsConfig(listen)
	cfg, err := loadServeConfig(cmd.Flags(), file, func(k string) string { return env[k] }, base, "", "", "", 120, "")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != ":9100" || cfg.Region != "env-region" || cfg.Policy != "local" || cfg.WorkerPool[0] != "http://env:8000" || cfg.Profile != profile.Default {
		t.Errorf("flags > env > file > defaults violated: %+v", cfg)
	}
	if _, err := loadServeConfig(cmd.Flags(), "", func(string) string { return "" }, base, "", "", "", 120, ""); err == nil ||
		!strings.Contains(err.Error(), "REGION_ID") {
		t.Errorf("missing region: err = %v", err)
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
