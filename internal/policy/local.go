package policy

import "skywalker/internal/request"

// Local is GeoDNS: every request is served in the region it arrived in, by
// the least-loaded healthy replica, pushed into that engine's queue at once.
// It never forwards; a request whose residency excludes the region is
// rejected, as GeoDNS has nowhere else to send it.
type Local struct{}

// Name implements Policy.
func (Local) Name() string { return "local" }

// Route implements Policy.
func (Local) Route(req *request.Request, v *View) Decision {
	if !req.AllowedIn(v.Local.Jurisdiction) {
		return reject(v)
	}
	return dispatchOrHold(v, leastLoaded(v.Local.Replicas, false), ReasonLeastLoad)
}

var _ Policy = Local{}
