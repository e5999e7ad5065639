package policy

import (
	"testing"

	"skywalker/internal/apierr"
	"skywalker/internal/request"
)

// TestAChainGoesHomeOrNowhere: a request with a Home goes to that replica
// or that region whatever the policy would choose, busy or not (it can
// wait nowhere better than in its engine's queue); gone, it is refused with previous_response_not_found; a home its
// residency forbids is a 403; a home region not heard from holds it.
// A request that may start over (request.StartOver) does, wherever its
// home is gone — and only there.
func TestAChainGoesHomeOrNowhere(t *testing.T) {
	for _, tc := range []struct {
		name      string
		home      request.Home
		residency string
		forwarded bool
		change    func(*View)
		action    Action
		target    string // replica or region
		code      apierr.Code
		gone      bool // the previous response is lost: a request that may start over does
	}{
		{name: "at home", home: request.Home{Region: "us-east", Replica: "r2"}, action: Dispatch, target: "r2"},
		{name: "at home, busy: nowhere else to go, so into its engine's queue", home: request.Home{Region: "us-east", Replica: "r3"},
			change: func(v *View) { r := &v.Local.Replicas[3]; r.InFlight, r.Waiting, r.KVUsage = 8, 4, 0.99 }, action: Dispatch, target: "r3"},
		{name: "at home, out of service", home: request.Home{Region: "us-east", Replica: "r2"}, change: func(v *View) { v.Local.Replicas[2].Healthy = false },
			action: Reject, code: apierr.PreviousResponseNotFound, gone: true},
		{name: "at home, no longer in the pool", home: request.Home{Region: "us-east", Replica: "r9"}, action: Reject, code: apierr.PreviousResponseNotFound, gone: true},
		{name: "at home, residency forbids it", home: request.Home{Region: "us-east", Replica: "r2"}, residency: "eu", action: Reject, code: apierr.Forbidden},
		{name: "away", home: request.Home{Region: "ap-east", Replica: "x"}, action: Forward, target: "ap-east"}, // its WAN gate is closed: no other region may serve it
		{name: "away, residency forbids it", home: request.Home{Region: "ap-east", Replica: "x"}, residency: "us", action: Reject, code: apierr.Forbidden},
		{name: "away, not heard from", home: request.Home{Region: "sa-east", Replica: "x"}, action: Hold},
		{name: "away, the region left", home: request.Home{Region: "eu-west", Replica: "x"}, change: func(v *View) { v.Peers[0].Healthy, v.Peers[0].Left = false, true },
			action: Reject, code: apierr.Unavailable, gone: true},
		{name: "forwarded in for another region", home: request.Home{Region: "eu-west", Replica: "x"}, forwarded: true, action: Reject, code: apierr.PreviousResponseNotFound, gone: true},
	} {
		for _, startOver := range []bool{false, true} {
			v := exampleView()
			shortQueue(v)
			for i := range v.Local.Replicas {
				v.Local.Replicas[i].InFlight, v.Local.Replicas[i].Running = 0, 0
			}
			if tc.change != nil {
				tc.change(v)
			}
			req := exampleRequest()
			req.Home, req.Residency, req.Forwarded, req.PreviousResponse = tc.home, tc.residency, tc.forwarded, "resp_x"
			req.StartOver = startOver
			d := Homing{Policy: NewSkywalker(DefaultSkywalkerConfig())}.Route(req, v)
			if startOver && tc.gone {
				fresh := exampleRequest()
				fresh.Residency, fresh.Forwarded = tc.residency, tc.forwarded
				want := NewSkywalker(DefaultSkywalkerConfig()).Route(fresh, v)
				if want.StartedOver = true; d.Action != want.Action || d.Replica != want.Replica || d.Peer != want.Peer || d.Reason != want.Reason || !d.StartedOver {
					t.Errorf("%s, may start over: %+v, want it routed as a new request: %+v", tc.name, d, want)
				}
				continue
			}
			if d.StartedOver {
				t.Errorf("%s (may start over: %v): started over, its home is not gone", tc.name, startOver)
			}
			target := d.Region
			if d.Action == Dispatch {
				target = v.Local.Replicas[d.Replica].Name
			}
			switch {
			case d.Action != tc.action:
				t.Errorf("%s: %v (%s), want %v", tc.name, d.Action, d.Reason, tc.action)
			case tc.target != "" && target != tc.target:
				t.Errorf("%s: to %s, want %s", tc.name, target, tc.target)
			case tc.code != "" && (d.Refusal == nil || d.Refusal.Code != tc.code || d.Refusal.Param != "previous_response_id"):
				t.Errorf("%s: refused with %+v, want %s on previous_response_id", tc.name, d.Refusal, tc.code)
			case d.Reason != ReasonHome:
				t.Errorf("%s: reason %q, want %q", tc.name, d.Reason, ReasonHome)
			}
		}
	}
	// Without a home, the policy decides.
	v := exampleView()
	if d := (Homing{Policy: NewSkywalker(DefaultSkywalkerConfig())}).Route(exampleRequest(), v); d.Reason == ReasonHome {
		t.Errorf("a request without a home was routed home: %+v", d)
	}
}

// TestAModelServedOnlyByPeersCrossesAClosedGate: the gate keeps requests
// off slow links while staying is an option; for a model the region has
// no replica of, it is not — slow beats never.
func TestAModelServedOnlyByPeersCrossesAClosedGate(t *testing.T) {
	for _, name := range []string{"skywalker", "skylb"} {
		p, err := New(name, DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		v := exampleView()
		v.Local.Replicas = nil // the model is not served here
		for i := range v.Peers {
			v.Peers[i].GateOpen, v.Peers[i].GateReason = false, "rtt 900ms > 200ms"
		}
		if d := p.Route(exampleRequest(), v); d.Action != Forward {
			t.Errorf("%s: %v (%s), want a forward across the closed gate", name, d.Action, d.Reason)
		}
		v.Local.Replicas = busyReplicas(2) // served here, if busy: the gate holds
		if d := p.Route(exampleRequest(), v); d.Action == Forward {
			t.Errorf("%s: forwarded across a closed gate a request that could stay", name)
		}
	}
}
