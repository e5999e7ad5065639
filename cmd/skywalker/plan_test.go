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

// A plan whose demand comes from a trace, on a small scenario's regions.
func TestPlanFromATrace(t *testing.T) {
	out, err := run(t, "plan", "--scenario", "../../internal/eval/testdata/two-regions.yaml", "--trace", "azure_conv_2023.csv", "--trace-scale", "24", "--format", "json")
	if err != nil {
		if strings.Contains(err.Error(), "trace") {
			t.Skipf("traces not available: %v", err)
		}
		t.Fatal(err)
	}
	var got struct {
		Isolated   int `json:"isolated_replicas"`
		Aggregated int `json:"aggregated_replicas"`
		Cost       struct {
			Regions []struct {
				Profile        string `json:"profile"`
				CapacitySource string `json:"capacity_source"`
			} `json:"regions"`
		} `json:"cost"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || got.Isolated == 0 || got.Aggregated > got.Isolated {
		t.Errorf("plan from a trace: %+v %v", got, err)
	}
	// Only the demand comes from the trace: the scenario's hardware and
	// capacity stay (they were dropped, and the fleet priced as L4s).
	for _, r := range got.Cost.Regions {
		if r.Profile != "llama3-8b-h100" || !strings.Contains(r.CapacitySource, "plan_capacity") {
			t.Errorf("a region planned from a trace: profile %q, capacity from %q; want the scenario's llama3-8b-h100 and plan_capacity", r.Profile, r.CapacitySource)
		}
	}
	if len(got.Cost.Regions) != 2 {
		t.Errorf("%d regions in the cost plan, want the scenario's 2", len(got.Cost.Regions))
	}
}

// The plan in money on a fleet of mixed hardware and prices: every option
// side by side, each figure with its source, in the table and in
// plan.json; and the price flags move a plan the way they must.
func TestPlanInMoney(t *testing.T) {
	dir := t.TempDir()
	table, err := run(t, "plan", "--scenario", "priced-fleet", "--out", dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"monthly cost", "pooling bound", "above the pooling bound because", "residency", "no on-demand in eu-west",
		"capacity of us-east: configured", "prices of eu-west: default", "configured: regions.eu-west", "the default prices: Google Cloud Compute Engine list prices"} {
		if !strings.Contains(table, want) {
			t.Errorf("the table does not say %q:\n%s", want, table)
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, "plan.json"))
	if err != nil {
		t.Fatal(err)
	}
	base, term := costOptions(t, string(data))
	isolated, plan, bound := base["region-isolated, reserved at every peak"], base["planned: shared reservation + on demand"], base["pooling bound"]
	if term != "1y" || !(bound > 0 && bound <= plan && plan < isolated) {
		t.Fatalf("term %s, options %v: want bound ≤ plan < region-isolated", term, base)
	}

	// The flags, on a small demand file of two regions in reach.
	day := strings.TrimSuffix(strings.Repeat("1, ", 23), ", ") + ", 6"
	demand := filepath.Join(dir, "demand.yaml")
	if err := os.WriteFile(demand, []byte("regions:\n  - {name: a, demand: ["+day+"]}\n  - {name: b, demand: ["+day+"]}\nrtt_ms: {a/b: 40}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	monthly := func(args ...string) (map[string]float64, string) {
		t.Helper()
		out, err := run(t, append([]string{"plan", "--demand", demand, "--capacity", "1", "--format", "json"}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		return costOptions(t, out)
	}
	const planned = "planned: shared reservation + on demand"
	oneYear, _ := monthly()
	threeYear, term := monthly("--term", "3y")
	if term != "3y" || threeYear["region-isolated, reserved at every peak"] >= oneYear["region-isolated, reserved at every peak"] {
		t.Errorf("3-year term %v: want reservations cheaper than the 1-year %v", threeYear, oneYear)
	}
	noRent, _ := monthly("--no-on-demand", "a,b")
	if noRent[planned] <= oneYear[planned] {
		t.Errorf("no region renting: plan $%.0f, want above the plan that rents its one-hour peak ($%.0f)", noRent[planned], oneYear[planned])
	}
	book := filepath.Join(dir, "prices.yaml")
	if err := os.WriteFile(book, []byte("gpus: {H100-80GB: {reserved_1y: 0.1, on_demand: 0.2}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cheap, _ := monthly("--prices", book, "--profile", "llama3-8b-h100")
	if cheap[planned] >= oneYear[planned] {
		t.Errorf("H100s at $0.10 reserved: plan $%.0f, want below the L4 plan's $%.0f", cheap[planned], oneYear[planned])
	}
}

// costOptions reads a plan's JSON: each option's monthly cost, and the
// reserved term; every region's capacity and price must name a source.
func costOptions(t *testing.T, out string) (map[string]float64, string) {
	t.Helper()
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
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	m := map[string]float64{}
	for _, o := range got.Cost.Options {
		m[o.Name] = o.Monthly
	}
	for _, r := range got.Cost.Regions {
		if !strings.HasPrefix(r.CapacitySource, "configured: ") || r.Price.Source == "" {
			t.Errorf("%s: capacity from %q, prices from %q: want each source named", r.Region, r.CapacitySource, r.Price.Source)
		}
	}
	return m, got.Cost.Term
}
