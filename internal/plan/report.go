package plan

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"skywalker/internal/sim"
	"skywalker/internal/workload"
)

// Report is a plan with its verification, as `skywalker plan` prints it.
type Report struct {
	*Result
	Target       float64        `json:"slo_target,omitempty"`
	Verification []Verification `json:"verification,omitempty"`
	// SLOAttainment at the planned placement, per policy (with --verify).
	SLOAttainment map[string]float64 `json:"slo_attainment,omitempty"`
	// MinReplicas per policy, and how much of the ideal savings
	// (isolated − aggregated) skywalker realizes against local.
	MinReplicas       map[string]int `json:"min_replicas,omitempty"`
	RealizedSavings   float64        `json:"realized_savings,omitempty"`
	ShareOfIdealSaved float64        `json:"share_of_ideal_realized,omitempty"`
}

// NewReport combines a plan with its verification against target.
func NewReport(res *Result, verification []Verification, target float64) Report {
	r := Report{Result: res, Verification: verification, Target: target}
	r.summarize()
	return r
}

func (r *Report) summarize() {
	if len(r.Verification) == 0 {
		return
	}
	r.SLOAttainment, r.MinReplicas = map[string]float64{}, map[string]int{}
	for _, v := range r.Verification {
		r.SLOAttainment[v.Policy] = v.SLOAttainment
		r.MinReplicas[v.Policy] = v.MinReplicas
	}
	sw, okS := r.MinReplicas["skywalker"]
	local, okL := r.MinReplicas["local"]
	if okS && okL && local > 0 {
		r.RealizedSavings = 1 - float64(sw)/float64(local)
		if ideal := r.IsolatedReplicas - r.AggregatedReplicas; ideal > 0 {
			r.ShareOfIdealSaved = float64(local-sw) / float64(ideal)
		}
	}
}

// WriteTable prints the report as aligned text.
func (r Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "capacity per replica\t%.2f requests/s\n", r.Capacity)
	fmt.Fprintf(tw, "region-isolated (sum of regional peaks)\t%d replicas\t%v\n", r.IsolatedReplicas, r.IsolatedByRegion)
	fmt.Fprintf(tw, "aggregated (peak of the sum)\t%d replicas\tsaves %.1f%%\n", r.AggregatedReplicas, 100*r.Savings)
	fmt.Fprintf(tw, "planned under links and residency\t%d replicas\tsaves %.1f%%\n", r.PlannedReplicas, 100*r.PlannedSavings)
	var parts []string
	for _, name := range SortedNames(r.Placement) {
		parts = append(parts, fmt.Sprintf("%s %d", name, r.Placement[name]))
	}
	fmt.Fprintf(tw, "placement\t%s\n", strings.Join(parts, ", "))
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Offloads) > 0 {
		fmt.Fprintln(w, "\nhours when a region offloads (UTC hour: from -> to, requests/s):")
		for _, o := range r.Offloads {
			fmt.Fprintf(w, "  %02d:00  %s -> %s  %.2f\n", o.Hour, o.From, o.To, o.Demand)
		}
	}
	if len(r.Verification) > 0 {
		fmt.Fprintf(w, "\nverification (one simulated day, target %.0f%% of requests within the TTFT SLO):\n", 100*r.Target)
		for _, v := range r.Verification {
			fmt.Fprintf(w, "  %-10s at the plan: %.2f%%   smallest reservation meeting the target: %d replicas %v\n",
				v.Policy, 100*v.SLOAttainment, v.MinReplicas, v.MinPlacement)
		}
		fmt.Fprintf(w, "  skywalker needs %.1f%% fewer replicas than local; it realizes %.0f%% of the ideal savings\n",
			100*r.RealizedSavings, 100*r.ShareOfIdealSaved)
	}
	return nil
}

// FromScenarioTrace replaces the scenario's demand curves with a trace's
// arrival pattern stretched over a day in each of its regions (see
// FromTrace), keeping base's RTTs and threshold.
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
	in.RTT, in.MaxWANRTT = base.RTT, base.MaxWANRTT
	return in, nil
}
