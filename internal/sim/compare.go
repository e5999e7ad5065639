package sim

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"

	"skywalker/internal/policy"
	"skywalker/internal/results"
)

// Options adjust a comparison run.
type Options struct {
	Policies  []string // default: the scenario's, or all; "policy@region" runs one router in that region
	Seed      uint64   // 0: the scenario's
	Trace     string   // override the scenario's trace file
	RateScale float64  // multiplies the diurnal peak rate or the replay speed; 0 means 1
	Parallel  int      // policies simulated at once; default GOMAXPROCS
	// NoCacheTruth turns the routers' cache-truth feedback off.
	NoCacheTruth bool
	// KVEvents has the engines publish KV events (Config.KVEvents).
	KVEvents bool
	// CacheSources, if set, runs every policy once per source of the
	// routers' prefix index, labelled "policy (source)": belief (where it
	// sent prompts, an LRU bound; NoCacheTruth), truth (belief corrected
	// by the engines' cached tokens, the default) or events (the engines'
	// KV events). It overrides NoCacheTruth and KVEvents.
	CacheSources []string
	// Proxies, if set, runs every policy once per count of proxies in
	// front of each region's engines (RegionSpec.Proxies), labelled
	// "N proxies"; Sharing, once per setting of the proxies' dispatch
	// sharing ("on", "off"; Config.NoDispatchSharing), labelled "no
	// sharing" when off. Both multiply with CacheSources.
	Proxies []int
	Sharing []string
	// Progress, if set, is called as each policy finishes.
	Progress func(done, total int, res *results.Result)
}

// run is one simulation of a comparison: a policy in one variant.
type run struct {
	name, source string
	proxies      int    // per region; 0: the scenario's
	sharing      string // "on", "off", or "": the default (on)
}

// label is what the variant adds to the policy's name in the report.
func (rn run) label() string {
	var parts []string
	if rn.source != "" {
		parts = append(parts, rn.source)
	}
	if rn.proxies > 0 {
		parts = append(parts, fmt.Sprintf("%d proxies", rn.proxies))
		if rn.proxies == 1 {
			parts[len(parts)-1] = "1 proxy"
		}
	}
	if rn.sharing == "off" {
		parts = append(parts, "no sharing")
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// slug is the label as a name suffix fit for a file name:
// "-events-2proxies-nosharing".
func (rn run) slug() string {
	l := strings.NewReplacer(" (", "-", ")", "", ", ", "-", " ", "").Replace(rn.label())
	return l
}

// variants is every policy in every variant opt asks for: cache sources ×
// proxies × sharing.
func variants(names []string, opt Options) ([]run, error) {
	sources, proxies, sharing := opt.CacheSources, opt.Proxies, opt.Sharing
	for _, src := range sources {
		if !slices.Contains(CacheSources, src) {
			return nil, fmt.Errorf("cache source %q: want one of %s", src, strings.Join(CacheSources, ", "))
		}
	}
	for _, n := range proxies {
		if n < 1 || n > 16 {
			return nil, fmt.Errorf("proxies %d: want 1..16 per region", n)
		}
	}
	for _, s := range sharing {
		if s != "on" && s != "off" {
			return nil, fmt.Errorf("sharing %q: want on or off", s)
		}
	}
	if len(sources) == 0 {
		sources = []string{""}
	}
	if len(proxies) == 0 {
		proxies = []int{0}
	}
	if len(sharing) == 0 {
		sharing = []string{""}
	}
	var runs []run
	for _, n := range names {
		for _, src := range sources {
			for _, p := range proxies {
				for _, sh := range sharing {
					runs = append(runs, run{name: n, source: src, proxies: p, sharing: sh})
				}
			}
		}
	}
	return runs, nil
}

// CacheSources are what a router's prefix index may rest on (see
// Options.CacheSources).
var CacheSources = []string{"belief", "truth", "events"}

// Compare runs the scenario once per policy on identical arrivals and
// returns the results in policy order.
func Compare(s *Scenario, opt Options) (*results.Report, error) {
	sc := *s
	if opt.Seed != 0 {
		sc.Seed = opt.Seed
	}
	if opt.RateScale > 0 {
		sc.Workload.PeakRPS *= opt.RateScale
		if sc.Workload.Speedup == 0 {
			sc.Workload.Speedup = 1
		}
		sc.Workload.Speedup *= opt.RateScale
	}
	names := opt.Policies
	if len(names) == 0 {
		names = sc.PolicyNames()
	}
	runs, err := variants(names, opt)
	if err != nil {
		return nil, err
	}
	cfg, wl, err := sc.Build(opt.Trace)
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		pol, router, _ := strings.Cut(n, "@")
		if _, err := policy.New(pol, *cfg.PolicyConfig); err != nil {
			return nil, err
		}
		if router != "" && !slices.ContainsFunc(sc.Regions, func(r ScenarioRegion) bool { return r.Name == router }) {
			return nil, fmt.Errorf("%s: no region %q to put the router in", n, router)
		}
	}
	parallel := opt.Parallel
	if parallel <= 0 {
		parallel = runtime.GOMAXPROCS(0)
	}
	rep := &results.Report{Scenario: sc.Name, Seed: sc.Seed, Lengths: wl.Lengths, Results: make([]*results.Result, len(runs))}
	errs := make([]error, len(runs))
	sem := make(chan struct{}, parallel)
	var mu sync.Mutex
	done := 0
	var wg sync.WaitGroup
	for i, rn := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			src, err := wl.Source()
			if err != nil {
				errs[i] = err
				return
			}
			c := cfg
			c.Policy, c.Router, _ = strings.Cut(rn.name, "@")
			c.NoCacheTruth, c.KVEvents = cfg.NoCacheTruth || opt.NoCacheTruth, cfg.KVEvents || opt.KVEvents
			if rn.source != "" {
				c.NoCacheTruth, c.KVEvents = rn.source == "belief", rn.source == "events"
			}
			if rn.proxies > 0 {
				c.Regions = slices.Clone(cfg.Regions)
				for j := range c.Regions {
					c.Regions[j].Proxies = rn.proxies
				}
			}
			if rn.sharing != "" {
				c.NoDispatchSharing = rn.sharing == "off"
			}
			res, err := Run(c, src, wl.Span, wl.BlockTokens)
			if err != nil {
				errs[i] = fmt.Errorf("policy %s: %w", rn.name, err)
				return
			}
			res.Policy += rn.label()
			rep.Results[i] = res
			mu.Lock()
			done++
			if opt.Progress != nil {
				opt.Progress(done, len(runs), res)
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// ScenarioVariants is s once per variant of the fleet asked for — cache
// sources × proxies per region × dispatch sharing, as Options takes them —
// each named s's name with the variant's label, for an evaluation of each.
// One proxy is not varied by sharing (it has nobody to tell).
func ScenarioVariants(s *Scenario, sources []string, proxies []int, sharing []string) ([]*Scenario, error) {
	runs, err := variants([]string{""}, Options{CacheSources: sources, Proxies: proxies, Sharing: sharing})
	if err != nil {
		return nil, err
	}
	var out []*Scenario
	for _, rn := range runs {
		if rn.proxies == 1 && rn.sharing == "off" {
			continue
		}
		v := *s
		v.Name += rn.slug()
		v.Regions = slices.Clone(s.Regions)
		for i := range v.Regions {
			if rn.proxies > 0 {
				v.Regions[i].Proxies = rn.proxies
			}
		}
		if rn.source != "" {
			v.Balancer.CacheSource = rn.source
		}
		if rn.sharing != "" {
			on := rn.sharing == "on"
			v.Balancer.DispatchSharing = &on
		}
		out = append(out, &v)
	}
	return out, nil
}
