// Package policy is the routing decision core: the Policy interface, the
// View of the world a policy decides over, and every policy SkyWalker is
// compared with — skywalker (ours), skylb (the paper prototype's rules),
// local (GeoDNS), round-robin, least-load, consistent-hash and cache-aware.
//
// A policy is a pure function of (Request, View): it reads no clock, does no
// I/O and starts no goroutines. The live proxy builds the View from scraped
// replica metrics and the mesh; the simulator builds it from its virtual
// regions. Both call exactly this code, so a simulation measures the product.
//
// Where to start reading: Skywalker.Route in skywalker.go is the rule of
// DESIGN.md; pick.go holds the in-region replica choice every policy shares.
package policy
