package policy

import "skywalker/internal/request"

// LeastLoad sends each request to the replica, anywhere, with the fewest
// outstanding requests; a peer region counts as its per-replica average.
// Ties stay local.
type LeastLoad struct {
	filter peerFilter
}

// NewLeastLoad returns the policy.
func NewLeastLoad(cfg SkywalkerConfig) *LeastLoad { return &LeastLoad{filter: globalFilter(cfg)} }

// Name implements Policy.
func (l *LeastLoad) Name() string { return "least-load" }

// Route implements Policy.
func (l *LeastLoad) Route(req *request.Request, v *View) Decision {
	var buf [32]member
	ms, _ := members(req, v, l.filter, buf[:0])
	if len(ms) == 0 {
		return noMember(req, v)
	}
	best := 0
	for i := 1; i < len(ms); i++ {
		if ms[i].load(v) < ms[best].load(v) {
			best = i
		}
	}
	return ms[best].decide(v, ReasonLeastLoad)
}

var _ Policy = (*LeastLoad)(nil)
