package policy

import (
	"math"
	"slices"
	"time"
)

// EstimateError learns how a TTFT estimate compares with what happened:
// the difference actual − estimated over the last ErrorWindow first
// tokens, kept sorted so its quantiles are read in constant time. A
// region keeps one for its own dispatches and one per peer for its
// forwards (internal/region), the proxy and the simulator alike; the
// policy decides with its quantiles (ErrorSummary) instead of a fixed
// margin.
//
// The error is additive, in time: what an estimate misses is mostly
// waiting — a queue that grew since the load data was sent, a batch that
// ran slower than an idle step — which does not scale with the request's
// own prefill; an engine slower than its profile all round is learned
// apart, as the region's speed, and scales the profile itself. Not safe
// for concurrent use; the zero value is ready.
type EstimateError struct {
	ring   [ErrorWindow]time.Duration // the last differences, in arrival order
	sorted []time.Duration            // the same, sorted
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
// estimated estimate. Decisions without an estimate say nothing and are
// skipped.
func (e *EstimateError) Observe(actual, estimate time.Duration) {
	if estimate <= 0 || actual < 0 {
		return
	}
	x := actual - estimate
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

// Summary is what the policy reads: the error's quantiles, or the zero
// summary (Known false) before MinErrorSamples.
func (e *EstimateError) Summary() ErrorSummary {
	if e == nil || e.n < MinErrorSamples {
		return ErrorSummary{}
	}
	q := func(p float64) time.Duration {
		return e.sorted[min(max(int(math.Ceil(p*float64(e.n)))-1, 0), e.n-1)]
	}
	return ErrorSummary{Known: true, P10: q(0.10), P50: q(0.50), P90: q(0.90)}
}

// ErrorSummary is an estimate's learned error: quantiles of actual −
// estimated time to first token over recent decisions (negative: it came
// sooner). Before anything is learned (Known false) the policy uses its
// configured ErrorFraction.
type ErrorSummary struct {
	Known         bool
	P10, P50, P90 time.Duration
}

// Pessimistic is estimate as late as it runs nine times in ten: what a
// decision that must meet an objective relies on. Unknown: estimate plus
// fallback (ErrorFraction) of itself.
func (s ErrorSummary) Pessimistic(estimate time.Duration, fallback float64) time.Duration {
	if !s.Known {
		return estimate + time.Duration(fallback*float64(estimate))
	}
	return max(estimate+s.P90, 0)
}

// Central is estimate as late as it runs half the time: what a bet on the
// typical outcome relies on. Unknown: estimate as it is.
func (s ErrorSummary) Central(estimate time.Duration) time.Duration {
	if !s.Known {
		return estimate
	}
	return max(estimate+s.P50, 0)
}
