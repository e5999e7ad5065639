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
	// Progress, if set, is called as each policy finishes.
	Progress func(done, total int, res *results.Result)
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
	type run struct {
		name, source string
	}
	var runs []run
	for _, n := range names {
		if len(opt.CacheSources) == 0 {
			runs = append(runs, run{name: n})
		}
		for _, src := range opt.CacheSources {
			if !slices.Contains(CacheSources, src) {
				return nil, fmt.Errorf("cache source %q: want one of %s", src, strings.Join(CacheSources, ", "))
			}
			runs = append(runs, run{name: n, source: src})
		}
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
			c.NoCacheTruth, c.KVEvents = opt.NoCacheTruth, opt.KVEvents
			if rn.source != "" {
				c.NoCacheTruth, c.KVEvents = rn.source == "belief", rn.source == "events"
			}
			res, err := Run(c, src, wl.Span, wl.BlockTokens)
			if err != nil {
				errs[i] = fmt.Errorf("policy %s: %w", rn.name, err)
				return
			}
			if rn.source != "" {
				res.Policy += " (" + rn.source + ")"
			}
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
