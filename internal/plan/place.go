package plan

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"

	"skywalker/internal/price"
)

// Place places n replicas as the planner would: along the plan's
// fractional placement for policies that share across regions, along
// regional peaks for region-isolated ones; at least one per region that
// holds replicas, none where the model is not served (NoReplicas).
func Place(in Input, res *Result, n int, sharing bool) map[string]int {
	weights := make([]float64, len(in.Regions))
	total := 0.0
	hosts := 0
	for i, r := range in.Regions {
		if r.NoReplicas {
			continue
		}
		hosts++
		if sharing {
			weights[i] = res.FractionalPlace[r.Name]
		} else {
			weights[i] = in.peak(i) / in.capacity(i) // the replicas its own peak needs
		}
		total += weights[i]
	}
	x := make([]float64, len(weights))
	n = max(n, hosts)
	for i, w := range weights {
		if !in.Regions[i].NoReplicas {
			x[i] = 1 + (w/math.Max(total, 1e-9))*float64(n-hosts)
		}
	}
	placement := roundPlacement(x, n)
	out := map[string]int{}
	for i, r := range in.Regions {
		out[r.Name] = placement[i]
	}
	return out
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

// Uniform reports whether every region's replicas serve alike (see
// Input.uniform): a fleet is then measured in replicas; otherwise in money.
func (in *Input) Uniform() bool { return in.uniform() }

// CheapestShares is how a fleet reserved all day (nothing rented) spreads
// over the regions for the least money under the reach and residency
// rules: the cost LP's fractional replicas per region. It is where a
// search for the cheapest fleet that meets the SLO grows a mixed fleet.
func CheapestShares(in Input) (map[string]float64, error) {
	in.Regions = slices.Clone(in.Regions)
	for j := range in.Regions {
		in.Regions[j].Price.OnDemandAvailable, in.Regions[j].Price.Spot = false, 0
	}
	if !in.priced() {
		return nil, errors.New("plan: cheapest shares: a region that may hold replicas has no price")
	}
	sol, err := costLP(in, nil, allHours())
	if err != nil {
		return nil, fmt.Errorf("plan: cheapest shares: %w", err)
	}
	out := map[string]float64{}
	for j, r := range in.Regions {
		out[r.Name] = sol.reserved[j]
	}
	return out, nil
}

// MonthlyReserved is what a fleet reserved all day costs a month.
func (in *Input) MonthlyReserved(placement map[string]int) float64 {
	total := 0.0
	for j, r := range in.Regions {
		total += float64(placement[r.Name]) * in.reservedRate(j) * price.HoursPerMonth
	}
	return total
}
