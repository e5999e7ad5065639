package plan

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"skywalker/internal/price"

	"skywalker/internal/sim"
	"skywalker/internal/workload"
)

// WriteTable prints the plan as aligned text.
func (r *Result) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(r.CapacityByRegion) > 0 {
		var parts []string
		for _, name := range slices.Sorted(maps.Keys(r.CapacityByRegion)) {
			parts = append(parts, fmt.Sprintf("%s %.2f", name, r.CapacityByRegion[name]))
		}
		fmt.Fprintf(tw, "capacity per replica\t%s requests/s (mixed hardware: replicas are not one currency, the cost plan below is the plan)\n", strings.Join(parts, ", "))
	} else {
		fmt.Fprintf(tw, "capacity per replica\t%.2f requests/s\n", r.Capacity)
	}
	fmt.Fprintf(tw, "region-isolated (sum of regional peaks)\t%d replicas\t%s\n", r.IsolatedReplicas, byRegion(r.IsolatedByRegion))
	fmt.Fprintf(tw, "aggregated (peak of the sum)\t%d replicas\tsaves %.1f%%\n", r.AggregatedReplicas, 100*r.Savings)
	fmt.Fprintf(tw, "planned under links and residency\t%d replicas\tsaves %.1f%%\n", r.PlannedReplicas, 100*r.PlannedSavings)
	fmt.Fprintf(tw, "placement\t%s\n", byRegion(r.Placement))
	out := "none"
	if len(r.OutOfReach) > 0 {
		out = strings.Join(r.OutOfReach, ", ")
	}
	fmt.Fprintf(tw, "links out of reach\t%s\t(reach: %s)\n", out, r.Reach)
	for i, why := range r.HeldBy {
		label := ""
		if i == 0 {
			label = fmt.Sprintf("above the aggregated %d because", r.AggregatedReplicas)
		}
		fmt.Fprintf(tw, "%s\t%s\n", label, why)
	}
	for i, what := range r.Unserved {
		label := ""
		if i == 0 {
			label = "served nowhere (misses for every router)"
		}
		fmt.Fprintf(tw, "%s\t%s\n", label, what)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Offloads) > 0 {
		fmt.Fprintln(w, "\nhours when a region offloads (UTC hour: from -> to, requests/s):")
		for _, o := range r.Offloads {
			fmt.Fprintf(w, "  %02d:00  %s -> %s  %.2f\n", o.Hour, o.From, o.To, o.Demand)
		}
	}
	return nil
}

// byRegion renders replicas per region as "ap-east 6, eu-west 6".
func byRegion(m map[string]int) string {
	var parts []string
	for _, name := range SortedNames(m) {
		parts = append(parts, fmt.Sprintf("%s %d", name, m[name]))
	}
	return strings.Join(parts, ", ")
}

// FromScenarioTrace replaces the scenario's demand curves with a trace's
// arrival pattern stretched over a day in each of its regions (see
// FromTrace), keeping base's RTTs and reach.
func FromScenarioTrace(base Input, s *sim.Scenario, path string, scale float64) (Input, error) {
	recs, err := workload.LoadTrace(path, "")
	if err != nil {
		return Input{}, err
	}
	var regions []RegionTZ
	for _, r := range s.Regions {
		regions = append(regions, RegionTZ{Name: r.Name, Jurisdiction: r.Jurisdiction, UTCOffset: r.UTCOffset})
	}
	in, err := FromTrace(recs, regions, scale)
	if err != nil {
		return Input{}, err
	}
	// Everything but the demand is the scenario's: its links, objective,
	// residency, hardware, capacities and prices.
	out := base
	out.Regions = slices.Clone(base.Regions)
	for i := range out.Regions { // both list the scenario's regions in its order
		out.Regions[i].Demand = in.Regions[i].Demand
	}
	return out, nil
}

// WriteTable prints the cost plan: the options side by side, then each
// region's hardware, capacity, price (each with its source), reservation
// and rentals.
func (cp *CostPlan) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "monthly cost (%g hours a month; reserved on a %s term, rented by the hour):\n", price.HoursPerMonth, cp.Term)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  option\t$/month\tsaving vs isolated\thow")
	for _, o := range cp.Options {
		fmt.Fprintf(tw, "  %s\t%s\t%.1f%%\t%s\n", o.Name, dollars(o.Monthly), 100*o.Saving, o.How)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for i, why := range cp.HeldBy {
		if i == 0 {
			fmt.Fprintf(w, "above the pooling bound because:\n")
		}
		fmt.Fprintf(w, "  %s\n", why)
	}
	fmt.Fprintln(w, "\nthe plan by region:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  region\thardware\trequests/s per replica\treserved\ton-demand replica-hours/day\tspot replica-hours/day\t$/GPU-hour reserved / on demand\t$/month")
	for _, r := range cp.Regions {
		onDemand, spot := 0, 0
		for h := range Hours {
			onDemand += r.OnDemand[h]
			spot += r.Spot[h]
		}
		od := "none"
		if r.Price.OnDemandAvailable {
			od = fmt.Sprintf("%.2f", r.Price.OnDemand)
		}
		fmt.Fprintf(tw, "  %s\t%s (%d× %s)\t%.2f\t%d\t%d\t%d\t%.2f / %s\t%s\n", r.Name, r.Profile, r.GPUsPerReplica, r.GPU, r.Capacity,
			r.Reserved, onDemand, spot, r.Price.Reserved, od, dollars(r.Monthly))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nwhere the figures come from:")
	for _, what := range []struct {
		name   string
		source func(RegionCost) string
	}{{"capacity", func(r RegionCost) string { return r.CapacitySource }}, {"prices", func(r RegionCost) string { return r.Price.Source }}} {
		var sources []string
		regions := map[string][]string{}
		for _, r := range cp.Regions {
			s := what.source(r)
			if _, seen := regions[s]; !seen {
				sources = append(sources, s)
			}
			regions[s] = append(regions[s], r.Name)
		}
		for _, s := range sources {
			fmt.Fprintf(w, "  %s of %s: %s\n", what.name, strings.Join(regions[s], ", "), s)
		}
	}
	fmt.Fprintf(w, "  the default prices: %s\n", cp.DefaultPriceSource)
	return nil
}

// dollars renders money as "$12,345".
func dollars(x float64) string {
	s := strconv.FormatFloat(math.Round(x), 'f', 0, 64)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		return "-$" + s
	}
	return "$" + s
}
