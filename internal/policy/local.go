package policy

import "skywalker/internal/request"

// LocalLeastLoad is GeoDNS in front of a plain least-load balancer: every
// request is served in the region it arrived in, by the least-loaded
// healthy replica, pushed into that engine's queue at once — no prefix
// affinity, no hold queue. It never forwards; a request whose residency
// excludes the region is rejected. (The fair GeoDNS baseline, "local",
// is SkyWalker's own regional balancer without forwarding: NewGeoDNS.)
type LocalLeastLoad struct{}

// Name implements Policy.
func (LocalLeastLoad) Name() string { return "local-least-load" }

// Route implements Policy.
func (LocalLeastLoad) Route(req *request.Request, v *View) Decision {
	if !req.AllowedIn(v.Local.Jurisdiction) {
		return reject(v)
	}
	return dispatchOrHold(v, leastLoaded(v.Local.Replicas, false), ReasonLeastLoad)
}

var _ Policy = LocalLeastLoad{}
