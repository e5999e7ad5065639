package policy

import (
	"sync/atomic"

	"skywalker/internal/request"
)

// RoundRobin cycles through every replica of every region in turn (a peer
// region takes as many turns as it has replicas).
type RoundRobin struct {
	filter peerFilter
	next   atomic.Uint64
}

// NewRoundRobin returns the policy.
func NewRoundRobin(cfg SkywalkerConfig) *RoundRobin {
	return &RoundRobin{filter: globalFilter(cfg)}
}

// Name implements Policy.
func (r *RoundRobin) Name() string { return "round-robin" }

// Route implements Policy.
func (r *RoundRobin) Route(req *request.Request, v *View) Decision {
	var buf [32]member
	ms, total := members(req, v, r.filter, buf[:0])
	if total == 0 {
		return noMember(req, v)
	}
	turn := int((r.next.Add(1) - 1) % uint64(total))
	for _, m := range ms {
		weight := 1
		if m.peer >= 0 {
			weight = v.Peers[m.peer].Replicas
		}
		if turn < weight {
			return m.decide(v, ReasonRoundRobin)
		}
		turn -= weight
	}
	return noMember(req, v) // unreachable: turn < total
}

var _ Policy = (*RoundRobin)(nil)
