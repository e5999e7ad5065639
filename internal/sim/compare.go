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
	// Progress, if set, is called as each policy finishes.
	Progress func(done, total int, res *results.Result)
}

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
	rep := &results.Report{Scenario: sc.Name, Seed: sc.Seed, Lengths: wl.Lengths, Results: make([]*results.Result, len(names))}
	errs := make([]error, len(names))
	sem := make(chan struct{}, parallel)
	var mu sync.Mutex
	done := 0
	var wg sync.WaitGroup
	for i := range names {
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
			c.Policy, c.Router, _ = strings.Cut(names[i], "@")
			c.NoCacheTruth, c.KVEvents = opt.NoCacheTruth, opt.KVEvents
			res, err := Run(c, src, wl.Span, wl.BlockTokens)
			if err != nil {
				errs[i] = fmt.Errorf("policy %s: %w", names[i], err)
				return
			}
			rep.Results[i] = res
			mu.Lock()
			done++
			if opt.Progress != nil {
				opt.Progress(done, len(names), res)
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
