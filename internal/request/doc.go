// Package request owns the Request a routing policy sees and everything that
// turns client input into one: parsing OpenAI /v1/chat/completions and
// /v1/completions bodies, rendering the whole prompt canonically, cutting it
// into fixed-size blocks and hashing them as a chain (block i's hash covers
// blocks 0..i), and building the same Request from trace records whose
// prefix blocks are precomputed.
//
// The router, the simulated engine and the simulator all count prompt tokens
// and prefix blocks through this package, so they agree on what "the same
// prefix" means. It does no I/O beyond reading a body it is handed (as it
// arrives, see ParseFrom) and never reads the clock.
package request
