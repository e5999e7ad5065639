package region

import "time"

// ControlPlane is the timing of what a region learns and publishes: how
// often it scrapes and health-checks its replicas, how often it tells its
// peers its load and prefix digest, and how it judges the link to each
// peer. The proxy, the mesh and the simulator all start from
// DefaultControlPlane, so the simulator's peers see data exactly as old as
// the product's do.
type ControlPlane struct {
	// ScrapeInterval: replicas' /metrics are read this often. Default
	// 100 ms: an engine's queue changes every step (tens of ms).
	ScrapeInterval time.Duration
	// HealthInterval: replicas' /health is checked this often; it is what
	// re-admits an ejected replica. Default 1 s.
	HealthInterval time.Duration
	// PumpInterval: held requests are re-routed and the peers' snapshot
	// refreshed at least this often, even when nothing else happens.
	// Default 50 ms.
	PumpInterval time.Duration
	// LoadInterval: a node sends its load summary to every peer at least
	// this often. Default 250 ms: the summary is ~60 bytes.
	LoadInterval time.Duration
	// LoadCheck: how often a node looks whether its load changed enough
	// (Significant) to publish before LoadInterval ends. Default 50 ms.
	LoadCheck time.Duration
	// DigestInterval: a node publishes its prefix digest at most this
	// often. Default 2 s: digests are kilobytes, prefixes change slowly.
	DigestInterval time.Duration
	// MaxDataAge: a peer whose newest load summary arrived longer ago is
	// unavailable, not idle. Default 2 s (eight missed summaries).
	MaxDataAge time.Duration
	// ProbeInterval: one node of every peer region is pinged this often,
	// so every link has RTT and loss samples. Default 1 s.
	ProbeInterval time.Duration
	// RTTAlpha is the weight of a new RTT or loss sample in its moving
	// average. Default 0.3: a sustained change shows within a few probes.
	RTTAlpha float64
	// MaxWANRTT is the WAN gate's RTT ceiling (MAX_WAN_RTT_THRESHOLD_MS):
	// a sample or smoothed RTT above it closes the link to forwarding, and
	// the policy never chooses a peer beyond it. Default 1 s: a ceiling, not
	// the reach — whether a peer may serve a request is decided per request
	// by its TTFT objective (policy.Skywalker), so a 2 s objective affords a
	// 250 ms link. Set it lower to cap reach by hand.
	MaxWANRTT time.Duration
	// MaxLoss closes the gate when the smoothed probe loss exceeds it.
	// Default 0.2.
	MaxLoss float64
	// ReopenSamples: good samples in a row that reopen a closed gate.
	// Default 5 (five seconds of a healthy link at the default probe rate).
	ReopenSamples int
}

// DefaultControlPlane returns the documented defaults.
func DefaultControlPlane() ControlPlane {
	return ControlPlane{
		ScrapeInterval: 100 * time.Millisecond,
		HealthInterval: time.Second,
		PumpInterval:   50 * time.Millisecond,
		LoadInterval:   250 * time.Millisecond,
		LoadCheck:      50 * time.Millisecond,
		DigestInterval: 2 * time.Second,
		MaxDataAge:     2 * time.Second,
		ProbeInterval:  time.Second,
		RTTAlpha:       0.3,
		MaxWANRTT:      time.Second,
		MaxLoss:        0.2,
		ReopenSamples:  5,
	}
}

// Defaults of a region's routing state (Config).
const (
	// DefaultMaxInFlight caps a replica's requests in flight before the
	// balancer holds (selective pushing): vLLM's default --max-num-seqs,
	// the most an engine runs at once. An engine that reports its queue
	// is held back by that queue and its KV usage long before (HasRoom);
	// a lower cap only idles a fast GPU's batch — at 64, A100 replicas
	// serving long conversations were held at the cap with a third of
	// their KV cache used.
	DefaultMaxInFlight = 256
	// DefaultAdapterLoad is what loading a LoRA adapter is believed to
	// cost when it is not configured: between a swap from vLLM's CPU
	// adapter cache (tens of ms) and a load from local disk (hundreds).
	DefaultAdapterLoad = 100 * time.Millisecond
	// DefaultEventSettle is how long KV events wait while a region's
	// nodes share their dispatches: five of the mesh's LoadCheck rounds,
	// in which they are sent, and the region's own network.
	DefaultEventSettle = 250 * time.Millisecond
	// DefaultReplicaTokens is the KV-cache size assumed for a replica until
	// its metrics report one (vllm:cache_config_info).
	DefaultReplicaTokens = 32_000
	// DefaultEjectAfter: consecutive failures (requests or health checks)
	// that eject a replica.
	DefaultEjectAfter = 3
	// DefaultReadmitAfter: consecutive passed health checks that re-admit
	// an ejected replica.
	DefaultReadmitAfter = 2
	// DefaultRetries: how many times a request that failed before its
	// first byte is routed again.
	DefaultRetries = 2
	// DefaultServiceAlpha is the weight of a new service time in the
	// queue-wait estimate's moving average.
	DefaultServiceAlpha = 0.05
)

// WithDefaults returns c with every zero field set to its default.
func (c ControlPlane) WithDefaults() ControlPlane {
	d := DefaultControlPlane()
	set := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	set(&c.ScrapeInterval, d.ScrapeInterval)
	set(&c.HealthInterval, d.HealthInterval)
	set(&c.PumpInterval, d.PumpInterval)
	set(&c.LoadInterval, d.LoadInterval)
	set(&c.LoadCheck, d.LoadCheck)
	set(&c.DigestInterval, d.DigestInterval)
	set(&c.MaxDataAge, d.MaxDataAge)
	set(&c.ProbeInterval, d.ProbeInterval)
	set(&c.MaxWANRTT, d.MaxWANRTT)
	if c.RTTAlpha <= 0 || c.RTTAlpha > 1 {
		c.RTTAlpha = d.RTTAlpha
	}
	if c.MaxLoss <= 0 {
		c.MaxLoss = d.MaxLoss
	}
	if c.ReopenSamples <= 0 {
		c.ReopenSamples = d.ReopenSamples
	}
	return c
}
