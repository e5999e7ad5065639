package policy

import (
	"math"
	"slices"
	"time"
)

// EstimateError learns how a TTFT estimate compares with what happened:
// the ratio actual / estimated over the last ErrorWindow first tokens, kept
// sorted so its quantiles are read in constant time. A region keeps one
// for its own dispatches and one per peer for its forwards (internal/
// region), the proxy and the simulator alike; the policy decides with its
// quantiles (ErrorSummary) instead of a fixed margin. Not safe for
// concurrent use; the zero value is ready.
type EstimateError struct {
	ring   [ErrorWindow]float64 // the last ratios, in arrival order
	sorted []float64            // the same, sorted
	next   int
	n      int
}

// ErrorWindow is how many recent first tokens an EstimateError keeps: enough
// for a 90th percentile of a handful of samples beyond it, few enough that
// a change of load shows within a minute of traffic.
const ErrorWindow = 64

// MinErrorSamples is how many first tokens an EstimateError needs before
// its quantiles are used; until then decisions fall back to
// SkywalkerConfig.ErrorFraction.
const MinErrorSamples = 8

// Observe folds in one first token that came actual after a decision that
// estimated estimate. Non-positive estimates say nothing and are skipped;
// ratios are kept within [1/16, 16] so one wild sample cannot own a
// quantile.
func (e *EstimateError) Observe(actual, estimate time.Duration) {
	if estimate <= 0 || actual < 0 {
		return
	}
	x := min(max(float64(actual)/float64(estimate), 1.0/16), 16)
	if e.n == ErrorWindow {
		old := e.ring[e.next]
		i, _ := slices.BinarySearch(e.sorted, old)
		e.sorted = slices.Delete(e.sorted, i, i+1)
	} else {
		e.n++
	}
	e.ring[e.next] = x
	e.next = (e.next + 1) % ErrorWindow
	i, _ := slices.BinarySearch(e.sorted, x)
	e.sorted = slices.Insert(e.sorted, i, x)
}

// Summary is what the policy reads: the ratio's quantiles, or the zero
// summary (Known false) before MinErrorSamples.
func (e *EstimateError) Summary() ErrorSummary {
	if e == nil || e.n < MinErrorSamples {
		return ErrorSummary{}
	}
	q := func(p float64) float64 {
		return e.sorted[min(max(int(math.Ceil(p*float64(e.n)))-1, 0), e.n-1)]
	}
	return ErrorSummary{Known: true, P10: q(0.10), P50: q(0.50), P90: q(0.90)}
}

// ErrorSummary is an estimate's learned error: quantiles of actual /
// estimated time to first token over recent decisions. Before anything is
// learned (Known false) the policy uses its configured ErrorFraction.
type ErrorSummary struct {
	Known         bool
	P10, P50, P90 float64
}

// Pessimistic is estimate as late as it runs nine times in ten: what a
// decision that must meet an objective relies on. Unknown: estimate plus
// fallback (ErrorFraction) of itself.
func (s ErrorSummary) Pessimistic(estimate time.Duration, fallback float64) time.Duration {
	if !s.Known {
		return estimate + time.Duration(fallback*float64(estimate))
	}
	return time.Duration(s.P90 * float64(estimate))
}

// Central is estimate as late as it runs half the time: what refusing a
// request relies on (refused only when even the median says it misses).
// Unknown: estimate as it is.
func (s ErrorSummary) Central(estimate time.Duration) time.Duration {
	if !s.Known {
		return estimate
	}
	return time.Duration(s.P50 * float64(estimate))
}

// Spread is the relative width of the error's middle 80%: (P90 − P10) /
// P50, how far apart two estimates must be before they can be told apart.
// Unknown: fallback.
func (s ErrorSummary) Spread(fallback float64) float64 {
	if !s.Known || s.P50 <= 0 {
		return fallback
	}
	return (s.P90 - s.P10) / s.P50
}
