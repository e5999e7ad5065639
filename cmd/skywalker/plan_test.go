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
	// Isolated: each region's 3 requests/s peak over 0.32 per replica is
	// 9.4, so 10 each. Aggregated: the three curves' sum peaks at 6.7
	// requests/s, 21 replicas — the fleet the scenario runs.
	if got.Isolated != 30 || got.Aggregated != 21 || len(got.Placement) != 3 {
		t.Errorf("plan %+v, want 30 isolated and 21 aggregated replicas", got)
	}
}

// TestPlanVerifyOnASmallScenario runs --verify end to end on a two-region
// day small enough for CI.
func TestPlanVerifyOnASmallScenario(t *testing.T) {
	dir := t.TempDir()
	scenario := "../../internal/eval/testdata/two-regions.yaml"
	out, err := run(t, "plan", "--scenario", scenario, "--verify", "--target", "0.95", "--seeds", "2",
		"--policies", "skywalker,local,cache-aware@east", "--format", "json", "--out", dir)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Planned      int `json:"planned_replicas"`
		Verification struct {
			Role     string `json:"role"`
			Variants []struct {
				Variant     string `json:"variant"`
				MinReplicas struct {
					Mean  float64 `json:"mean"`
					Seeds int     `json:"seeds"`
				} `json:"min_replicas"`
				Load []struct {
					Replicas int `json:"replicas"`
				} `json:"load_curve"`
			} `json:"variants"`
		} `json:"verification"`
	}
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	v := got.Verification
	if v.Role != "evaluation" || len(v.Variants) != 3 {
		t.Fatalf("verification %+v, want three variants of an evaluation scenario", v)
	}
	for i, want := range []string{"skywalker", "local", "cache-aware@east"} {
		vr := v.Variants[i]
		if vr.Variant != want || vr.MinReplicas.Seeds != 2 || vr.MinReplicas.Mean < 2 || len(vr.Load) != 1 || vr.Load[0].Replicas != got.Planned {
			t.Errorf("variant %d: %+v, want %s searched on 2 seeds and measured at the planned %d replicas", i, vr, want, got.Planned)
		}
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
		{"plan", "--scenario", "diurnal-3region", "--verify", "--policies", "nonsense"},
		{"plan", "--scenario", "diurnal-3region", "--verify", "--policies", "cache-aware@mars"},
		{"plan", "--scenario", "diurnal-3region", "--verify", "--seeds", "0"},
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
