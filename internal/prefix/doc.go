// Package prefix keeps the prefix index: which prompt blocks are believed to
// sit in the KV cache of which target (a replica, or a whole region),
// learned from routing history rather than asked of the engines.
//
// After a request is routed, its chained block hashes are inserted for the
// target that served it; before routing, Match tells for every target how
// many leading blocks of a request it holds. Each target's entries are
// bounded by that target's KV capacity and evicted least-recently-used, as
// the engine's own cache would evict them, so memory stays bounded.
//
// The package is pure data structure: no clock, no I/O, no locking. An Index
// is not safe for concurrent use; its owner (the proxy's replica pool, the
// simulator's region) serializes access.
package prefix
