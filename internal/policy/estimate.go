package policy

import "time"

// PrefillProfile estimates how long a region's replica takes to prefill n
// uncached prompt tokens: max(Fixed, n·PerToken + n²·PerTokenSquared), a
// roofline — at least one step's memory time (reading the weights), else
// the prefill's compute. The quadratic term is attention over the prompt
// itself, which dominates only for very long prompts. Profiles come from the engine model's hardware
// profiles (internal/engine) or from configuration.
type PrefillProfile struct {
	Fixed    time.Duration
	PerToken time.Duration
	// PerTokenSquared is in nanoseconds per token², a float because it is
	// far below one nanosecond.
	PerTokenSquared float64
}

// Time is the estimated prefill time for n uncached tokens.
func (p PrefillProfile) Time(n int) time.Duration {
	if n <= 0 {
		return 0
	}
	return max(p.Fixed, time.Duration(n)*p.PerToken+time.Duration(float64(n)*float64(n)*p.PerTokenSquared))
}

// Scaled is the profile with every term multiplied by s: the profile of
// an engine s times slower (s > 1) or faster.
func (p PrefillProfile) Scaled(s float64) PrefillProfile {
	if s == 1 {
		return p
	}
	return PrefillProfile{Fixed: time.Duration(float64(p.Fixed) * s), PerToken: time.Duration(float64(p.PerToken) * s), PerTokenSquared: p.PerTokenSquared * s}
}

// EWMA is an exponentially weighted moving average of durations, the
// estimator behind queue-wait predictions. The zero value is unusable; use
// NewEWMA. Not safe for concurrent use.
type EWMA struct {
	alpha float64
	value float64
	seen  bool
}

// NewEWMA returns an average that gives each new sample weight alpha in
// (0, 1]; out-of-range alphas are clamped.
func NewEWMA(alpha float64) *EWMA {
	return &EWMA{alpha: min(max(alpha, 0.001), 1)}
}

// Observe folds in one sample. The first sample sets the value outright.
func (e *EWMA) Observe(d time.Duration) {
	if !e.seen {
		e.value, e.seen = float64(d), true
		return
	}
	e.value += e.alpha * (float64(d) - e.value)
}

// Value is the current average, or zero before any sample.
func (e *EWMA) Value() time.Duration { return time.Duration(e.value) }

// Seen reports whether any sample was observed.
func (e *EWMA) Seen() bool { return e.seen }

// PerRequestWait turns a smoothed per-request service time into how much
// the queue wait grows per request ahead: with slots requests served at
// once, one slot frees every service/slots on average (Little's law). Pass
// the concurrency the replicas actually sustain (their running counts),
// not a configured cap: an engine whose KV cache is full serves far fewer
// requests at once than max-num-seqs allows.
func PerRequestWait(service time.Duration, slots int) time.Duration {
	// Concurrency is a count of requests; clamp so an idle region
	// estimates one request at a time per replica.
	if slots <= 0 {
		return service
	}
	return service / time.Duration(slots)
}
