package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPlanFromTheScenario(t *testing.T) {
	out, err := run(t, "plan", "--scenario", "diurnal-3region", "--format", "json")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Isolated   int            `json:"isolated_replicas"`
		Aggregated int            `json:"aggregated_replicas"`
		Savings    float64        `json:"savings"`
		Placement  map[string]int `json:"placement"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if got.Isolated != 18 || got.Aggregated != 13 || len(got.Placement) != 3 {
		t.Errorf("plan %+v, want 18 isolated and 13 aggregated replicas", got)
	}
}

// TestPlanVerifyOnASmallScenario runs --verify end to end on a two-region
// day small enough for CI.
func TestPlanVerifyOnASmallScenario(t *testing.T) {
	dir := t.TempDir()
	scenario := filepath.Join(dir, "two.yaml")
	yaml := `name: two-regions
seed: 3
regions:
  - {name: east, replicas: 2, profile: llama3-8b-h100, utc_offset: -5, jurisdiction: us}
  - {name: west, replicas: 2, profile: llama3-8b-h100, utc_offset: 7, jurisdiction: us}
rtt: [{a: east, b: west, ms: 60}]
slo: {ttft: 1s}
plan_capacity: 8
control_plane: {max_wan_rtt: 120ms}
workload: {kind: diurnal, day: 6m, duration: 6m, peak_rps: 12, valley_ratio: 0.3, mean_turns: 2, think_time: 5s,
  tenants: 4, tenant_prompt_tokens: 512, max_prompt_tokens: 4096, max_output_tokens: 128, lengths: synthetic}
`
	if err := os.WriteFile(scenario, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "plan", "--scenario", scenario, "--verify", "--target", "0.95", "--format", "json", "--out", dir)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		SLO         map[string]float64 `json:"slo_attainment"`
		MinReplicas map[string]int     `json:"min_replicas"`
	}
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if got.MinReplicas["skywalker"] < 1 || got.MinReplicas["local"] < 1 || len(got.SLO) != 2 {
		t.Errorf("verification %+v", got)
	}
	for _, f := range []string{"plan.json", "plan.svg"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
}

func TestPlanRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"plan"},
		{"plan", "--scenario", "quickstart", "--demand", "x.csv"},
		{"plan", "--demand", "/nonexistent.csv", "--capacity", "1"},
		{"plan", "--scenario", "quickstart"}, // no capacity in that scenario
	} {
		if _, err := run(t, args...); err == nil {
			t.Errorf("%v: want an error", args)
		}
	}
}

func TestPlanFromATrace(t *testing.T) {
	out, err := run(t, "plan", "--scenario", "diurnal-3region", "--trace", "azure_conv_2023.csv", "--trace-scale", "24", "--format", "json")
	if err != nil {
		if strings.Contains(err.Error(), "trace") {
			t.Skipf("traces not available: %v", err)
		}
		t.Fatal(err)
	}
	var got struct {
		Isolated   int `json:"isolated_replicas"`
		Aggregated int `json:"aggregated_replicas"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || got.Isolated == 0 || got.Aggregated > got.Isolated {
		t.Errorf("plan from a trace: %+v %v", got, err)
	}
}
