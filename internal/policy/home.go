package policy

import (
	"fmt"
	"time"

	"skywalker/internal/apierr"
	"skywalker/internal/request"
)

// ReasonHome: the request continues a Responses chain, whose state lives
// in one engine process: it goes to that replica, or that region, and
// nowhere else.
const ReasonHome Reason = "home"

// Homing routes a request that has a Home (request.Home: a Responses
// chain's previous response lives there) to it, whatever Policy would
// choose, and every other request by Policy. Every region core wraps its
// policy in one, so every policy (the baselines too) keeps chains whole.
//
// At home: the replica if it is healthy, busy or not — selective pushing
// (and the in-flight cap) holds a request in the balancer so that it can
// still go elsewhere, and this one cannot: holding it buys nothing and
// only lets its objective pass in the wrong queue, while the engine's own
// scheduler queues it as well as the balancer would — refused at once (previous_response_not_found) when it is not in
// the pool or is out of service — the engine's state went with it. Away:
// forwarded to the home region while it is in the mesh and healthy
// (whatever the WAN gate says: no other region can serve it), held while
// it is not heard from, refused when it has left the mesh. A chain whose
// home the request's data residency forbids is a 403, never served
// elsewhere.
//
// A request that may start its chain over (request.StartOver: it resends
// the conversation and the operator allows it) is not refused for a home
// that is gone: Policy routes it as a new request (Decision.StartedOver).
type Homing struct{ Policy }

// Route implements Policy.
func (h Homing) Route(req *request.Request, v *View) Decision {
	if req.Home.IsZero() {
		return h.Policy.Route(req, v)
	}
	home := req.Home
	if home.Region == v.Local.Name {
		if !req.AllowedIn(v.Local.Jurisdiction) {
			return refuse(v, home.Region, &apierr.Error{Code: apierr.Forbidden, Param: "previous_response_id",
				Message: fmt.Sprintf("the previous response lives in region %s (jurisdiction %q), where this request's data residency %q may not go", home.Region, v.Local.Jurisdiction, req.Residency)})
		}
		for i := range v.Local.Replicas {
			r := &v.Local.Replicas[i]
			if r.Name != home.Replica {
				continue
			}
			switch {
			case !r.Healthy:
				return h.gone(req, v, fmt.Sprintf("the replica that holds it (%s in %s) is out of service", home.Replica, home.Region))
			}
			return Decision{Action: Dispatch, Replica: i, Region: home.Region, Reason: ReasonHome}
		}
		return h.gone(req, v, fmt.Sprintf("the replica that held it (%s) is no longer in %s's pool", home.Replica, home.Region))
	}
	switch {
	case req.Forwarded:
		// Forwarded here for a home elsewhere: a peer decoded it otherwise.
		return h.gone(req, v, fmt.Sprintf("it lives in region %s, not in %s where it was forwarded", home.Region, v.Local.Name))
	case req.ServeHere:
		// Its forward home failed: no other region can serve it.
		return refuse(v, home.Region, &apierr.Error{Code: apierr.Unavailable, Param: "previous_response_id", RetryAfter: time.Second,
			Message: fmt.Sprintf("the region that holds the previous response (%s) did not answer; retry", home.Region)})
	}
	for i := range v.Peers {
		p := &v.Peers[i]
		if p.Name != home.Region {
			continue
		}
		if !req.AllowedIn(p.Jurisdiction) {
			return refuse(v, home.Region, &apierr.Error{Code: apierr.Forbidden, Param: "previous_response_id",
				Message: fmt.Sprintf("the previous response lives in region %s (jurisdiction %q), where this request's data residency %q may not go", home.Region, p.Jurisdiction, req.Residency)})
		}
		if p.Healthy {
			return Decision{Action: Forward, Peer: i, Region: home.Region, Reason: ReasonHome}
		}
		if p.Left {
			if req.StartOver {
				return h.startOver(req, v)
			}
			return refuse(v, home.Region, &apierr.Error{Code: apierr.Unavailable, Param: "previous_response_id",
				Message: fmt.Sprintf("the region that holds the previous response (%s) has left the mesh; the chain continues when it is back", home.Region)})
		}
		break
	}
	// Not heard from (yet: a proxy that just started has no peers): held
	// until the region is, or the request's deadline.
	return Decision{Action: Hold, Region: home.Region, Reason: ReasonHome}
}

// gone answers a chain whose previous response is lost: it starts over
// if it may, else it is refused with previous_response_not_found.
func (h Homing) gone(req *request.Request, v *View, why string) Decision {
	if req.StartOver {
		return h.startOver(req, v)
	}
	return refuse(v, req.Home.Region, &apierr.Error{Code: apierr.PreviousResponseNotFound, Param: "previous_response_id",
		Message: fmt.Sprintf("previous response %q is no longer available: %s; start a new chain with the whole conversation as input", req.PreviousResponse, why)})
}

// startOver routes a chain whose home is gone as a new request.
func (h Homing) startOver(req *request.Request, v *View) Decision {
	d := h.Policy.Route(req, v)
	d.StartedOver = true
	return d
}

func refuse(v *View, region string, e *apierr.Error) Decision {
	return Decision{Action: Reject, Region: region, Reason: ReasonHome, Refusal: e}
}
