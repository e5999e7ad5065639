// Package proxy is `skywalker serve`: the regional proxy in front of one
// region's vLLM/SGLang replicas. It parses every OpenAI request
// (internal/request), hands it to the region core (internal/region: the
// balancer, the policy, the prefix index), which decides, and then holds
// the request, streams it to a local replica, or forwards it once to the
// chosen region's proxy. A request's life — each attempt's first byte,
// cached tokens and end, the retry — goes through the core's
// region.Attempt, and the core decides what every answer means; this
// package keeps only HTTP, the lock and the waiting handlers.
//
// Files by responsibility: settings.go (every setting described once:
// YAML key, environment variable, flag, default, rule, help), config.go
// (Config, YAML, the environment, validation),
// server.go (listeners, endpoints' wiring, drain), handler.go (parsing and
// accounting each client request), router.go (the lock around the region
// core, the waiting handlers, and where a request is routed and its
// attempts ended: all else reaches the core through Router.do), peers.go
// (the mesh's side: peers in, load and digest out, siblings' dispatches),
// state.go (snapshots and explanations of the router's state), relay.go (the
// handler's attempt loop: each attempt sent, its answer judged by the
// core, retried before the first byte; the copier of the answer),
// watch.go (the body that reaches the client, to its end), readahead.go
// (a slow reader does not slow the engine), upload.go (a slow uploader is
// cut off, bodies share a memory budget), responses.go (the Responses
// API: chains sent home, stored responses read and cancelled),
// kvevents.go (each replica's KV events followed), failover.go
// (mid-stream failover), forward.go (the authenticated one-hop marker),
// tls.go (peer TLS), pool.go (replicas: placing them in the pools, scraping,
// health checks, models),
// scrape.go (vLLM/SGLang metrics, data-parallel engines combined),
// demand.go (per-hour demand for the planner), metrics.go (Prometheus),
// trace.go (a request's OpenTelemetry spans and the trace context it
// passes on).
package proxy
