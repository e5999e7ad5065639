package plan

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"skywalker/internal/policy"
	"skywalker/internal/price"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/optimize/convex/lp"
)

// Hours is the planning horizon: one day in hourly steps.
const Hours = 24

// Region is one region's demand and where it may be served.
type Region struct {
	Name         string
	Jurisdiction string
	// ResidencyShare is the fraction of the region's demand that must be
	// served inside its own jurisdiction.
	ResidencyShare float64
	// Demand per hour of the day (UTC), in requests/s (or any unit the
	// capacity is given in).
	Demand [Hours]float64
	// NoReplicas: the model is not served here by design (a fleet that
	// serves a large model in some regions only). No replica is placed
	// here; the region's demand is served where it may be, and the part
	// no region may serve (residency) is Result.Unserved.
	NoReplicas bool
	// Hardware: the profile one replica runs, its GPU and how many a
	// replica takes ("" and 0: unknown, priced as one GPU of the default
	// profile), what one replica serves within the SLO (0: the input's
	// Capacity) and where that figure came from.
	Profile, GPU   string
	GPUs           int
	Capacity       float64
	CapacitySource string
	// Price is what one of its GPUs costs (zero: not priced; the plan is
	// then in replicas only).
	Price price.Price
}

// Input is a planning problem.
type Input struct {
	Regions []Region
	// RTT between regions by name; missing pairs are unreachable.
	RTT map[[2]string]time.Duration
	// MaxWANRTT caps reach: links slower than this cannot share capacity.
	MaxWANRTT time.Duration
	// Objective is the TTFT objective of the demand and TTFT the time to
	// first token of a typical request where it is served, without the
	// RTT. With an objective, a link shares capacity only under the
	// router's reach rule (policy.FitsObjective): RTT + TTFT, with the
	// policy's error margin, fits it. Zero: reach is MaxWANRTT alone.
	Objective, TTFT time.Duration
	// Capacity is what one replica serves within the SLO, in demand units,
	// in every region that gives none of its own (Region.Capacity).
	Capacity float64
}

// capacity is what one replica of region j serves within the SLO.
func (in *Input) capacity(j int) float64 {
	if c := in.Regions[j].Capacity; c > 0 {
		return c
	}
	return in.Capacity
}

// uniform reports whether every region's replicas serve alike: replicas
// are then one currency, and the aggregated ideal is the peak of the sum
// over one replica's capacity.
func (in *Input) uniform() bool {
	for j := range in.Regions {
		if in.capacity(j) != in.Capacity {
			return false
		}
	}
	return true
}

// Offload is demand one region sends another in one hour.
type Offload struct {
	Hour   int     `json:"hour"`
	From   string  `json:"from"`
	To     string  `json:"to"`
	Demand float64 `json:"demand"`
}

// Result is a plan.
type Result struct {
	Capacity float64 `json:"capacity_per_replica"`
	// CapacityByRegion is each region's, where they differ (a fleet of
	// mixed hardware).
	CapacityByRegion map[string]float64 `json:"capacity_by_region,omitempty"`
	// IsolatedReplicas: every region provisioned for its own peak.
	IsolatedReplicas int `json:"isolated_replicas"`
	// AggregatedReplicas: the peak of the summed demand, as if every region
	// could share with every other (the ideal).
	AggregatedReplicas int     `json:"aggregated_replicas"`
	Savings            float64 `json:"savings"` // 1 − aggregated/isolated
	// PlannedReplicas is the smallest reservation that serves every hour
	// under the link and residency constraints (at least the aggregated
	// count), placed as Placement.
	PlannedReplicas    int                `json:"planned_replicas"`
	PlannedSavings     float64            `json:"planned_savings"`
	Placement          map[string]int     `json:"placement"`
	FractionalPlace    map[string]float64 `json:"placement_fractional"`
	IsolatedByRegion   map[string]int     `json:"isolated_by_region"`
	PeakOfSum          float64            `json:"peak_of_sum"`
	SumOfPeaks         float64            `json:"sum_of_peaks"`
	Offloads           []Offload          `json:"offloads"`
	CrossRegionTraffic float64            `json:"cross_region_rtt_weighted"` // Σ demand·RTT(s) moved, per day
	// Reach says which links may share capacity, and OutOfReach names the
	// pairs that may not ("a/b"), the reason a plan saves less than the
	// aggregated ideal.
	Reach      string   `json:"reach"`
	OutOfReach []string `json:"links_out_of_reach,omitempty"`
	// HeldBy names what keeps PlannedReplicas above AggregatedReplicas
	// (residency, reach, or whole replicas), with what lifting each
	// would plan; empty when the plan pools fully.
	HeldBy []string `json:"held_by,omitempty"`
	// Unserved names the demand no region may serve: a region without
	// replicas (NoReplicas) whose resident demand has no region of its
	// jurisdiction, or whose every link is out of reach. The plan leaves
	// it out; every router misses it alike.
	Unserved []string `json:"unserved,omitempty"`
}

// reach describes the link rule in force.
func (in *Input) reach() string {
	if in.Objective <= 0 {
		return fmt.Sprintf("RTT ≤ %v", in.MaxWANRTT)
	}
	return fmt.Sprintf("RTT + typical TTFT %v (+%.0f%%) ≤ objective %v, RTT ≤ %v", in.TTFT.Round(time.Millisecond),
		100*policy.DefaultSkywalkerConfig().ErrorFraction, in.Objective.Round(time.Millisecond), in.MaxWANRTT)
}

func (in *Input) validate() error {
	if len(in.Regions) == 0 {
		return errors.New("plan: no regions")
	}
	if in.Capacity <= 0 {
		return errors.New("plan: capacity per replica must be positive")
	}
	for _, r := range in.Regions {
		if r.Capacity < 0 || math.IsNaN(r.Capacity) || math.IsInf(r.Capacity, 0) {
			return fmt.Errorf("plan: region %s: capacity per replica %v", r.Name, r.Capacity)
		}
	}
	seen := map[string]bool{}
	hosts := 0
	for _, r := range in.Regions {
		if !r.NoReplicas {
			hosts++
		}
		if r.Name == "" || seen[r.Name] {
			return fmt.Errorf("plan: region name %q empty or repeated", r.Name)
		}
		seen[r.Name] = true
		if r.ResidencyShare < 0 || r.ResidencyShare > 1 {
			return fmt.Errorf("plan: region %s: residency share must be in [0, 1]", r.Name)
		}
		for h, d := range r.Demand {
			if d < 0 || math.IsNaN(d) || math.IsInf(d, 0) {
				return fmt.Errorf("plan: region %s hour %d: demand %v", r.Name, h, d)
			}
		}
	}
	if hosts == 0 {
		return errors.New("plan: no region may hold replicas (every region NoReplicas)")
	}
	return nil
}

// servable is the part of region i's demand in hour h of one class
// (resident or free) that some region may serve: all of it, or none when
// no region may (Result.Unserved).
func (in *Input) servable(i, h int, resident bool) float64 {
	if !in.hasHome(i, resident) {
		return 0
	}
	r := in.Regions[i]
	if resident {
		return r.Demand[h] * r.ResidencyShare
	}
	return r.Demand[h] * (1 - r.ResidencyShare)
}

// hasHome reports whether some region may serve region i's demand of
// one class.
func (in *Input) hasHome(i int, resident bool) bool {
	for j := range in.Regions {
		if in.canShare(i, j, resident) {
			return true
		}
	}
	return false
}

// unserved describes the demand no region may serve.
func (in *Input) unserved() []string {
	var out []string
	for i, r := range in.Regions {
		for _, c := range []struct {
			resident bool
			share    float64
			what     string
		}{{false, 1 - r.ResidencyShare, "demand"}, {true, r.ResidencyShare, "resident demand"}} {
			if c.share > 0 && !in.hasHome(i, c.resident) && r.Demand != [Hours]float64{} {
				out = append(out, fmt.Sprintf("%s: its %s (%.0f%%) — no region that may serve it holds replicas", r.Name, c.what, 100*c.share))
			}
		}
	}
	return out
}

// canShare reports whether demand of region i may be served in region j,
// for the free (resident=false) or residency-bound part.
func (in *Input) canShare(i, j int, resident bool) bool {
	if in.Regions[j].NoReplicas {
		return false
	}
	if i == j {
		return true
	}
	a, b := in.Regions[i], in.Regions[j]
	if resident && a.Jurisdiction != b.Jurisdiction {
		return false
	}
	rtt, ok := in.RTT[[2]string{a.Name, b.Name}]
	if !ok {
		rtt, ok = in.RTT[[2]string{b.Name, a.Name}]
	}
	return ok && rtt <= in.MaxWANRTT && (in.Objective <= 0 || policy.FitsObjective(rtt+in.TTFT, in.Objective, policy.DefaultSkywalkerConfig().ErrorFraction))
}

func (in *Input) rtt(i, j int) float64 {
	a, b := in.Regions[i].Name, in.Regions[j].Name
	if d, ok := in.RTT[[2]string{a, b}]; ok {
		return d.Seconds()
	}
	return in.RTT[[2]string{b, a}].Seconds()
}

// Solve plans the reservation.
func Solve(in Input) (*Result, error) {
	if err := in.validate(); err != nil {
		return nil, err
	}
	res := &Result{Capacity: in.Capacity, Placement: map[string]int{}, FractionalPlace: map[string]float64{}, IsolatedByRegion: map[string]int{},
		Reach: in.reach(), Unserved: in.unserved()}
	for i := range in.Regions {
		for j := i + 1; j < len(in.Regions); j++ {
			if !in.Regions[i].NoReplicas && !in.Regions[j].NoReplicas && !in.canShare(i, j, false) {
				res.OutOfReach = append(res.OutOfReach, in.Regions[i].Name+"/"+in.Regions[j].Name)
			}
		}
	}
	if !in.uniform() {
		res.CapacityByRegion = map[string]float64{}
		for j, r := range in.Regions {
			res.CapacityByRegion[r.Name] = in.capacity(j)
		}
	}
	for h := range Hours {
		sum := 0.0
		for i := range in.Regions {
			sum += in.servable(i, h, false) + in.servable(i, h, true)
		}
		res.PeakOfSum = math.Max(res.PeakOfSum, sum)
	}
	for i, r := range in.Regions {
		if r.NoReplicas {
			res.IsolatedByRegion[r.Name] = 0 // region-isolated, it serves none of its demand
			continue
		}
		peak := in.peak(i)
		res.SumOfPeaks += peak
		n := replicasFor(peak, in.capacity(i))
		res.IsolatedByRegion[r.Name] = n
		res.IsolatedReplicas += n
	}
	res.AggregatedReplicas = replicasFor(res.PeakOfSum, in.Capacity)
	if !in.uniform() {
		// Replicas of unequal speed: the fewest that carry every hour with
		// every link in reach and no residency, wherever they are fastest.
		relaxed := in.relaxed()
		least, err := leastReplicas(relaxed)
		if err != nil {
			return nil, fmt.Errorf("plan: aggregated ideal: %w", err)
		}
		res.AggregatedReplicas = replicasFor(least, 1)
	}
	if res.IsolatedReplicas > 0 {
		res.Savings = 1 - float64(res.AggregatedReplicas)/float64(res.IsolatedReplicas)
	}

	placement, x, err := in.place(res.AggregatedReplicas)
	if err != nil {
		return nil, err
	}
	total := 0
	for _, n := range placement {
		total += n
	}
	if total > res.AggregatedReplicas {
		if res.HeldBy, err = in.heldBy(total); err != nil {
			return nil, err
		}
	}
	// The flows the whole-replica placement implies.
	_, _, flows, err := solveLP(in, float64(total), placement)
	if err != nil {
		return nil, fmt.Errorf("plan: flows: %w", err)
	}
	res.PlannedReplicas = total
	if res.IsolatedReplicas > 0 {
		res.PlannedSavings = 1 - float64(total)/float64(res.IsolatedReplicas)
	}
	for i, r := range in.Regions {
		res.Placement[r.Name] = placement[i]
		res.FractionalPlace[r.Name] = math.Round(x[i]*1000) / 1000
	}
	for _, f := range flows {
		if f.from != f.to && f.amount > 1e-6 {
			res.Offloads = append(res.Offloads, Offload{Hour: f.hour, From: in.Regions[f.from].Name, To: in.Regions[f.to].Name,
				Demand: math.Round(f.amount*1000) / 1000})
			res.CrossRegionTraffic += f.amount * in.rtt(f.from, f.to) * 3600
		}
	}
	sort.Slice(res.Offloads, func(a, b int) bool {
		oa, ob := res.Offloads[a], res.Offloads[b]
		if oa.Hour != ob.Hour {
			return oa.Hour < ob.Hour
		}
		if oa.From != ob.From {
			return oa.From < ob.From
		}
		return oa.To < ob.To
	})
	res.CrossRegionTraffic = math.Round(res.CrossRegionTraffic*1000) / 1000
	return res, nil
}

// leastReplicas is the least total reservation, in fractional replicas,
// that serves every hour under the link and residency rules: the cost LP
// (its demand grouped by where it may be served) with every replica at
// one unit a day and nothing rented.
func leastReplicas(in Input) (float64, error) {
	in.Regions = slices.Clone(in.Regions)
	for j := range in.Regions {
		in.Regions[j].Price = price.Price{Reserved: 1.0 / Hours}
		in.Regions[j].GPUs = 1
	}
	sol, err := costLP(in, nil, allHours())
	return sol.daily, err
}

// place plans whole replicas, at least floor of them: stage 1 finds the
// least total reservation that serves every hour; stage 2, at that total,
// the placement with the least RTT-weighted cross-region traffic (x,
// fractional), rounded to whole replicas that still serve every hour,
// adding replicas where they are missing.
func (in *Input) place(floor int) (placement []int, x []float64, err error) {
	minTotal, err := leastReplicas(*in)
	if err != nil {
		return nil, nil, fmt.Errorf("plan: minimum reservation: %w", err)
	}
	total := max(replicasFor(minTotal, 1), floor)
	if _, x, _, err = solveLP(*in, float64(total), nil); err != nil {
		return nil, nil, fmt.Errorf("plan: placement: %w", err)
	}
	placement = roundPlacement(x, total)
	// Each region's ceiling: its own peak, and the peaks of the regions
	// without replicas (all their demand served here), a placement that
	// serves every hour.
	homeless := 0.0
	for i, r := range in.Regions {
		if r.NoReplicas {
			homeless += in.peak(i)
		}
	}
	isolated := make([]int, len(in.Regions))
	for i, r := range in.Regions {
		if !r.NoReplicas {
			isolated[i] = replicasFor(in.peak(i)+homeless, in.capacity(i))
		}
	}
	for !feasible(*in, placement) {
		placement[nextReplica(*in, x, placement, isolated)]++
	}
	return placement, x, nil
}

// heldBy says what keeps a plan of total replicas above the aggregated
// ideal: each constraint that, lifted alone, lets the plan take fewer —
// the residency-bound demand (served only in its own jurisdiction), and
// the links out of reach — else whole replicas (the fractional optimum
// pools, but no rounding of it to whole replicas per region serves every
// hour with fewer).
func (in *Input) heldBy(total int) ([]string, error) {
	var why []string
	relaxed := func(change func(*Input)) (int, error) {
		r := *in
		r.Regions = slices.Clone(in.Regions)
		change(&r)
		placement, _, err := r.place(0)
		n := 0
		for _, k := range placement {
			n += k
		}
		return n, err
	}
	var resident []string
	for i, r := range in.Regions {
		if r.ResidencyShare > 0 && in.hasHome(i, true) {
			resident = append(resident, fmt.Sprintf("%s %.0f%%", r.Name, 100*r.ResidencyShare))
		}
	}
	if len(resident) > 0 {
		n, err := relaxed(func(r *Input) {
			for i := range r.Regions {
				r.Regions[i].ResidencyShare = 0
			}
		})
		if err != nil {
			return nil, err
		}
		if n < total {
			why = append(why, fmt.Sprintf("residency: demand only its own jurisdiction may serve (%s) needs replicas there; without it %d", strings.Join(resident, ", "), n))
		}
	}
	out := 0
	for i := range in.Regions {
		for j := i + 1; j < len(in.Regions); j++ {
			if !in.canShare(i, j, false) {
				out++
			}
		}
	}
	if out > 0 {
		n, err := relaxed(func(r *Input) { r.Objective, r.MaxWANRTT = 0, math.MaxInt64 })
		if err != nil {
			return nil, err
		}
		if n < total {
			why = append(why, fmt.Sprintf("reach: %d links out of reach; with every link in reach %d", out, n))
		}
	}
	if len(why) == 0 {
		why = append(why, "whole replicas: the fractional optimum pools, but no whole number per region serves every hour with fewer")
	}
	return why, nil
}

// relaxed is the input with every link in reach and no residency: the
// pooling bound's problem.
func (in *Input) relaxed() Input {
	r := *in
	r.Regions = slices.Clone(in.Regions)
	for i := range r.Regions {
		r.Regions[i].ResidencyShare = 0
	}
	r.Objective, r.MaxWANRTT = 0, math.MaxInt64
	return r
}

// peak is region i's highest hourly demand.
func (in *Input) peak(i int) float64 {
	peak := 0.0
	for _, d := range in.Regions[i].Demand {
		peak = math.Max(peak, d)
	}
	return peak
}

// replicasFor is the whole replicas that carry demand (with a tolerance
// for floating-point noise just above an integer).
func replicasFor(demand, capacity float64) int {
	return int(math.Ceil(demand/capacity - 1e-9))
}

type flow struct {
	hour, from, to int
	amount         float64
}

// solveLP builds and solves the placement LP. With total < 0 it minimizes
// the total reservation (in replicas, fractional); otherwise it fixes the
// total — or, when fixed is not nil, every region's replicas — and
// minimizes RTT-weighted cross-region demand. It returns the objective,
// the per-region replicas and the flows.
//
// Variables: x_j (replicas in region j); for every hour h, every region i,
// both demand classes (free, resident) and every region j it may be served
// in, a flow f ≥ 0; and a capacity slack s_hj ≥ 0. Constraints: each
// class's flows out of (h, i) sum to its demand; for every (h, j),
// Σ flows into j + s_hj − capacity·x_j = 0; with a fixed total, Σ x_j = total;
// with fixed replicas, x_j = fixed_j.
func solveLP(in Input, total float64, fixed []int) (float64, []float64, []flow, error) {
	R := len(in.Regions)
	// A class one region alone may serve (residency, most often) needs no
	// flow: it is load on that region's capacity, and no offload.
	sole := make([][2]int, R)
	for i := range R {
		for k := range 2 {
			sole[i][k] = -1
			n := 0
			for j := range R {
				if in.canShare(i, j, k == 1) {
					n++
					sole[i][k] = j
				}
			}
			if n != 1 {
				sole[i][k] = -1
			}
		}
	}
	type fvar struct {
		h, i, j  int
		resident bool
	}
	var fvars []fvar
	for h := range Hours {
		for i := range R {
			for k, resident := range []bool{false, true} {
				if sole[i][k] >= 0 {
					continue
				}
				for j := range R {
					if in.canShare(i, j, resident) {
						fvars = append(fvars, fvar{h, i, j, resident})
					}
				}
			}
		}
	}
	nx, nf, ns := R, len(fvars), Hours*R
	nvar := nx + nf + ns
	// Demand rows, one per (h, i, class) more than one region may serve
	// (a class none may is Result.Unserved, and has no flows: no row).
	demandRow := map[[3]int]int{}
	for h := range Hours {
		for i := range in.Regions {
			for k := range 2 {
				if in.hasHome(i, k == 1) && sole[i][k] < 0 {
					demandRow[[3]int{h, i, k}] = len(demandRow)
				}
			}
		}
	}
	rows := len(demandRow) + Hours*R
	// Regions without replicas hold none: x_j = 0 (a fixed placement
	// says so itself).
	var none []int
	if fixed == nil {
		for j, r := range in.Regions {
			if r.NoReplicas {
				none = append(none, j)
			}
		}
	}
	noneRow := rows
	rows += len(none)
	switch {
	case fixed != nil:
		rows += R
	case total >= 0:
		rows++
	}
	A := mat.NewDense(rows, nvar, nil)
	for k, j := range none {
		A.Set(noneRow+k, j, 1)
	}
	b := make([]float64, rows)
	c := make([]float64, nvar)
	for key, row := range demandRow {
		b[row] = in.servable(key[1], key[0], key[2] == 1)
	}
	capRow := len(demandRow)
	for fi, f := range fvars {
		col := nx + fi
		k := 0
		if f.resident {
			k = 1
		}
		A.Set(demandRow[[3]int{f.h, f.i, k}], col, 1)
		A.Set(capRow+f.h*R+f.j, col, 1)
		if total >= 0 && f.i != f.j {
			c[col] = in.rtt(f.i, f.j)
		}
	}
	for h := range Hours {
		for j := range R {
			A.Set(capRow+h*R+j, nx+nf+h*R+j, 1)
			A.Set(capRow+h*R+j, j, -in.capacity(j))
		}
		for i := range R {
			for k := range 2 {
				if j := sole[i][k]; j >= 0 {
					b[capRow+h*R+j] -= in.servable(i, h, k == 1)
				}
			}
		}
	}
	switch {
	case fixed != nil:
		for j := range R {
			A.Set(rows-R+j, j, 1)
			b[rows-R+j] = float64(fixed[j])
		}
	case total >= 0:
		for j := range R {
			A.Set(rows-1, j, 1)
		}
		b[rows-1] = total
	default:
		for j := range R {
			c[j] = 1
		}
	}
	opt, xs, err := lp.Simplex(c, A, b, 1e-10, nil)
	if err != nil {
		return 0, nil, nil, err
	}
	var flows []flow
	agg := map[[3]int]float64{}
	for fi, f := range fvars {
		agg[[3]int{f.h, f.i, f.j}] += xs[nx+fi]
	}
	for k, v := range agg {
		flows = append(flows, flow{hour: k[0], from: k[1], to: k[2], amount: v})
	}
	return opt, xs[:nx], flows, nil
}

// roundPlacement turns fractional replicas into whole ones summing to
// total, by largest remainder.
func roundPlacement(x []float64, total int) []int {
	out := make([]int, len(x))
	sum := 0
	type rem struct {
		i int
		r float64
	}
	var rems []rem
	for i, v := range x {
		out[i] = int(math.Floor(v + 1e-9))
		sum += out[i]
		if v > 0 { // a region held at zero (NoReplicas) stays there
			rems = append(rems, rem{i, v - float64(out[i])})
		}
	}
	sort.SliceStable(rems, func(a, b int) bool { return rems[a].r > rems[b].r })
	for k := 0; sum < total && len(rems) > 0; k++ {
		out[rems[k%len(rems)].i]++
		sum++
	}
	return out
}

// nextReplica is the region a placement that misses some hour should grow
// in: one where a single replica more makes it feasible, else the one
// furthest below its fractional share, else the one furthest below its
// isolated peak. Isolated peaks are always feasible, so growing one region
// at a time ends.
func nextReplica(in Input, x []float64, placement, isolated []int) int {
	best, bestGap := -1, math.Inf(-1)
	for j := range placement {
		if in.Regions[j].NoReplicas {
			continue
		}
		placement[j]++
		ok := feasible(in, placement)
		placement[j]--
		if gap := x[j] - float64(placement[j]); ok && gap > bestGap {
			best, bestGap = j, gap
		}
	}
	if best >= 0 {
		return best
	}
	for j := range placement {
		if gap := x[j] - float64(placement[j]); gap > 0 && gap > bestGap {
			best, bestGap = j, gap
		}
	}
	if best >= 0 {
		return best
	}
	for j := range placement {
		if gap := float64(isolated[j] - placement[j]); gap > 0 && gap > bestGap {
			best, bestGap = j, gap
		}
	}
	if best < 0 {
		best = 0 // unreachable: a placement at every isolated peak is feasible
	}
	return best
}

// feasible checks that a whole-replica placement serves every hour: the
// LP with x fixed has a solution.
func feasible(in Input, placement []int) bool {
	for h := range Hours {
		if !hourFeasible(in, h, placement) {
			return false
		}
	}
	return true
}

// hourFeasible solves one hour's flow problem with capacities fixed.
func hourFeasible(in Input, h int, placement []int) bool {
	R := len(in.Regions)
	type fvar struct {
		i, j     int
		resident bool
	}
	var fvars []fvar
	for i := range R {
		for _, resident := range []bool{false, true} {
			for j := range R {
				if in.canShare(i, j, resident) {
					fvars = append(fvars, fvar{i, j, resident})
				}
			}
		}
	}
	nvar := len(fvars) + R
	demandRow := map[[2]int]int{} // (i, class) some region may serve
	for i := range R {
		for k := range 2 {
			if in.hasHome(i, k == 1) {
				demandRow[[2]int{i, k}] = len(demandRow)
			}
		}
	}
	capRow := len(demandRow)
	rows := capRow + R
	A := mat.NewDense(rows, nvar, nil)
	b := make([]float64, rows)
	for key, row := range demandRow {
		b[row] = in.servable(key[0], h, key[1] == 1)
	}
	for fi, f := range fvars {
		k := 0
		if f.resident {
			k = 1
		}
		A.Set(demandRow[[2]int{f.i, k}], fi, 1)
		A.Set(capRow+f.j, fi, 1)
	}
	for j := range R {
		A.Set(capRow+j, len(fvars)+j, 1)
		b[capRow+j] = float64(placement[j]) * in.capacity(j)
	}
	c := make([]float64, nvar)
	_, _, err := lp.Simplex(c, A, b, 1e-10, nil)
	return err == nil
}
