package plan

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"skywalker/internal/sim"
	"skywalker/internal/workload"
)

func TestFromScenarioReproducesTheCurve(t *testing.T) {
	s, err := sim.Builtin("diurnal-3region")
	if err != nil {
		t.Fatal(err)
	}
	in, err := FromScenario(s)
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Regions) != 3 || in.MaxWANRTT != 200*time.Millisecond || in.RTT[[2]string{"us-east", "eu-west"}] != 72*time.Millisecond {
		t.Fatalf("input %+v", in)
	}
	// us-east (UTC-5) peaks at 19:00 UTC (14:00 local) with the scenario's
	// peak rate.
	peak := s.Workload.PeakRPS
	if d := in.Regions[0].Demand[19]; math.Abs(d-peak) > 0.01*peak {
		t.Errorf("us-east at 19:00 UTC: %v requests/s, want the %v peak", d, peak)
	}
	if d := in.Regions[0].Demand[7]; d > 0.31*peak {
		t.Errorf("us-east at 07:00 UTC (02:00 local): %v requests/s, want the night valley (30%% of %v)", d, peak)
	}
}

func TestParseDemandCSV(t *testing.T) {
	var b strings.Builder
	b.WriteString("region,hour,requests_per_s,jurisdiction\n")
	for h := range 24 {
		b.WriteString("a," + strconv.Itoa(h) + ",10,eu\n")
		b.WriteString("b," + strconv.Itoa(h) + ",5,us\n")
	}
	in, err := ParseDemandCSV(strings.NewReader(b.String()))
	if err != nil || len(in.Regions) != 2 || in.Regions[0].Demand[5] != 10 || in.Regions[1].Jurisdiction != "us" {
		t.Fatalf("%+v %v", in, err)
	}
	for name, bad := range map[string]string{
		"no header":     "",
		"no hour":       "region,requests_per_s\na,1\n",
		"bad hour":      "region,hour,requests_per_s\na,24,1\n",
		"negative":      "region,hour,requests_per_s\na,1,-1\n",
		"duplicate":     "region,hour,requests_per_s\na,1,1\na,1,2\n",
		"no rows":       "region,hour,requests_per_s\n",
		"bad residency": "region,hour,requests_per_s,residency_share\na,1,1,2\n",
	} {
		if _, err := ParseDemandCSV(strings.NewReader(bad)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestParseDemandYAML(t *testing.T) {
	hours := "[" + strings.TrimSuffix(strings.Repeat("1,", 24), ",") + "]"
	good := "regions:\n  - {name: a, demand: " + hours + "}\n  - {name: b, demand: " + hours + "}\nrtt_ms: {a/b: 50}\nmax_wan_rtt_ms: 120\n"
	in, err := ParseDemandYAML([]byte(good))
	if err != nil || len(in.Regions) != 2 || in.RTT[[2]string{"a", "b"}] != 50*time.Millisecond {
		t.Fatalf("%+v %v", in, err)
	}
	for name, bad := range map[string]string{
		"short demand": "regions: [{name: a, demand: [1, 2]}]\n",
		"unknown key":  good + "extra: 1\n",
		"bad rtt":      strings.Replace(good, "a/b", "a-b", 1),
		"empty":        "regions: []\n",
	} {
		if _, err := ParseDemandYAML([]byte(bad)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestFromProxiesAveragesDaysAndAddsProxies(t *testing.T) {
	serve := func(region string, requests ...int64) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			var hours []map[string]any
			for d, n := range requests {
				hours = append(hours, map[string]any{"hour": time.Date(2026, 1, 1+d, 14, 0, 0, 0, time.UTC), "requests": n})
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"region": region, "hours": hours})
		}))
	}
	a1, a2 := serve("a", 3600, 7200), serve("a", 3600)
	defer a1.Close()
	defer a2.Close()
	in, err := FromProxies(context.Background(), []string{a1.URL, a2.URL})
	if err != nil {
		t.Fatal(err)
	}
	// proxy 1 averages 1.5 requests/s at 14:00 over two days; proxy 2 adds 1.
	if len(in.Regions) != 1 || in.Regions[0].Demand[14] != 2.5 {
		t.Errorf("demand %+v", in.Regions)
	}
}

func FuzzParseDemandCSV(f *testing.F) {
	f.Add([]byte("region,hour,requests_per_s\na,1,2\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		in, err := ParseDemandCSV(strings.NewReader(string(data)))
		if err == nil {
			in.Capacity = 1
			_, _ = Solve(in)
		}
	})
}

func FuzzParseDemandYAML(f *testing.F) {
	f.Add([]byte("regions: [{name: a, demand: [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}]\n"))
	f.Add([]byte("regions: [{name: a, profile: llama3-8b-h100, capacity: 12, demand: [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,9]}, {name: b, demand: [2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2]}]\nrtt_ms: {a/b: 80}\nmax_wan_rtt_ms: 200\n"))
	f.Add([]byte("regions: [{name: a, profile: tpu-v9, demand: []}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		in, err := ParseDemandYAML(data)
		if err != nil || len(in.Regions) > 3 {
			return
		}
		in.Capacity = 1
		if in.Price(nil, "") == nil {
			_, _ = PlanCost(in)
		}
	})
}

// A demand file says each region's hardware and capacity; the cost plan
// prices each region's own GPU and keeps the file's capacity as
// configured.
func TestADemandFileGivesEachRegionItsHardware(t *testing.T) {
	day := strings.TrimSuffix(strings.Repeat("4, ", 24), ", ")
	in, err := ParseDemandYAML([]byte("regions:\n" +
		"  - {name: fast, profile: llama3-8b-h100, capacity: 12, demand: [" + day + "]}\n" +
		"  - {name: slow, demand: [" + day + "]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Price(nil, "llama3-8b-a100"); err != nil {
		t.Fatal(err)
	}
	in.SetCapacities(nil, Capacity{PerReplica: 5, Source: "configured: --capacity"})
	cp, err := PlanCost(in)
	if err != nil {
		t.Fatal(err)
	}
	fast, slow := cp.Regions[0], cp.Regions[1]
	if fast.GPU != "H100-80GB" || fast.Capacity != 12 || fast.CapacitySource != "configured: the demand file" ||
		slow.GPU != "A100-80GB" || slow.Capacity != 5 || slow.CapacitySource != "configured: --capacity" {
		t.Errorf("fast %s %.0f (%s), slow %s %.0f (%s): want each region's own hardware and capacity", fast.GPU, fast.Capacity, fast.CapacitySource, slow.GPU, slow.Capacity, slow.CapacitySource)
	}
	if _, err := ParseDemandYAML([]byte("regions: [{name: a, profile: tpu-v9, demand: [" + day + "]}]")); err == nil || !strings.Contains(err.Error(), "regions[0].profile") {
		t.Errorf("an unknown profile: %v", err)
	}
}

func TestFromTraceShiftsThePatternByTimeZone(t *testing.T) {
	var recs []workload.TraceRecord
	// 240 requests in the first 24th of the trace, 24 in every other.
	for i := range 240 {
		recs = append(recs, workload.TraceRecord{At: time.Duration(i) * time.Second / 2})
	}
	for b := 1; b < 24; b++ {
		for i := range 24 {
			recs = append(recs, workload.TraceRecord{At: time.Duration(b)*150*time.Second + time.Duration(i)*time.Second})
		}
	}
	in, err := FromTrace(recs, []RegionTZ{{Name: "utc"}, {Name: "plus3", UTCOffset: 3}}, 36)
	if err != nil {
		t.Fatal(err)
	}
	// The busy bucket is hour 0 local: 00:00 UTC for utc, 21:00 UTC for plus3.
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if !near(in.Regions[0].Demand[0], 2.4) || !near(in.Regions[1].Demand[21], 2.4) || !near(in.Regions[1].Demand[0], 0.24) {
		t.Errorf("demand %v / %v", in.Regions[0].Demand, in.Regions[1].Demand)
	}
}
