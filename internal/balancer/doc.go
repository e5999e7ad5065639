// Package balancer is the per-region queue that makes selective pushing
// real. Engines' own FIFO queues cannot be re-routed once a request is in
// them; the balancer's queue can. A request the policy cannot start at once
// is held here and re-routed whenever state changes, so it may still go to
// another region, and it leaves by exactly one of three doors: dispatched
// to a local replica, forwarded to a peer region, or rejected with a typed
// reason (queue full → 429, deadline → 503, nowhere to go → 503). Nothing
// accepted is lost silently.
//
// The balancer is pure: time comes in as an argument, the world comes in
// through the Env its driver implements, and it starts no goroutines. It is
// not safe for concurrent use; the proxy serializes calls, the simulator is
// single-threaded.
package balancer
