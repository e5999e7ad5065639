package sim

import (
	"fmt"
	"testing"
	"time"
)

// Several proxies front one region's engines: each is its own router with
// its own core, the clients' requests are spread over them, the engines
// are the region's (not one set per proxy), and every proxy hears every
// engine's KV events. With dispatch sharing on, the region's prefix hit
// rate with four proxies stays near one proxy's; with it off, each proxy
// knows only its own prompts and the hit rate falls — the gap sharing
// exists to close.
func TestSeveralProxiesFrontOneRegionsEngines(t *testing.T) {
	s := scenario(t, "diurnal-3region")
	s.Workload.Duration = 8 * time.Minute
	s.Workload.StartHour = s.Workload.PeakHour - 1
	for i := range s.Regions {
		s.Regions[i].Proxies = 4
	}
	w := scenarioWorld(t, s, func(c *Config) { c.KVEvents = true })
	for site, proxies := range w.byRegion {
		if len(proxies) != 4 {
			t.Fatalf("region %d has %d routers, want 4 proxies", site, len(proxies))
		}
		for _, p := range proxies[1:] {
			for i, rp := range p.replicas {
				if rp != proxies[0].replicas[i] {
					t.Fatalf("%s fronts its own engine %s: the proxies of a region must share its engines", p.name, rp.name)
				}
			}
			if len(p.siblings) != 3 {
				t.Errorf("%s knows %d siblings, want 3", p.name, len(p.siblings))
			}
		}
	}
	runUntil(t, w, 4*time.Minute)
	for _, r := range w.routers {
		var told int64
		for _, st := range r.core.Snapshot(r.now()).Replicas {
			told += st.Truth.Requests
		}
		if told == 0 {
			t.Errorf("%s served nothing in four minutes: the clients are not spread over the proxies", r.name)
		}
	}

	hit := map[string]float64{}
	rep, err := Compare(s, Options{Policies: []string{"skywalker"}, CacheSources: []string{"events"}, Proxies: []int{1, 4}, Sharing: []string{"on", "off"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Results {
		hit[r.Policy] = r.CacheHitRate
		if r.Completed == 0 {
			t.Errorf("%s completed nothing", r.Policy)
		}
	}
	one, shared, alone := hit["skywalker (events, 1 proxy)"], hit["skywalker (events, 4 proxies)"], hit["skywalker (events, 4 proxies, no sharing)"]
	t.Logf("prefix hit rate: 1 proxy %.3f, 4 sharing %.3f, 4 not sharing %.3f", one, shared, alone)
	if shared < one-0.03 {
		t.Errorf("four proxies that share their dispatches hit the cache %.3f, one proxy %.3f: sharing should keep the region's hit rate", shared, one)
	}
	if alone > shared-0.05 {
		t.Errorf("four proxies that do not share hit the cache %.3f, sharing ones %.3f: the test shows nothing sharing does", alone, shared)
	}
}

// A proxy count names its variant in the report, and bad counts and
// settings are refused.
func TestProxyVariantsAreNamedAndChecked(t *testing.T) {
	runs, err := variants([]string{"skywalker"}, Options{Proxies: []int{1, 2}, Sharing: []string{"on", "off"}})
	if err != nil {
		t.Fatal(err)
	}
	var labels []string
	for _, rn := range runs {
		labels = append(labels, rn.label())
	}
	if got, want := fmt.Sprint(labels), "[ (1 proxy)  (1 proxy, no sharing)  (2 proxies)  (2 proxies, no sharing)]"; got != want {
		t.Errorf("labels %s, want %s", got, want)
	}
	for _, bad := range []Options{{Proxies: []int{0}}, {Proxies: []int{17}}, {Sharing: []string{"maybe"}}, {CacheSources: []string{"gossip"}}} {
		if _, err := variants([]string{"skywalker"}, bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	vs, err := ScenarioVariants(scenario(t, "quickstart"), []string{"events"}, []int{1, 2}, []string{"on", "off"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, v := range vs {
		names = append(names, v.Name)
		if _, _, err := v.Build(""); err != nil {
			t.Errorf("%s: %v", v.Name, err)
		}
	}
	if got, want := fmt.Sprint(names), "[quickstart-events-1proxy quickstart-events-2proxies quickstart-events-2proxies-nosharing]"; got != want {
		t.Errorf("variants %s, want %s (one proxy is not varied by sharing)", got, want)
	}
}
