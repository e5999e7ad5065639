package plan

import (
	"fmt"
	"math"
	"sort"
	"time"

	"skywalker/internal/sim"
)

// Trial is one simulated reservation.
type Trial struct {
	Replicas      int            `json:"replicas"`
	Placement     map[string]int `json:"placement"`
	SLOAttainment float64        `json:"slo_attainment"`
}

// Verification is one policy's simulated outcome.
type Verification struct {
	Policy string `json:"policy"`
	// SLOAttainment at the planned placement.
	SLOAttainment float64 `json:"slo_attainment"`
	// MinReplicas is the smallest reservation at which the policy meets the
	// target, found by bisection; MinPlacement how it was placed.
	MinReplicas  int            `json:"min_replicas"`
	MinPlacement map[string]int `json:"min_placement"`
	Trials       []Trial        `json:"trials"`
}

// VerifyOptions tune Verify.
type VerifyOptions struct {
	Policies []string // default skywalker and local
	Target   float64  // SLO attainment to meet; default 0.99
	// Progress, if set, is told about every simulation.
	Progress func(policy string, t Trial)
}

// Verify simulates one day of the scenario's workload with the planned
// placement under each policy, then searches each policy's smallest
// reservation that meets the SLO-attainment target. Policies that share
// across regions get the plan's placement scaled to the size tried;
// region-isolated ones (local) get replicas in proportion to each region's
// own peak, which is the best they can do.
func Verify(s *sim.Scenario, in Input, res *Result, opt VerifyOptions) ([]Verification, error) {
	if len(opt.Policies) == 0 {
		opt.Policies = []string{"skywalker", "local"}
	}
	if opt.Target <= 0 {
		opt.Target = 0.99
	}
	var out []Verification
	for _, p := range opt.Policies {
		v := Verification{Policy: p}
		place := func(n int) map[string]int { return proportional(in, res, n, p != "local") }
		run := func(placement map[string]int) (Trial, error) {
			att, err := simulate(s, p, placement)
			t := Trial{Replicas: sum(placement), Placement: placement, SLOAttainment: att}
			if err == nil && opt.Progress != nil {
				opt.Progress(p, t)
			}
			return t, err
		}
		planned := map[string]int{}
		for k, n := range res.Placement {
			planned[k] = n
		}
		t, err := run(planned)
		if err != nil {
			return nil, err
		}
		v.SLOAttainment = t.SLOAttainment
		v.Trials = append(v.Trials, t)
		// Bisection on the total: lo fails (or is the floor), hi meets.
		lo, hi := len(in.Regions)-1, res.IsolatedReplicas+len(in.Regions)
		if t.SLOAttainment >= opt.Target {
			hi = t.Replicas
		} else {
			lo = t.Replicas
		}
		var best Trial
		if t.SLOAttainment >= opt.Target {
			best = t
		}
		// Grow the upper bound until it meets the target (a policy may need
		// more than region isolation's count: isolation's count assumes the
		// capacity per replica that was planned with).
		for best.Placement == nil {
			t, err := run(place(hi))
			if err != nil {
				return nil, err
			}
			v.Trials = append(v.Trials, t)
			if t.SLOAttainment >= opt.Target {
				best = t
				break
			}
			if hi > 4*res.IsolatedReplicas+4*len(in.Regions) {
				return nil, fmt.Errorf("verify %s: no reservation up to %d replicas meets %.1f%% of the SLO", p, hi, 100*opt.Target)
			}
			lo, hi = hi, hi+max(hi/4, 1)
		}
		for hi-lo > 1 {
			mid := (lo + hi) / 2
			t, err := run(place(mid))
			if err != nil {
				return nil, err
			}
			v.Trials = append(v.Trials, t)
			if t.SLOAttainment >= opt.Target {
				hi, best = mid, t
			} else {
				lo = mid
			}
		}
		v.MinReplicas, v.MinPlacement = best.Replicas, best.Placement
		out = append(out, v)
	}
	return out, nil
}

// proportional places n replicas: along the plan's fractional placement for
// sharing policies, along regional peaks for isolated ones; at least one
// per region.
func proportional(in Input, res *Result, n int, sharing bool) map[string]int {
	weights := make([]float64, len(in.Regions))
	total := 0.0
	for i, r := range in.Regions {
		if sharing {
			weights[i] = res.FractionalPlace[r.Name]
		} else {
			for _, d := range r.Demand {
				weights[i] = math.Max(weights[i], d)
			}
		}
		total += weights[i]
	}
	x := make([]float64, len(weights))
	n = max(n, len(weights))
	for i, w := range weights {
		x[i] = 1 + (w/math.Max(total, 1e-9))*float64(n-len(weights))
	}
	placement := roundPlacement(x, n)
	out := map[string]int{}
	for i, r := range in.Regions {
		out[r.Name] = placement[i]
	}
	return out
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// simulate runs one day of the scenario under a policy and placement and
// returns the SLO attainment.
func simulate(s *sim.Scenario, policyName string, placement map[string]int) (float64, error) {
	sc := *s
	sc.Regions = append([]sim.ScenarioRegion(nil), s.Regions...)
	for i := range sc.Regions {
		n, ok := placement[sc.Regions[i].Name]
		if !ok || n < 1 {
			n = 1
		}
		sc.Regions[i].Replicas = n
	}
	if sc.Workload.Kind == "diurnal" {
		sc.Workload.Duration = sc.Workload.Day
	}
	rep, err := sim.Compare(&sc, sim.Options{Policies: []string{policyName}, Parallel: 1})
	if err != nil {
		return 0, fmt.Errorf("verify %s: %w", policyName, err)
	}
	return rep.Results[0].SLOAttainment, nil
}

// MeasureCapacity finds, by simulation, the requests/s one replica of the
// scenario's first region serves within the SLO-attainment target: a
// single region of two replicas under flat demand of the scenario's
// request mix, bisecting on the rate.
func MeasureCapacity(s *sim.Scenario, target float64) (float64, error) {
	if s.Workload.Kind != "diurnal" {
		return 0, fmt.Errorf("measure capacity: needs a diurnal scenario's request mix")
	}
	if target <= 0 {
		target = 0.99
	}
	sc := *s
	region := s.Regions[0]
	region.Replicas, region.Weight = 2, 1
	sc.Regions = []sim.ScenarioRegion{region}
	sc.RTT, sc.Faults = nil, nil
	sc.Workload.ValleyRatio, sc.Workload.Bursts = 1, nil
	sc.Workload.Duration = min(s.Workload.Day, 30*time.Minute)
	sc.Workload.Day = sc.Workload.Duration
	meets := func(rate float64) (bool, error) {
		sc.Workload.PeakRPS = 2 * rate
		rep, err := sim.Compare(&sc, sim.Options{Policies: []string{"skywalker"}, Parallel: 1})
		if err != nil {
			return false, err
		}
		return rep.Results[0].SLOAttainment >= target, nil
	}
	lo, hi := 0.0, 1.0
	for {
		ok, err := meets(hi)
		if err != nil {
			return 0, err
		}
		if !ok {
			break
		}
		lo, hi = hi, hi*2
		if hi > 1e4 {
			return 0, fmt.Errorf("measure capacity: no saturation found")
		}
	}
	for range 7 {
		mid := (lo + hi) / 2
		ok, err := meets(mid)
		if err != nil {
			return 0, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return math.Round(lo*100) / 100, nil
}

// SortedNames lists placement keys in order.
func SortedNames(m map[string]int) []string {
	var names []string
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}
