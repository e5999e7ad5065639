// Package sim is the discrete-event simulator: K regions, each with R
// replicas of the engine model behind the product's own region core
// (internal/region: balancer, policy, prefix index, digests, the eject
// rule), joined by a WAN with per-link RTTs. A run measures the code that
// `skywalker serve` runs; only the drivers differ (events and engine models
// here, HTTP there), and the parity test checks they feed the core alike.
//
// The simulator does not cheat with global knowledge. Each region
// observes its replicas the way the proxy does: a metrics scrape every
// ScrapeInterval, health checks every HealthInterval, and a crashed replica
// discovered by its failed requests, refused dispatches and failed checks,
// then ejected and re-admitted by the same rule. Requests that fail before
// their first byte are routed again at most Retries times. Each region
// hears its peers through the mesh's own peer table (internal/mesh.Table):
// load summaries sent on the mesh's schedule (every LoadInterval, or early
// on a significant change) and digests every DigestInterval, each arriving
// a link delay later and aging from its arrival, and RTTs measured by
// probes every ProbeInterval and fed to the mesh's WAN gate, with its
// hysteresis. Links can spike (rtt-spike) or lose packets (link-loss:
// probes time out, summaries vanish). Requests and responses each cross
// half the RTT; a forward that its peer refuses with a 5xx is retried at
// the ingress, as the proxy retries it.
//
// Dropped requests are counted, never hidden. A run is a pure function of
// its configuration and seed: same inputs, byte-identical results.
package sim
