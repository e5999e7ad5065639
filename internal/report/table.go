package report

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"skywalker/internal/results"
)

// column is one column of the results table.
type column struct {
	head string
	cell func(*results.Result) string
}

func f1(x float64) string { return fmt.Sprintf("%.1f", x) }

// lat prints a latency; one that falls on a request never answered is ∞.
func lat(m results.Millis) string {
	if m.Missed() {
		return "∞"
	}
	return f0(float64(m))
}
func f0(x float64) string  { return fmt.Sprintf("%.0f", x) }
func pct(x float64) string { return fmt.Sprintf("%.1f%%", 100*x) }

var columns = []column{
	{"policy", func(r *results.Result) string { return r.Policy }},
	{"requests", func(r *results.Result) string { return fmt.Sprint(r.Requests) }},
	{"completed", func(r *results.Result) string { return fmt.Sprint(r.Completed) }},
	{"dropped", func(r *results.Result) string { return fmt.Sprint(r.Dropped) }},
	{"TTFT p50 ms", func(r *results.Result) string { return lat(r.TTFTP50Ms) }},
	{"TTFT p90 ms", func(r *results.Result) string { return lat(r.TTFTP90Ms) }},
	{"TTFT p99 ms", func(r *results.Result) string { return lat(r.TTFTP99Ms) }},
	{"E2E p50 ms", func(r *results.Result) string { return lat(r.E2EP50Ms) }},
	{"E2E p99 ms", func(r *results.Result) string { return lat(r.E2EP99Ms) }},
	{"TPOT ms", func(r *results.Result) string { return f1(r.TPOTMs) }},
	{"out tok/s", func(r *results.Result) string { return f0(r.ThroughputTokS) }},
	{"(in+2out) tok/s", func(r *results.Result) string { return f0(r.PaperThroughput) }},
	{"goodput rps", func(r *results.Result) string { return fmt.Sprintf("%.2f", r.GoodputRPS) }},
	{"SLO", func(r *results.Result) string { return pct(r.SLOAttainment) }},
	{"refused", func(r *results.Result) string { return fmt.Sprint(r.Refused) }},
	{"shed", func(r *results.Result) string { return fmt.Sprint(r.Shed) }},
	{"admitted SLO", func(r *results.Result) string { return pct(r.AdmittedSLOAttainment) }},
	{"cache hit", func(r *results.Result) string { return pct(r.CacheHitRate) }},
	{"cross-region", func(r *results.Result) string { return pct(r.CrossRegion) }},
	{"utilization", func(r *results.Result) string { return utilization(r) }},
}

// optional are the columns shown, before utilization, when some run has
// a value for them.
var optional = []struct {
	column
	shown func(*results.Result) bool
}{
	{column{"unservable", func(r *results.Result) string { return fmt.Sprint(r.Unservable) }}, func(r *results.Result) bool { return r.Unservable > 0 }},
	{column{"adapter loads", func(r *results.Result) string { return fmt.Sprint(r.AdapterLoads) }}, func(r *results.Result) bool { return r.AdapterLoads > 0 }},
	{column{"prefix precision", func(r *results.Result) string { return pct(r.PrefixPrecision) }}, func(r *results.Result) bool { return r.PrefixPrecision > 0 }},
	{column{"prefix recall", func(r *results.Result) string { return pct(r.PrefixRecall) }}, func(r *results.Result) bool { return r.PrefixRecall > 0 }},
	{column{"follow-ups moved", func(r *results.Result) string { return pct(r.FollowUpsMoved) }}, func(r *results.Result) bool { return r.FollowUpsMoved > 0 || r.ChainTurns > 0 }},
	{column{"chain turns", func(r *results.Result) string { return fmt.Sprint(r.ChainTurns) }}, func(r *results.Result) bool { return r.ChainTurns > 0 }},
	{column{"chains broken", func(r *results.Result) string {
		return fmt.Sprint(r.Drops["previous_response_not_found"] + r.ChainsRestarted)
	}},
		func(r *results.Result) bool { return r.ChainTurns > 0 }},
	{column{"forwards timed out", func(r *results.Result) string { return fmt.Sprint(r.ForwardTimeouts) }}, func(r *results.Result) bool { return r.ForwardTimeouts > 0 }},
	{column{"forwards wasted", func(r *results.Result) string {
		return fmt.Sprintf("%d (%.0f engine-s)", r.ForwardsWasted, r.WastedEngineSeconds)
	}}, func(r *results.Result) bool { return r.ForwardsWasted > 0 }},
	{column{"chains started over", func(r *results.Result) string { return fmt.Sprint(r.ChainsStartedOver) }}, func(r *results.Result) bool { return r.ChainsStartedOver > 0 }},
}

// columnsFor is the columns for rep: the optional ones some run has a
// value for too.
func columnsFor(rep *results.Report) []column {
	out := slices.Clone(columns[:len(columns)-1])
	for _, o := range optional {
		if slices.ContainsFunc(rep.Results, o.shown) {
			out = append(out, o.column)
		}
	}
	return append(out, columns[len(columns)-1])
}

func utilization(r *results.Result) string {
	names := make([]string, 0, len(r.Utilization))
	for n := range r.Utilization {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %.0f%%", n, 100*r.Utilization[n])
	}
	return strings.Join(parts, " ")
}

// Table writes the results as an aligned text table.
func Table(w io.Writer, rep *results.Report) error {
	fmt.Fprintf(w, "scenario %s, seed %d, lengths from %s\n\n", rep.Scenario, rep.Seed, rep.Lengths)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	columns := columnsFor(rep)
	for i, c := range columns {
		sep := "\t"
		if i == len(columns)-1 {
			sep = "\t\n"
		}
		fmt.Fprint(tw, c.head+sep)
	}
	for _, r := range rep.Results {
		for i, c := range columns {
			sep := "\t"
			if i == len(columns)-1 {
				sep = "\t\n"
			}
			fmt.Fprint(tw, c.cell(r)+sep)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := timeTable(w, rep, false); err != nil {
		return err
	}
	return breakdowns(w, rep, false, maxTableTenants)
}

// timeTable writes, for runs that know where their requests' time went
// (the simulator's), each part of the time to first token (mean / p99 of
// the completed requests: held in balancer queues, on the network, in the
// engine's queue, in prefill) and what the SLO misses are owed to.
func timeTable(w io.Writer, rep *results.Report, markdown bool) error {
	if !slices.ContainsFunc(rep.Results, func(r *results.Result) bool { return r.TimeParts != nil }) {
		return nil
	}
	heads := []string{"policy", "hold ms", "network ms", "engine queue ms", "prefill ms", "SLO misses owed to"}
	part := func(mean, p99 float64) string { return fmt.Sprintf("%.0f / %.0f", mean, p99) }
	var rows [][]string
	for _, r := range rep.Results {
		tp := r.TimeParts
		if tp == nil {
			continue
		}
		rows = append(rows, []string{r.Policy, part(tp.HoldMeanMs, tp.HoldP99Ms), part(tp.NetworkMeanMs, tp.NetworkP99Ms),
			part(tp.EngineQueueMeanMs, tp.EngineQueueP99Ms), part(tp.PrefillMeanMs, tp.PrefillP99Ms), tp.MissSummary()})
	}
	const title = "where the time to first token goes (mean / p99 of completed requests) and what the SLO misses are owed to"
	if markdown {
		var b strings.Builder
		b.WriteString("\n" + strings.ToUpper(title[:1]) + title[1:] + ":\n\n| " + strings.Join(heads, " | ") + " |\n|---|" + strings.Repeat("---:|", len(heads)-2) + "---|\n")
		for _, row := range rows {
			b.WriteString("| " + strings.Join(row, " | ") + " |\n")
		}
		_, err := io.WriteString(w, b.String())
		return err
	}
	fmt.Fprintln(w, "\n"+title+":")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(heads, "\t")+"\t")
	for _, row := range rows {
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	return tw.Flush()
}

// maxTableTenants: the tables break a run down by tenant only up to this
// many tenants (the JSON always has them all).
const maxTableTenants = 4

// breakdowns writes, for runs with more than one model, tenant (up to
// maxTenants) or priority class, how each fared:
// requests, refused on arrival, shed, SLO attainment of all and of the
// admitted, goodput.
func breakdowns(w io.Writer, rep *results.Report, markdown bool, maxTenants int) error {
	type row struct{ policy, group string }
	var rows []row
	var stats []results.GroupStats
	for _, r := range rep.Results {
		for _, kind := range []struct {
			label string
			m     map[string]results.GroupStats
		}{{"model", r.Models}, {"tenant", r.Tenants}, {"priority", r.Classes}} {
			if len(kind.m) < 2 || (kind.label == "tenant" && len(kind.m) > maxTenants) {
				continue
			}
			names := make([]string, 0, len(kind.m))
			for n := range kind.m {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				rows = append(rows, row{r.Policy, kind.label + " " + n})
				stats = append(stats, kind.m[n])
			}
		}
	}
	if len(rows) == 0 {
		return nil
	}
	heads := []string{"policy", "group", "requests", "refused", "shed", "SLO", "admitted SLO", "goodput rps"}
	cells := func(i int) []string {
		s := stats[i]
		return []string{rows[i].policy, rows[i].group, fmt.Sprint(s.Requests), fmt.Sprint(s.Refused), fmt.Sprint(s.Shed),
			pct(s.SLOAttainment), pct(s.AdmittedSLOAttainment), fmt.Sprintf("%.2f", s.GoodputRPS)}
	}
	if markdown {
		var b strings.Builder
		b.WriteString("\nBy model, tenant and priority class:\n\n| " + strings.Join(heads, " | ") + " |\n|---|---|" + strings.Repeat("---:|", len(heads)-2) + "\n")
		for i := range rows {
			b.WriteString("| " + strings.Join(cells(i), " | ") + " |\n")
		}
		_, err := io.WriteString(w, b.String())
		return err
	}
	fmt.Fprintln(w, "\nby model, tenant and priority class:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(heads, "\t")+"\t")
	for i := range rows {
		fmt.Fprintln(tw, strings.Join(cells(i), "\t")+"\t")
	}
	return tw.Flush()
}

// Markdown writes the results as a Markdown table with the ratios of
// SkyWalker against each policy, as the README shows them.
func Markdown(w io.Writer, rep *results.Report) error {
	var b strings.Builder
	columns := columnsFor(rep)
	fmt.Fprintf(&b, "Scenario `%s`, seed %d, prompt/output lengths from %s.\n\n", rep.Scenario, rep.Seed, rep.Lengths)
	b.WriteString("|")
	for _, c := range columns {
		b.WriteString(" " + c.head + " |")
	}
	b.WriteString("\n|")
	for i := range columns {
		if i == 0 {
			b.WriteString("---|")
		} else {
			b.WriteString("---:|")
		}
	}
	b.WriteString("\n")
	for _, r := range rep.Results {
		b.WriteString("|")
		for _, c := range columns {
			b.WriteString(" " + c.cell(r) + " |")
		}
		b.WriteString("\n")
	}
	if err := timeTable(&b, rep, true); err != nil {
		return err
	}
	if err := breakdowns(&b, rep, true, maxTableTenants); err != nil {
		return err
	}
	if sw := rep.Find("skywalker"); sw != nil && len(rep.Results) > 1 {
		b.WriteString("\nSkyWalker against each policy (× better; above 1 means SkyWalker wins). A policy that meets the SLO for\n" +
			"fewer than 99% of requests has no latency ratio: its queue, not its routing, sets its latency.\n\n")
		b.WriteString("| policy | TTFT p50 | TTFT p99 | goodput | (in+2out) throughput |\n|---|---:|---:|---:|---:|\n")
		for _, r := range rep.Results {
			if r == sw {
				continue
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", r.Policy, latencyRatio(r, sw, r.TTFTP50Ms, sw.TTFTP50Ms),
				latencyRatio(r, sw, r.TTFTP99Ms, sw.TTFTP99Ms), ratio(sw.GoodputRPS, r.GoodputRPS), ratio(sw.PaperThroughput, r.PaperThroughput))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// SLOTarget is the share of requests within the TTFT SLO below which a
// policy "misses the SLO".
const SLOTarget = 0.99

// latencyRatio is other's latency over skywalker's, unless either misses
// the SLO: a ratio of two collapsed queues says nothing about routing.
func latencyRatio(other, sw *results.Result, o, s results.Millis) string {
	switch {
	case other.SLOAttainment < SLOTarget:
		return fmt.Sprintf("misses SLO (%.1f%%)", 100*other.SLOAttainment)
	case sw.SLOAttainment < SLOTarget:
		return fmt.Sprintf("skywalker misses SLO (%.1f%%)", 100*sw.SLOAttainment)
	}
	return ratio(float64(o), float64(s))
}

func ratio(num, den float64) string {
	if den <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", num/den)
}

// JSON writes the report as indented JSON.
func JSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
