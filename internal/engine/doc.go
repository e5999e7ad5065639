// Package engine models an LLM inference engine the way vLLM runs one:
// iteration-level continuous batching with chunked prefill, a paged KV cache
// whose blocks are keyed by chained prefix hashes (prefix caching with LRU
// eviction of unreferenced blocks), preemption by recomputation when blocks
// run out, and a step time drawn from a hardware/model profile.
//
// The model is written once and driven twice: the simulator steps it on
// virtual time, and package engine/server serves it over HTTP on real time
// as a stand-in for vLLM on machines without GPUs. It is pure: it never
// reads the clock (every call takes now), does no I/O and starts no
// goroutines. An Engine is not safe for concurrent use.
package engine
