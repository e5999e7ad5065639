package demo

import (
	"math"
	"strings"
	"testing"

	"skywalker/internal/results"
)

// A percentile no answer reached says so in words, never "∞" (a reader
// took it for a latency), with a note on what it means.
func TestTheSummarySaysWhatAnInfinitePercentileMeans(t *testing.T) {
	fine := results.RegionStats{Arrivals: 100, TTFTP50Ms: 300, TTFTP99Ms: 900}
	lost := results.RegionStats{Arrivals: 100, TTFTP50Ms: 1200, TTFTP99Ms: results.Millis(math.Inf(1))}
	var b strings.Builder
	printSummary(&b, Summary{Regions: map[string]results.RegionStats{"ap-east": fine}, Overall: fine,
		LocalBaseline: &Baseline{Regions: map[string]results.RegionStats{"ap-east": lost}, Overall: lost}})
	out := b.String()
	if strings.Contains(out, "∞") || strings.Contains(out, "Inf") || !strings.Contains(out, "unanswered") || !strings.Contains(out, "got no first token") {
		t.Errorf("the summary of a region whose p99 no answer reached:\n%s", out)
	}
	b.Reset()
	printSummary(&b, Summary{Regions: map[string]results.RegionStats{"ap-east": fine}, Overall: fine,
		LocalBaseline: &Baseline{Regions: map[string]results.RegionStats{"ap-east": fine}, Overall: fine}})
	if strings.Contains(b.String(), "unanswered") {
		t.Errorf("every percentile answered, yet:\n%s", b.String())
	}
}
