package plan

import (
	"fmt"
	"math"
	"slices"
	"time"

	"skywalker/internal/sim"
)

// MeasureCapacity finds, by simulation, the requests/s one replica of the
// scenario's first region serves within the SLO-attainment target: a
// single region of two replicas under flat demand of the scenario's
// request mix, bisecting on the rate. For a scenario of several models,
// MeasureModelCapacity measures one.
func MeasureCapacity(s *sim.Scenario, target float64) (float64, error) {
	return MeasureModelCapacity(s, "", target)
}

// MeasureModelCapacity is MeasureCapacity for one model of a scenario of
// several: two replicas of its profile, serving only its requests (its
// adapters too).
func MeasureModelCapacity(s *sim.Scenario, model string, target float64) (float64, error) {
	return measure(s, 0, model, target)
}

// measure is the capacity of one replica of region i's hardware (of model,
// if set).
func measure(s *sim.Scenario, i int, model string, target float64) (float64, error) {
	if s.Workload.Kind != "diurnal" {
		return 0, fmt.Errorf("measure capacity: needs a diurnal scenario's request mix")
	}
	target = targetOr(target)
	sc := *s
	region := s.Regions[i]
	region.Replicas, region.Weight = 2, 1
	if model != "" {
		i := slices.IndexFunc(s.Models, func(m sim.ScenarioModel) bool { return m.Name == model })
		if i < 0 {
			return 0, fmt.Errorf("measure capacity: the scenario has no model %q", model)
		}
		m := s.Models[i]
		m.Share = 1
		sc.Models = []sim.ScenarioModel{m}
		region.Replicas, region.Pools = 0, []sim.ScenarioPool{{Model: model, Replicas: 2}}
	}
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
