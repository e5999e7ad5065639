// Package proxy is `skywalker serve`: the regional proxy in front of one
// region's vLLM/SGLang replicas. It parses every OpenAI request
// (internal/request), builds a routing view from its replica pool and the
// mesh (internal/mesh), lets the decision core decide (internal/policy
// through internal/balancer), and then holds the request, streams it to a
// local replica, or forwards it once to the chosen region's proxy.
//
// Files by responsibility: config.go (flags/env/YAML), pool.go (replicas,
// scraping, health, ejection), scrape.go (vLLM/SGLang metric names),
// router.go (the balancer and its view: where a request is routed),
// handler.go (HTTP endpoints), upstream.go (streaming to replicas and
// peers, retries), forward.go (the authenticated one-hop marker),
// demand.go (per-hour demand for the planner), metrics.go (Prometheus).
package proxy
