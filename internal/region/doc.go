// Package region is one region's routing state, written once and driven
// twice: the live proxy (internal/proxy) drives it with the wall clock and
// real HTTP, the simulator (internal/sim) with a virtual clock and the
// engine model. Whatever decides how a request is routed lives here or in
// the decision core below it (policy, balancer, prefix, digest), so a
// simulation measures the product.
//
// Node (node.go) is the only door: one proxy's or one simulated router's
// routing state for every model it serves, addressed by names — models,
// replicas, peers — never by the core's own values. Drivers submit,
// pump, expire, cancel and flush requests; set the replicas and the
// peers; report scrapes, health checks, engines' KV events and what the
// region's other nodes dispatched; read the load summary and digest they
// publish; resolve a request's model; and read everything else through
// one copied Snapshot. Inside, a Node holds a pool per base model; a pool
// owns:
//   - the replica table: health (the passive eject / re-admit rule),
//     requests in flight, the engines' scraped metrics, dispatch caps;
//   - the prefix index over its replicas and the digest it publishes;
//   - the service-time estimate behind the queue-wait term Q;
//   - what it last heard of its peer regions, and the requests it has in
//     flight at each of them;
//   - the balancer queue, for which it is the balancer.Env: it builds every
//     policy.View and does the bookkeeping of every delivered outcome
//     before handing the outcome to its driver.
//
// A request's life is one handle, Attempt (attempt.go): the core delivers
// each decision as an attempt, and the driver reports its first token,
// the engine's cached tokens and its end; End frees what it took, pumps,
// and routes the request again within the retry bound.
//
// It must not read a clock (time is an argument), do I/O, start goroutines
// or lock: the proxy wraps it in one mutex, the simulator is
// single-threaded. Drivers differ only in how they observe the world
// (scraping /metrics over HTTP, or reading an engine model) and in what
// they do with a delivered request (stream it over HTTP, or add it to an
// engine).
package region
