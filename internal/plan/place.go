package plan

import (
	"math"
	"sort"
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
			for _, d := range r.Demand {
				weights[i] = math.Max(weights[i], d)
			}
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
