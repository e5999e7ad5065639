package results

import (
	"encoding/json"
	"math"
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
	c := NewCollector(SLO{TTFT: 500 * ms})
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
	slo := SLO{TTFT: 2 * time.Second, PerKTokens: 100 * ms}
	tests := []struct {
		prompt int
		want   time.Duration
	}{
		{0, 2 * time.Second},
		{500, 2050 * ms},
		{100_000, 12 * time.Second},
		{-5, 2 * time.Second},
	}
	for _, tc := range tests {
		if got := slo.For(tc.prompt); got != tc.want {
			t.Errorf("For(%d) = %v, want %v", tc.prompt, got, tc.want)
		}
	}
	if got := slo.String(); got != "2s + 100ms per 1k prompt tokens" {
		t.Errorf("String() = %q", got)
	}
	c := NewCollector(slo)
	c.Add(Sample{Ingress: "us", Served: "us", End: 20 * time.Second, TTFT: 9 * time.Second, PromptTokens: 100_000}) // within 12 s
	c.Add(Sample{Ingress: "us", Served: "us", End: 20 * time.Second, TTFT: 2100 * ms, PromptTokens: 500})           // over 2.05 s
	if r := c.Result("p"); r.SLOAttainment != 0.5 {
		t.Errorf("SLO attainment %v, want 0.5: the long prompt meets its own objective, the short one misses", r.SLOAttainment)
	}
}
