package plan

import (
	"fmt"
	"time"

	"skywalker/internal/price"
	"skywalker/internal/profile"
	"skywalker/internal/sim"
)

// Capacity is what one replica of a profile serves within the SLO, and
// where the figure came from (measured, configured, assumed).
type Capacity struct {
	PerReplica float64 `json:"requests_per_s"`
	Source     string  `json:"source"`
}

// ScenarioCapacities are the capacities a scenario configures, by
// profile: plan_capacity for its first region's profile (where
// --measure-capacity measured it), plan_capacities for any.
func ScenarioCapacities(s *sim.Scenario) map[string]Capacity {
	out := map[string]Capacity{}
	if s.PlanCapacity > 0 && len(s.Regions) > 0 {
		out[profileName(s.Regions[0].Profile)] = Capacity{s.PlanCapacity, "configured: the scenario's plan_capacity"}
	}
	for p, c := range s.PlanCapacities {
		out[profileName(p)] = Capacity{c, "configured: the scenario's plan_capacities"}
	}
	return out
}

// MeasureProfiles measures every profile the scenario's regions run (see
// MeasureCapacity), each on the first region that runs it.
func MeasureProfiles(s *sim.Scenario, target float64) (map[string]Capacity, error) {
	out := map[string]Capacity{}
	for i, r := range s.Regions {
		p := profileName(r.Profile)
		if _, done := out[p]; done {
			continue
		}
		c, err := measure(s, i, "", target)
		if err != nil {
			return nil, fmt.Errorf("measure capacity of %s: %w", p, err)
		}
		out[p] = Capacity{c, fmt.Sprintf("measured: two %s replicas under the scenario's request mix, %.0f%% within the SLO", p, 100*targetOr(target))}
	}
	return out, nil
}

// SetCapacities gives each region the capacity of its profile; a region
// whose profile has none keeps the input's Capacity, and says it is
// assumed from another profile's. A capacity the demand file gave stays.
func (in *Input) SetCapacities(byProfile map[string]Capacity, fallback Capacity) {
	for j := range in.Regions {
		r := &in.Regions[j]
		if r.Capacity > 0 && r.CapacitySource != "" {
			continue // the demand file's own
		}
		if c, ok := byProfile[profileName(r.Profile)]; ok {
			r.Capacity, r.CapacitySource = c.PerReplica, c.Source
			continue
		}
		r.Capacity, r.CapacitySource = 0, fallback.Source
		if len(byProfile) > 0 && fallback.PerReplica > 0 {
			r.CapacitySource = fmt.Sprintf("assumed: %s's figure is not this profile's (%.2f requests/s, %s); measure it with --measure-capacity", r.Profile, fallback.PerReplica, fallback.Source)
		}
	}
	in.Capacity = fallback.PerReplica
}

// Price resolves every region's GPU price from book (nil: the shipped
// defaults); a region of unknown hardware runs profile fallback.
func (in *Input) Price(book *price.Book, fallback string) error {
	for j := range in.Regions {
		r := &in.Regions[j]
		if r.Profile == "" {
			r.Profile = profileName(fallback)
		}
		if r.GPU == "" {
			p, err := profile.Lookup(r.Profile)
			if err != nil {
				return fmt.Errorf("plan: region %s: %w", r.Name, err)
			}
			r.GPU, r.GPUs = p.GPU, p.GPUs
		}
		p, err := book.Resolve(r.Name, r.GPU)
		if err != nil {
			return fmt.Errorf("plan: %w", err)
		}
		r.Price = p
	}
	return nil
}

// profileName is the profile a region runs ("" is the default).
func profileName(p string) string {
	if p == "" {
		return profile.Default
	}
	return p
}

func targetOr(target float64) float64 {
	if target <= 0 {
		return defaultTarget
	}
	return target
}

// defaultTarget is the SLO attainment a measured capacity meets.
const defaultTarget = 0.99

// Replay is the scenario's day on a cost plan's fleet: each region's
// reserved replicas all day, and its rented ones (on demand and spot)
// only in the hours the plan rents them — down (empty, as a new machine
// is) in the others. The hours of the plan (UTC) are laid on the
// workload's clock as FromScenario reads them.
func Replay(s *sim.Scenario, cp *CostPlan) (*sim.Scenario, error) {
	if s.Workload.Kind != "diurnal" {
		return nil, fmt.Errorf("plan: replay: needs a diurnal scenario")
	}
	out := *s
	out.Regions = append([]sim.ScenarioRegion(nil), s.Regions...)
	out.Faults = append([]sim.ScenarioFault(nil), s.Faults...)
	day := s.Workload.Day
	slot := day / Hours
	startHour := 0.0
	if _, wl, err := s.Build(""); err == nil && wl.Diurnal != nil {
		startHour = wl.Diurnal.StartHour
	}
	// slotOf is the place of UTC hour h on the workload's clock.
	slotOf := func(h int) int { return (h - int(startHour) + 24) % 24 }
	for i := range out.Regions {
		r := &out.Regions[i]
		if i >= len(cp.Regions) || cp.Regions[i].Name != r.Name {
			return nil, fmt.Errorf("plan: replay: the cost plan's regions are not the scenario's")
		}
		rc := cp.Regions[i]
		rented := 0
		var running [Hours]int // rented replicas by slot of the workload's clock
		for h := range Hours {
			running[slotOf(h)] = rc.OnDemand[h] + rc.Spot[h]
			rented = max(rented, running[slotOf(h)])
		}
		r.Replicas = rc.Reserved + rented
		if r.Replicas == 0 {
			// The plan holds nothing here: the region's router stays, its
			// one replica down all day, and its demand goes where the plan
			// serves it.
			r.Replicas = 1
			out.Faults = append(out.Faults, sim.ScenarioFault{Kind: string(sim.ReplicaCrash), Duration: max(s.Workload.Duration, day) + day, Region: r.Name})
			continue
		}
		// Rented replica k runs in the slots that rent more than k: it is
		// down through each run of the others, one fault per run.
		for k := range rented {
			for from := 0; from < Hours; {
				if running[from] > k {
					from++
					continue
				}
				to := from
				for to < Hours && running[to] <= k {
					to++
				}
				out.Faults = append(out.Faults, sim.ScenarioFault{Kind: string(sim.ReplicaCrash), At: time.Duration(from) * slot,
					Duration: time.Duration(to-from) * slot, Region: r.Name, Replica: rc.Reserved + k})
				from = to
			}
		}
	}
	return &out, nil
}
