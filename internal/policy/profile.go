package policy

import (
	"time"

	"skywalker/internal/profile"
)

// PrefillOf is the routing estimate of profile p's prefill time: the
// per-token cost and half the pair cost per token² (a prompt of n tokens
// has about n²/2 attention pairs), at least one iteration's memory time.
func PrefillOf(p profile.Profile) PrefillProfile {
	return PrefillProfile{Fixed: p.StepOverhead, PerToken: p.PrefillPerToken, PerTokenSquared: p.AttendPerPair / 2}
}

// ConfigFor is every policy's default configuration for replicas of
// profile p behind a WAN cap of maxWANRTT: GORGO's per-token costs are the
// profile's own.
func ConfigFor(p profile.Profile, maxWANRTT time.Duration) Config {
	pc := DefaultConfig()
	pc.Skywalker.MaxWANRTT = maxWANRTT
	pc.Gorgo = GorgoConfig{PrefillPerToken: p.PrefillPerToken, QueuePerToken: p.QueuePerToken}
	return pc
}
