package plan

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// ModelPlan is the plan of one model of a fleet of several: its own
// demand (its share of each region's), its own replicas' capacity and
// profile, its own reach (a 70B model's slower first token affords less
// RTT).
type ModelPlan struct {
	Model   string `json:"model"`
	Profile string `json:"profile"`
	*Result
}

// FleetPlan is a fleet of several models planned model by model, with
// its totals: replicas are not interchangeable between models (a 70B
// replica is four H100s, an 8B one an L4), so each model pools only with
// itself.
type FleetPlan struct {
	Models []ModelPlan `json:"models"`
	// The totals over the models, and per region.
	IsolatedReplicas int            `json:"isolated_replicas"`
	PlannedReplicas  int            `json:"planned_replicas"`
	PlannedSavings   float64        `json:"planned_savings"`
	Placement        map[string]int `json:"placement"`
	IsolatedByRegion map[string]int `json:"isolated_by_region"`
}

// Fleet totals the models' plans.
func Fleet(models []ModelPlan) *FleetPlan {
	f := &FleetPlan{Models: models, Placement: map[string]int{}, IsolatedByRegion: map[string]int{}}
	for _, m := range models {
		f.IsolatedReplicas += m.IsolatedReplicas
		f.PlannedReplicas += m.PlannedReplicas
		for r, n := range m.Placement {
			f.Placement[r] += n
		}
		for r, n := range m.IsolatedByRegion {
			f.IsolatedByRegion[r] += n
		}
	}
	if f.IsolatedReplicas > 0 {
		f.PlannedSavings = 1 - float64(f.PlannedReplicas)/float64(f.IsolatedReplicas)
	}
	return f
}

// WriteTable prints each model's plan, then the totals per region.
func (f *FleetPlan) WriteTable(w io.Writer) error {
	for _, m := range f.Models {
		fmt.Fprintf(w, "model %s (%s):\n", m.Model, m.Profile)
		if err := m.Result.WriteTable(w); err != nil {
			return err
		}
		fmt.Fprintln(w)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "every model, region-isolated\t%d replicas\t%s\n", f.IsolatedReplicas, byRegion(f.IsolatedByRegion))
	fmt.Fprintf(tw, "every model, planned\t%d replicas\tsaves %.1f%%\t%s\n", f.PlannedReplicas, 100*f.PlannedSavings, byRegion(f.Placement))
	return tw.Flush()
}
