package results

import (
	"encoding/json"
	"maps"
	"math"
	"skywalker/internal/request"
	"strings"
	"testing"
	"time"
)

func TestPercentileIsNearestRank(t *testing.T) {
	tests := []struct {
		values []float64
		p      float64
		want   float64
	}{
		{nil, 0.5, 0},
		{[]float64{7}, 0.99, 7},
		{[]float64{1, 2, 3, 4}, 0.5, 2},
		{[]float64{1, 2, 3, 4}, 0.51, 3},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.9, 9},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.99, 10},
		{[]float64{1, 2, 3}, 0, 1},
	}
	for _, tc := range tests {
		if got := Percentile(tc.values, tc.p); got != tc.want {
			t.Errorf("Percentile(%v, %v) = %v, want %v", tc.values, tc.p, got, tc.want)
		}
	}
}

func TestCollectorCountsWhatClientsSaw(t *testing.T) {
	ms := time.Millisecond
	c := NewCollector(request.SLO{TTFT: 500 * ms})
	c.Add(Sample{Ingress: "us", Served: "us", Start: 0, End: 2000 * ms, TTFT: 200 * ms, PromptTokens: 1000, OutputTokens: 11, CachedTokens: 500})
	c.Add(Sample{Ingress: "us", Served: "eu", Start: 1000 * ms, End: 3000 * ms, TTFT: 700 * ms, PromptTokens: 1000, OutputTokens: 1, Retried: true})
	c.Add(Sample{Ingress: "eu", Served: "eu", Start: 2000 * ms, End: 4000 * ms, TTFT: 100 * ms, PromptTokens: 2000, OutputTokens: 21})
	c.Add(Sample{Ingress: "eu", Start: 2500 * ms, PromptTokens: 10, Dropped: "queue_timeout"})
	r := c.Result("p")

	checks := []struct {
		name      string
		got, want float64
	}{
		{"requests", float64(r.Requests), 4},
		{"completed", float64(r.Completed), 3},
		{"dropped", float64(r.Dropped), 1},
		{"retried", float64(r.Retried), 1},
		{"SLO attainment counts the drop as a miss", r.SLOAttainment, 0.5},
		{"goodput over the 4 s span", r.GoodputRPS, 0.5},
		{"TTFT p50", float64(r.TTFTP50Ms), 200},
		{"TTFT p99: the drop is never answered", float64(r.TTFTP99Ms), math.Inf(1)},
		{"cache hit rate", r.CacheHitRate, 0.125},
		{"cross-region share", r.CrossRegion, 0.3333},
		{"TPOT: (1800 ms / 10 + 1900 ms / 20) / 2", r.TPOTMs, 137.5},
		{"output tok/s: 33 over 4 s", r.ThroughputTokS, 8.3},
		{"us arrivals", float64(r.Regions["us"].Arrivals), 2},
		{"us forwarded out", float64(r.Regions["us"].ForwardedOut), 1},
		{"eu received", float64(r.Regions["eu"].Received), 1},
		{"eu dropped", float64(r.Regions["eu"].Dropped), 1},
		{"eu served locally", float64(r.Regions["eu"].ServedLocal), 1},
		{"us cache hit", r.Regions["us"].CacheHitRate, 0.25},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %v, want %v", ch.name, ch.got, ch.want)
		}
	}
	if r.Drops["queue_timeout"] != 1 {
		t.Errorf("drop reasons %v", r.Drops)
	}
}

func TestReportFind(t *testing.T) {
	rep := &Report{Results: []*Result{{Policy: "a"}, {Policy: "b"}}}
	if rep.Find("b") != rep.Results[1] || rep.Find("c") != nil {
		t.Error("Find does not find by policy")
	}
}

func TestANeverAnsweredLatencyIsNullInJSON(t *testing.T) {
	b, err := json.Marshal(RegionStats{TTFTP50Ms: 12.5, TTFTP99Ms: Never})
	if err != nil || !strings.Contains(string(b), `"ttft_p50_ms":12.5`) || !strings.Contains(string(b), `"ttft_p99_ms":null`) {
		t.Fatalf("%s, %v", b, err)
	}
	var back RegionStats
	if err := json.Unmarshal(b, &back); err != nil || back.TTFTP50Ms != 12.5 || !back.TTFTP99Ms.Missed() {
		t.Errorf("round trip: %+v, %v", back, err)
	}
}

func TestAnSLOScaledByPromptLengthJudgesEachRequestByItsOwn(t *testing.T) {
	ms := time.Millisecond
	c := NewCollector(request.SLO{TTFT: 2 * time.Second, PerKTokens: 100 * ms})
	c.Add(Sample{Ingress: "us", Served: "us", End: 20 * time.Second, TTFT: 9 * time.Second, PromptTokens: 100_000}) // within 12 s
	c.Add(Sample{Ingress: "us", Served: "us", End: 20 * time.Second, TTFT: 2100 * ms, PromptTokens: 500})           // over 2.05 s
	if r := c.Result("p"); r.SLOAttainment != 0.5 {
		t.Errorf("SLO attainment %v, want 0.5: the long prompt meets its own objective, the short one misses", r.SLOAttainment)
	}
}

func TestAdmissionIsCountedApartFromFailures(t *testing.T) {
	ms := time.Millisecond
	c := NewCollector(request.SLO{TTFT: time.Second})
	c.Add(Sample{Ingress: "us", Served: "us", End: time.Second, TTFT: 200 * ms, Tenant: "a", Class: "critical"})
	c.Add(Sample{Ingress: "us", Served: "us", End: 3 * time.Second, TTFT: 1500 * ms, Tenant: "a"}) // late
	c.Add(Sample{Ingress: "us", Dropped: "overloaded", Tenant: "b"})                               // refused on arrival
	c.Add(Sample{Ingress: "us", Dropped: "shed", Tenant: "b"})                                     // admitted, then shed
	c.Add(Sample{Ingress: "us", Dropped: "queue_full", Tenant: "b"})                               // refused on arrival
	r := c.Result("p")
	if r.Refused != 2 || r.Shed != 1 {
		t.Errorf("refused %d shed %d, want 2 and 1", r.Refused, r.Shed)
	}
	if r.SLOAttainment != 0.2 || r.AdmittedSLOAttainment != 0.3333 {
		t.Errorf("SLO %v admitted SLO %v, want 0.2 of all and 1/3 of the admitted", r.SLOAttainment, r.AdmittedSLOAttainment)
	}
	a, b := r.Tenants["a"], r.Tenants["b"]
	if a.Requests != 2 || a.SLOAttainment != 0.5 || b.Requests != 3 || b.Refused != 2 || b.Shed != 1 || b.AdmittedSLOAttainment != 0 {
		t.Errorf("tenants %+v", r.Tenants)
	}
	if r.Classes["critical"].Requests != 1 || r.Classes["standard"].Requests != 4 {
		t.Errorf("classes %+v", r.Classes)
	}
	one := NewCollector(request.SLO{TTFT: time.Second})
	one.Add(Sample{Ingress: "us", Served: "us", End: time.Second, TTFT: 10 * ms})
	if r := one.Result("p"); r.Tenants != nil || r.Classes != nil {
		t.Error("a run with one tenant and one class has no breakdown")
	}
}

func TestMissesArePutDownToTheLargestPartOrToHowTheRequestEnded(t *testing.T) {
	ms := time.Millisecond
	c := NewCollector(request.SLO{TTFT: time.Second})
	c.RecordOutcomes()
	parts := func(hold, network, queue, prefill time.Duration) *TTFTParts {
		return &TTFTParts{Hold: hold, Network: network, EngineQueue: queue, Prefill: prefill}
	}
	c.Add(Sample{ID: "a", Ingress: "us", Served: "us", End: time.Second, TTFT: 300 * ms, Parts: parts(0, 100*ms, 0, 200*ms)})       // met
	c.Add(Sample{ID: "b", Ingress: "us", Served: "us", End: time.Second, TTFT: 1500 * ms, Parts: parts(900*ms, 100*ms, 0, 500*ms)}) // late: hold
	c.Add(Sample{ID: "c", Ingress: "us", Served: "eu", End: time.Second, TTFT: 1200 * ms, Parts: parts(0, 200*ms, 700*ms, 300*ms)}) // late: engine queue
	c.Add(Sample{ID: "d", Ingress: "us", Dropped: "overloaded"})
	c.Add(Sample{ID: "e", Ingress: "us", Dropped: "shed"})
	c.Add(Sample{ID: "f", Ingress: "us", Dropped: "client_timeout"})
	r := c.Result("p")
	tp := r.TimeParts
	if tp == nil {
		t.Fatal("no time parts, though every completed sample had them")
	}
	want := map[string]int{CauseHold: 1, CauseEngineQueue: 1, CauseRefused: 1, CauseShed: 1, CauseFailed: 1}
	if !maps.Equal(tp.Misses, want) {
		t.Errorf("misses %v, want %v", tp.Misses, want)
	}
	if tp.HoldMeanMs != 300 || tp.PrefillP99Ms != 500 || tp.EngineQueueMeanMs != 233.3 {
		t.Errorf("parts %+v: want hold mean 300, prefill p99 500, engine queue mean 233.3", tp)
	}
	if got := tp.MissSummary(); got != "hold 20% · engine_queue 20% · refused 20% · shed 20% · failed 20%" {
		t.Errorf("summary %q", got)
	}
	// The same arrivals without admission: d was answered in time, e late.
	w := NewCollector(request.SLO{TTFT: time.Second})
	w.RecordOutcomes()
	w.Add(Sample{ID: "d", Ingress: "us", Served: "us", End: time.Second, TTFT: 900 * ms})
	w.Add(Sample{ID: "e", Ingress: "us", Served: "us", End: time.Second, TTFT: 1900 * ms})
	if n := RefusedButServable(r, w.Result("p")); n != 1 {
		t.Errorf("refused but servable %d, want 1 (d)", n)
	}
	live := NewCollector(request.SLO{TTFT: time.Second})
	live.Add(Sample{Ingress: "us", Served: "us", End: time.Second, TTFT: 300 * ms})
	if live.Result("p").TimeParts != nil {
		t.Error("a run whose samples do not know their parts has time parts")
	}
}
