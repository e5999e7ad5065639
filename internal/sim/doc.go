// Package sim is the discrete-event simulator: K regions, each with R
// replicas of the engine model and a regional balancer running a routing
// policy, joined by a WAN with per-link RTTs. It drives exactly the
// decision core the proxy runs (internal/policy, internal/balancer) and the
// engine model the engine server runs (internal/engine), on a virtual
// clock.
//
// The simulator does not cheat with global knowledge: each balancer sees
// its own replicas through a periodic metrics scrape, and its peers through
// load summaries and prefix digests published on an interval that arrive
// late by the link delay. Requests and responses each cross half the RTT.
// Faults (replica crashes, region outages, RTT spikes) run on a timeline.
// Dropped requests are counted, never hidden. A run is a pure function of
// its configuration and seed: same inputs, byte-identical results.
package sim
