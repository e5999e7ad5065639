package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	for _, name := range []string{"results.json", "report.md", "cache_hit_rate.svg", "queue_skywalker.svg", "utilization_local.svg", "ttft_vs_load.svg"} {
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
