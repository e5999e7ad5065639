// Package policy is the routing decision core: the Policy interface, the
// View of the world a policy decides over, and every policy SkyWalker is
// compared with — skywalker (ours), skylb (the paper prototype's rules),
// local (GeoDNS), local-least-load, round-robin, least-load,
// consistent-hash, cache-aware and GORGO.
//
// A policy is a pure function of (Request, View): it reads no clock, does no
// I/O and starts no goroutines. The region core (internal/region) builds
// the View — from scraped replica metrics and the mesh in the proxy, from
// the engine model and simulated links in the simulator — and both drivers
// call exactly this code, so a simulation measures the product.
//
// Where to start reading: Skywalker.Route in skywalker.go is the rule of
// DESIGN.md; pick.go holds the in-region replica choice every policy shares.
package policy
