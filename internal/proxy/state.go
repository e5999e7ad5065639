package proxy

import (
	"slices"

	"skywalker/internal/apierr"
	"skywalker/internal/policy"
	"skywalker/internal/region"
	"skywalker/internal/request"
)

// Reading the router's state: one consistent snapshot for the debug
// endpoint, the metrics collector and the server's accessors, and the
// views and decisions explanations and tests ask for. Every read reaches
// the core through Router.do.

// snapshot is a consistent copy of the router's state, for the readers
// that need all of it; replicaSides is the cheap part.
type snapshot struct {
	region.Snapshot
	policy   string
	replicas []*replica // the HTTP sides, in the core's order
	recent   []Decision // oldest first
	sharing  bool       // telling the region's other proxies what is dispatched
}

func (r *Router) snapshot() (out snapshot) {
	r.do(func(n *region.Node) {
		out = snapshot{Snapshot: n.Snapshot(r.now()), policy: r.cfg.Policy, replicas: slices.Clone(r.replicas), sharing: r.sharing}
		for i := range len(r.recent) {
			if d := r.recent[(r.recentNext+i)%len(r.recent)]; d.ID != "" {
				out.recent = append(out.recent, d)
			}
		}
	})
	return out
}

// replicaSides is the replicas' HTTP sides, in the core's order: the cheap
// part of a snapshot, for the model list and the pool's loops.
func (r *Router) replicaSides() (out []*replica) {
	r.do(func(*region.Node) { out = slices.Clone(r.replicas) })
	return out
}

// View returns a copy of the view the policy would route req by now (in
// the pool of its base model; empty if there is none).
func (r *Router) View(req *request.Request) (v policy.View) {
	r.do(func(n *region.Node) { v, _ = n.Explain(req) })
	return v
}

// Decide returns the decision the policy would make for req now, without
// routing it (a rejection when no pool serves its model here).
func (r *Router) Decide(req *request.Request) (d policy.Decision) {
	r.do(func(n *region.Node) { _, d = n.Explain(req) })
	return d
}

// ReplicaStates is the core's bookkeeping of every replica.
func (r *Router) ReplicaStates() (out []region.ReplicaState) {
	r.do(func(n *region.Node) { out = n.Snapshot(r.now()).Replicas })
	return out
}

// healthyReplicas counts replicas in service.
func (r *Router) healthyReplicas() (healthy int) {
	r.do(func(n *region.Node) { healthy = n.Load().Replicas })
	return healthy
}

// queued is the number of held requests.
func (r *Router) queued() (held int) {
	r.do(func(n *region.Node) { held = n.Load().Queued })
	return held
}

// flushHeld answers every held request with e and returns how many.
func (r *Router) flushHeld(e *apierr.Error) (flushed int) {
	r.do(func(n *region.Node) { flushed = n.Flush(r.now(), e) })
	return flushed
}
