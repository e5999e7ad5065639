package region

import (
	"testing"
	"time"

	"skywalker/internal/apierr"
	"skywalker/internal/policy"
	"skywalker/internal/request"
)

// newTestPools is a region serving llama-8b on r0 and r1 and llama-70b on
// r2, whose attempts are collected.
func newTestPools(t *testing.T) (*Node, *[]*Attempt) {
	t.Helper()
	var got []*Attempt
	p := NewNode(func(model string) Config {
		c := Config{Name: "us-east", Jurisdiction: "us", Node: "us-1", MaxInFlight: 4, Prefill: policy.PrefillProfile{PerToken: 100 * time.Microsecond}}
		if model == "llama-70b" {
			c.Prefill.PerToken *= 8
		}
		return c
	}, func(string) (policy.Policy, error) { return policy.NewSkywalker(policy.DefaultSkywalkerConfig()), nil },
		func(a *Attempt) { got = append(got, a) })
	if err := p.SetReplicas(map[string][]ReplicaSpec{"llama-8b": Specs("r0", "r1"), "llama-70b": Specs("r2")}); err != nil {
		t.Fatal(err)
	}
	return p, &got
}

func modelReq(id, model string, block uint64) *request.Request {
	q := req(id, block)
	q.SetPool(model, "")
	return q
}

// Each model's requests go to its own pool's replicas; a model only a
// peer serves is forwarded there; a model nobody serves is refused 404;
// the summary carries each model's load.
func TestEachModelIsRoutedInItsOwnPool(t *testing.T) {
	p, got := newTestPools(t)
	p.SetPeers([]Peer{{Region: "eu-west", Jurisdiction: "eu", Healthy: true, GateOpen: true, RTT: 70 * time.Millisecond,
		Load: Load{Replicas: 2, Slots: 16, Models: []Load{{Model: "llama-8b", Replicas: 1, Slots: 8}, {Model: "qwen-32b", Replicas: 1, Slots: 8}}}}})
	for i, tc := range []struct {
		model    string
		replicas []string // where it may go; "eu-west" a forward there
	}{{"llama-8b", []string{"r0", "r1"}}, {"llama-70b", []string{"r2"}}, {"qwen-32b", []string{"eu-west"}}} {
		p.Submit(t0, modelReq(tc.model, tc.model, uint64(i)))
		a := last(t, got)
		where := ""
		switch {
		case a.Dispatched():
			where = a.Replica
		case a.Forwarded():
			where = a.Peer.Region
		}
		if !sliceHas(tc.replicas, where) {
			t.Errorf("%s went to %q (%+v), want one of %v", tc.model, where, a.Err, tc.replicas)
		}
	}
	p.Submit(t0, modelReq("gpt", "gpt-9", 9))
	if a := last(t, got); a.Err == nil || a.Err.Code != apierr.ModelNotFound {
		t.Errorf("a model nobody serves: %+v, want 404", a.Err)
	}
	if here, peers := p.serves("qwen-32b"); here || !peers {
		t.Errorf("qwen-32b served here %v, by a peer %v; want a peer only", here, peers)
	}
	// The 70B pool sees the peer not at all (it does not serve llama-70b).
	if n := len(p.pools["llama-70b"].Peers()); n != 0 {
		t.Errorf("the llama-70b pool sees %d peers, want none", n)
	}
	l := p.Load()
	if len(l.Models) != 2 || l.Models[0].Model != "llama-70b" || l.Models[1].Model != "llama-8b" || l.Replicas != 3 {
		t.Errorf("summary %+v: want llama-70b and llama-8b (not the pool that only forwards qwen-32b), 3 replicas", l)
	}
	if l.Models[0].Prefill.PerToken != 8*l.Models[1].Prefill.PerToken {
		t.Errorf("per-model prefill %v and %v: the 70B pool's own profile is lost", l.Models[0].Prefill, l.Models[1].Prefill)
	}
}

func sliceHas(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}
