package main

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func TestExplainPrintsEveryPolicy(t *testing.T) {
	out, err := run(t, "explain")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"skywalker", "forward", "eu-west", "cache-aware"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestExplainJSON(t *testing.T) {
	out, err := run(t, "explain", "--format", "json", "--policies", "skywalker,local")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Decisions []struct{ Policy, Action, Region string }
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if len(got.Decisions) != 2 || got.Decisions[0].Region != "eu-west" || got.Decisions[1].Region != "us-east" {
		t.Errorf("decisions %+v", got.Decisions)
	}
}

func TestExplainRejectsBadInput(t *testing.T) {
	if _, err := run(t, "explain", "--format", "xml"); err == nil {
		t.Error("want an error for an unknown format")
	}
	if _, err := run(t, "explain", "--policies", "magic"); err == nil {
		t.Error("want an error for an unknown policy")
	}
	if _, err := run(t, "explain", "/nonexistent.yaml"); err == nil {
		t.Error("want an error for a missing file")
	}
}

func TestSimQuickstartJSON(t *testing.T) {
	out, err := run(t, "sim", "--scenario", "quickstart", "--policies", "skywalker,local", "--format", "json", "--quiet")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Scenario string
		Seed     uint64
		Results  []map[string]any
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if got.Scenario != "quickstart" || len(got.Results) != 2 {
		t.Fatalf("got %+v", got)
	}
	for _, key := range []string{"policy", "requests", "completed", "dropped", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms",
		"e2e_p50_ms", "e2e_p99_ms", "throughput_tok_s", "goodput_rps", "slo_attainment", "cache_hit_rate", "cross_region_share", "utilization"} {
		if _, ok := got.Results[0][key]; !ok {
			t.Errorf("result lacks %q", key)
		}
	}
}

func TestSimWritesAnOutputDirectory(t *testing.T) {
	dir := t.TempDir()
	if _, err := run(t, "sim", "--scenario", "quickstart", "--policies", "skywalker,local", "--sweep", "rate=0.5:1:2", "--out", dir, "--quiet"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"results.json", "report.md", "cache_hit_rate.svg", "queue_skywalker.svg", "token_budget_local.svg", "ttft_vs_load.svg"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || len(b) == 0 {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestSimRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"sim", "--scenario", "nope"},
		{"sim", "--format", "xml"},
		{"sim", "--sweep", "rate=2:1:3"},
		{"sim", "--sweep", "load=1:2:3"},
		{"sim", "--policies", "magic"},
	} {
		if _, err := run(t, args...); err == nil {
			t.Errorf("%v: want an error", args)
		}
	}
}

func TestOneLogFormatWithDurationsAsStrings(t *testing.T) {
	for _, format := range []string{"json", "text", "auto"} {
		var buf bytes.Buffer
		lf := &logFlags{format: format, level: "info"}
		log, err := lf.logger(&buf)
		if err != nil {
			t.Fatal(err)
		}
		log.With("interval", 250*time.Millisecond).Info("draining", "timeout", 30*time.Second)
		line := buf.String()
		if !strings.Contains(line, "30s") || !strings.Contains(line, "250ms") || strings.Contains(line, "30000000000") {
			t.Errorf("--log-format %s: %q; want durations as strings", format, line)
		}
		// auto on a buffer (not a terminal) is JSON.
		if isJSON := json.Valid(buf.Bytes()); isJSON != (format != "text") {
			t.Errorf("--log-format %s: JSON %v: %q", format, isJSON, line)
		}
	}
	for _, lf := range []logFlags{{format: "xml", level: "info"}, {format: "json", level: "loud"}} {
		if _, err := lf.logger(&bytes.Buffer{}); err == nil {
			t.Errorf("%+v: want an error", lf)
		}
	}
}

func TestNumericFlagsAreValidated(t *testing.T) {
	for _, args := range [][]string{
		{"engine", "--time-scale", "-1"},
		{"engine", "--time-scale", "0"},
		{"engine", "--fault-error-rate", "1.5"},
		{"engine", "--kv-blocks", "-5"},
		{"bench", "--endpoints", "http://127.0.0.1:1", "--speedup", "0"},
		{"bench", "--endpoints", "http://127.0.0.1:1", "--max-failed", "2"},
		{"bench", "--endpoints", "http://127.0.0.1:1", "--limit", "-1"},
		{"bench", "gateway", "--rate", "0"},
		{"bench", "gateway", "--duration", "0s"},
		{"plan", "--scenario", "quickstart", "--capacity", "-2"},
		{"plan", "--scenario", "quickstart", "--capacity", "2", "--target", "1.5"},
		{"plan", "--scenario", "quickstart", "--capacity", "2", "--trace-scale", "0"},
		{"plan", "--scenario", "quickstart", "--capacity", "2", "--max-wan-rtt-ms", "-1"},
		{"serve", "--max-in-flight", "0"},
		{"serve", "--max-wan-rtt-ms", "-3"},
		{"demo", "--duration", "-1s"},
		{"demo", "--ports", "9000,9001"},
		{"demo", "--ports", "9000,9001,70000"},
	} {
		out, err := run(t, args...)
		if err == nil || !strings.Contains(err.Error(), "--"+strings.TrimPrefix(args[len(args)-2], "--")) {
			t.Errorf("%v: error %v (output %q); want one naming the flag", args, err, out)
		}
	}
}

func TestBenchExitsNonZeroAndSaysWhy(t *testing.T) {
	// A port nothing listens on: every request is refused.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	out, err := run(t, "bench", "--endpoints", "http://"+addr, "--limit", "3", "--speedup", "50", "--quiet")
	if err == nil || !strings.Contains(err.Error(), "3 of 3 requests failed") || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("bench against a closed port: error %v; want the failure share and the connection error\n%s", err, out)
	}
	out, err = run(t, "bench", "--endpoints", "us-east=http://"+addr, "--limit", "12", "--speedup", "50", "--quiet")
	if !strings.Contains(out, "warning: region eu-west has no endpoint") || !strings.Contains(out, "warning: region ap-east has no endpoint") {
		t.Errorf("bench with one region's endpoint: want warnings for the others\n%s (error %v)", out, err)
	}
}
