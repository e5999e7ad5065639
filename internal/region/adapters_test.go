package region

import (
	"testing"
	"time"

	"skywalker/internal/request"
)

// adapterReq is a request of adapter (of the base model llama-8b).
func adapterReq(id, adapter string, block uint64) *request.Request {
	q := req(id, block)
	q.SetPool("llama-8b", adapter)
	return q
}

// A replica an adapter was sent to is believed to hold it, and so is one
// whose engine reports it running; a base-model request is charged no
// adapter.
func TestAdapterResidencyIsLearnedFromRoutingAndTheEngine(t *testing.T) {
	r, got := newTestRegion(t, 2)
	r0, r1 := r.Replicas()[0], r.Replicas()[1]
	r.Scraped(r0, Metrics{Known: true, MaxLoRAs: 2})
	r.Scraped(r1, Metrics{Known: true, MaxLoRAs: 2, RunningAdapters: []string{"c"}})
	if v := r.View(adapterReq("c1", "c", 1)); v.Local.Replicas[0].AdapterResident || !v.Local.Replicas[1].AdapterResident {
		t.Errorf("the engine reports c running on r1: want it resident there only, view %+v", v.Local.Replicas)
	}
	r.Submit(t0, adapterReq("a1", "a", 2))
	sent := last(t, got).rp
	v := r.View(adapterReq("a2", "a", 3))
	for i, rp := range r.Replicas() {
		if v.Local.Replicas[i].AdapterResident != (rp == sent) {
			t.Errorf("after a was sent to %s: %s resident %v", sent.Name(), rp.Name(), v.Local.Replicas[i].AdapterResident)
		}
	}
	if v.Local.AdapterLoad != r.cfg.AdapterLoad || r.cfg.AdapterLoad != DefaultAdapterLoad {
		t.Errorf("adapter load %v, want the default %v", v.Local.AdapterLoad, DefaultAdapterLoad)
	}
	if v := r.View(req("base", 30)); v.Local.AdapterLoad != 0 || v.Local.Replicas[0].AdapterResident {
		t.Errorf("a base-model request is charged an adapter: %+v", v.Local)
	}
}

// Once this node's requests in flight at a replica use every adapter slot
// its engine has, a request of another adapter is blocked there; a slot
// frees when the last request of its adapter ends. Without the engine's
// slot count nothing is blocked (nothing says how many it has).
func TestAReplicaWhoseSlotsAllServeOtherAdaptersBlocksANewOne(t *testing.T) {
	r, got := newTestRegion(t, 1)
	rp := r.Replicas()[0]
	r.Submit(t0, adapterReq("a1", "a", 1))
	a := last(t, got)
	r.Submit(t0, adapterReq("b1", "b", 2))
	if r.View(adapterReq("d1", "d", 3)).Local.Replicas[0].AdapterBlocked {
		t.Error("blocked though the engine never said how many slots it has")
	}
	r.Scraped(rp, Metrics{Known: true, MaxLoRAs: 2})
	if !r.View(adapterReq("d2", "d", 4)).Local.Replicas[0].AdapterBlocked {
		t.Error("a and b in flight on a two-slot replica, yet d is not blocked")
	}
	if r.View(adapterReq("a2", "a", 5)).Local.Replicas[0].AdapterBlocked {
		t.Error("a is blocked on the replica where its own request runs")
	}
	a.End(t0.Add(time.Second), Served)
	if r.View(adapterReq("d3", "d", 6)).Local.Replicas[0].AdapterBlocked {
		t.Error("a's request ended, freeing a slot, yet d is still blocked")
	}
}
