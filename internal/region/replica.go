package region

import (
	"fmt"
	"time"

	"skywalker/internal/prefix"
)

// Metrics are what one scrape of a replica's engine reported (vLLM's or
// SGLang's metric names; see internal/proxy/scrape.go for the mapping).
type Metrics struct {
	// Known is true when the engine exposed queue metrics at all; without
	// them the replica is balanced on the requests in flight alone.
	Known            bool
	Waiting, Running int
	KVUsage          float64 // 0..1
	// KVBlocks and BlockSize come from vllm:cache_config_info: the KV
	// cache's size, which bounds the prefix index's entries for the
	// replica. Zero when not reported.
	KVBlocks, BlockSize int
}

// Replica is one local inference server as the region sees it. Its fields
// change only through the Region's methods; drivers read them through the
// accessors.
type Replica struct {
	name     string
	target   prefix.Target
	healthy  bool
	failures int // consecutive failed requests or health checks
	passes   int // consecutive passed health checks while ejected
	inFlight int
	metrics  Metrics
}

// Name is the replica's name (the proxy uses host:port).
func (r *Replica) Name() string { return r.name }

// Healthy reports whether the replica is in service (not ejected).
func (r *Replica) Healthy() bool { return r.healthy }

// InFlight is the number of requests dispatched to it and not yet done.
func (r *Replica) InFlight() int { return r.inFlight }

// Metrics is the replica's last scrape.
func (r *Replica) Metrics() Metrics { return r.metrics }

// SetReplicas makes the replica table exactly names, in that order (which
// is the order policies see them in, and break ties by). Replicas that stay
// keep their state; those that leave are forgotten with their index
// entries. At most prefix.MaxTargets replicas are tracked; the error names
// those that were not.
func (r *Region) SetReplicas(names []string) error {
	wanted := make(map[string]bool, len(names))
	for _, name := range names {
		wanted[name] = true
	}
	byName := make(map[string]*Replica, len(r.replicas))
	for _, rp := range r.replicas {
		if wanted[rp.name] {
			byName[rp.name] = rp
			continue
		}
		r.index.RemoveTarget(rp.target) // leaving: free its index slot first
		r.digests.stale = true
	}
	next := make([]*Replica, 0, len(names))
	var dropped []string
	for _, name := range names {
		if rp, ok := byName[name]; ok {
			next = append(next, rp)
			delete(byName, name) // a name listed twice is tracked once
			continue
		}
		if slicesContains(next, name) {
			continue
		}
		t, err := r.index.AddTarget(name, r.cfg.DefaultReplicaTokens)
		if err != nil {
			dropped = append(dropped, name)
			continue
		}
		next = append(next, &Replica{name: name, target: t, healthy: true})
	}
	r.replicas = next
	if len(dropped) > 0 {
		return fmt.Errorf("region %s: at most %d replicas are routed to; not tracking %v", r.cfg.Name, prefix.MaxTargets, dropped)
	}
	return nil
}

func slicesContains(rs []*Replica, name string) bool {
	for _, rp := range rs {
		if rp.name == name {
			return true
		}
	}
	return false
}

// Replicas returns the replica table in routing order. The slice and its
// replicas must not be modified.
func (r *Region) Replicas() []*Replica { return r.replicas }

// Replica returns the replica named name, or nil.
func (r *Region) Replica(name string) *Replica {
	for _, rp := range r.replicas {
		if rp.name == name {
			return rp
		}
	}
	return nil
}

// HealthyReplicas counts the replicas in service.
func (r *Region) HealthyReplicas() int {
	n := 0
	for _, rp := range r.replicas {
		if rp.healthy {
			n++
		}
	}
	return n
}

// IndexedBlocks is how many prefix blocks the index believes rp holds.
func (r *Region) IndexedBlocks(rp *Replica) int { return r.index.TargetLen(rp.target) }

// Scraped records one scrape of rp's engine. A failed scrape passes the
// zero Metrics: the engine's queue is then unknown and the replica is
// balanced on its requests in flight. A reported KV-cache size resizes the
// replica's share of the prefix index.
func (r *Region) Scraped(rp *Replica, m Metrics) {
	rp.metrics = m
	if m.KVBlocks > 0 && m.BlockSize > 0 {
		r.index.SetCapacity(rp.target, m.KVBlocks*m.BlockSize)
	}
}

// capacityTokens is the KV cache rp is believed to hold.
func (r *Region) capacityTokens(rp *Replica) int {
	if m := rp.metrics; m.KVBlocks > 0 && m.BlockSize > 0 {
		return m.KVBlocks * m.BlockSize
	}
	return r.cfg.DefaultReplicaTokens
}

// Finished records a request that completed on rp after service (from
// dispatch to its last byte): the slot frees, the failure streak ends and
// the service time feeds the queue-wait estimate.
func (r *Region) Finished(rp *Replica, service time.Duration) {
	rp.inFlight = max(rp.inFlight-1, 0)
	rp.failures = 0
	r.service.Observe(service)
}

// Failed records a request on rp that failed because of the replica
// (refused, reset, 5xx, a broken stream): the slot frees and the failure
// counts toward passive ejection.
func (r *Region) Failed(rp *Replica) {
	rp.inFlight = max(rp.inFlight-1, 0)
	r.fail(rp)
}

// Released frees rp's slot for a request that ended for a reason that says
// nothing about the replica (the client left).
func (r *Region) Released(rp *Replica) {
	rp.inFlight = max(rp.inFlight-1, 0)
}

// HealthChecked records one health check of rp. A replica in service that
// fails EjectAfter checks (or requests) in a row is ejected; an ejected one
// is re-admitted after ReadmitAfter passes in a row.
func (r *Region) HealthChecked(rp *Replica, ok bool) {
	switch {
	case ok && !rp.healthy:
		if rp.passes++; rp.passes >= r.cfg.ReadmitAfter {
			rp.healthy, rp.failures, rp.passes = true, 0, 0
		}
	case ok:
		rp.failures = 0
	default:
		rp.passes = 0
		r.fail(rp)
	}
}

// fail counts one failure and ejects rp at the EjectAfter-th in a row. An
// ejected replica's index entries are forgotten: a replica that fails may
// have restarted with an empty cache.
func (r *Region) fail(rp *Replica) {
	rp.failures++
	if rp.failures >= r.cfg.EjectAfter && rp.healthy {
		rp.healthy, rp.passes = false, 0
		r.index.Forget(rp.target)
		r.digests.stale = true
	}
}
