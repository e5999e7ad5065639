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
	// The day replayed on the cost plan's fleet, rented replicas only in
	// their hours: every policy asked for, over the whole day.
	var replay struct {
		Replay struct {
			Results []struct {
				Policy   string  `json:"policy"`
				Requests int     `json:"requests"`
				SLO      float64 `json:"slo_attainment"`
			} `json:"results"`
		} `json:"replay"`
	}
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &replay); err != nil {
		t.Fatal(err)
	}
	if rs := replay.Replay.Results; len(rs) != 3 || rs[0].Policy != "skywalker" || rs[0].Requests == 0 || rs[0].SLO <= 0 {
		t.Errorf("replay %+v, want the three policies on the planned fleet", rs)
	}
	for _, f := range []string{"plan.json", "plan.svg", "plan-cost.svg"} {
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
		{"plan", "--scenario", "diurnal-3region", "--term", "2y"},
		{"plan", "--scenario", "diurnal-3region", "--no-on-demand", "mars"},
		{"plan", "--scenario", "diurnal-3region", "--prices", "/nonexistent.yaml"},
		{"plan", "--demand", "testdata/nonexistent.csv", "--capacity", "1", "--profile", "llama9-tpu"},
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

// The plan in money on a fleet of mixed hardware and prices: every option
// side by side, each figure with its source, and the price flags move it
// the way they must.
func TestPlanInMoney(t *testing.T) {
	monthly := func(args ...string) (map[string]float64, string) {
		t.Helper()
		out, err := run(t, append([]string{"plan", "--scenario", "priced-fleet", "--format", "json"}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Cost struct {
				Term    string `json:"term"`
				Options []struct {
					Name    string  `json:"name"`
					Monthly float64 `json:"monthly_cost"`
				} `json:"options"`
				Regions []struct {
					Region         string `json:"region"`
					CapacitySource string `json:"capacity_source"`
					Price          struct {
						Source string `json:"source"`
					} `json:"price"`
				} `json:"regions"`
			} `json:"cost"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, out)
		}
		m := map[string]float64{}
		for _, o := range got.Cost.Options {
			m[o.Name] = o.Monthly
		}
		for _, r := range got.Cost.Regions {
			if !strings.HasPrefix(r.CapacitySource, "configured: ") || !strings.Contains(r.Price.Source, "default") {
				t.Errorf("%s: capacity from %q, prices from %q: want each source named", r.Region, r.CapacitySource, r.Price.Source)
			}
		}
		return m, got.Cost.Term
	}
	base, term := monthly()
	isolated, plan, bound := base["region-isolated, reserved at every peak"], base["planned: shared reservation + on demand"], base["pooling bound"]
	if term != "1y" || !(bound > 0 && bound <= plan && plan < isolated) {
		t.Fatalf("term %s, options %v: want bound ≤ plan < region-isolated", term, base)
	}
	threeYear, term := monthly("--term", "3y")
	if term != "3y" || threeYear["region-isolated, reserved at every peak"] >= isolated {
		t.Errorf("3-year term %v: want reservations cheaper than the 1-year %v", threeYear, base)
	}
	noRent, _ := monthly("--no-on-demand", "us-east,ap-northeast")
	if noRent["planned: shared reservation + on demand"] < plan {
		t.Errorf("no region renting: plan $%.0f, below the plan that may rent ($%.0f)", noRent["planned: shared reservation + on demand"], plan)
	}
	book := filepath.Join(t.TempDir(), "prices.yaml")
	if err := os.WriteFile(book, []byte("gpus: {H100-80GB: {reserved_1y: 1.0}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cheapH100, _ := monthly("--prices", book)
	if cheapH100["planned: shared reservation + on demand"] >= plan {
		t.Errorf("H100s reserved at $1/hour: plan $%.0f, want below $%.0f", cheapH100["planned: shared reservation + on demand"], plan)
	}
	table, err := run(t, "plan", "--scenario", "priced-fleet")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"monthly cost", "pooling bound", "above the pooling bound because", "residency", "no on-demand in eu-west",
		"capacity of us-east: configured", "prices of eu-west: default", "configured: regions.eu-west", "the default prices: Google Cloud Compute Engine list prices"} {
		if !strings.Contains(table, want) {
			t.Errorf("the table does not say %q:\n%s", want, table)
		}
	}
}
