package plan

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"skywalker/internal/sim"
	"skywalker/internal/workload"
)

// WriteTable prints the plan as aligned text.
func (r *Result) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "capacity per replica\t%.2f requests/s\n", r.Capacity)
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
	in.RTT, in.MaxWANRTT, in.Objective, in.TTFT = base.RTT, base.MaxWANRTT, base.Objective, base.TTFT
	return in, nil
}
