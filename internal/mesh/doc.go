// Package mesh is the control plane between regional proxies, built on
// hashicorp/memberlist: one memberlist node per proxy, all regions in one
// encrypted, labelled cluster. Over it every node publishes its region's
// load summary (small, every 250 ms and on significant change) and its
// prefix digest (a Bloom filter, reliably, at most every 2 s, as a delta
// when the receiver has the previous one); measures the round-trip time to
// every peer region from memberlist's probes (PingDelegate) and its own
// direct pings, smoothed with a loss estimate; and keeps a WAN gate per
// peer region with hysteresis.
//
// Mesh.Peers hands the routing path a consistent snapshot without touching
// the network. The package never routes; it only tells.
package mesh
