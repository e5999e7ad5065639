package plan

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/optimize/convex/lp"

	"skywalker/internal/price"
)

// CostPlan is the plan in money: per region, the replicas reserved (paid
// every hour of the term) and those rented on demand or on spot in the
// hours that need them, and what it costs a month against the other ways
// to buy the same service.
type CostPlan struct {
	Term    price.Term   `json:"term"`
	Regions []RegionCost `json:"regions"`
	// DefaultPriceSource is where a price whose source says default came
	// from (price.DefaultSource).
	DefaultPriceSource string `json:"default_price_source"`
	// Monthly is the plan's cost a month (price.HoursPerMonth), in dollars.
	Monthly float64 `json:"monthly_cost"`
	// Options are the plan and its alternatives, side by side, each with
	// its monthly cost and its saving against region-isolated reservation.
	Options []CostOption `json:"options"`
	// HeldBy names what keeps the plan's cost above the pooling bound's,
	// and what lifting each alone would cost.
	HeldBy []string `json:"held_by,omitempty"`
}

// RegionCost is one region's part of a cost plan.
type RegionCost struct {
	Name           string      `json:"region"`
	Profile        string      `json:"profile,omitempty"`
	GPU            string      `json:"gpu"`
	GPUsPerReplica int         `json:"gpus_per_replica"`
	Capacity       float64     `json:"capacity_per_replica"`
	CapacitySource string      `json:"capacity_source"`
	Price          price.Price `json:"price"`
	Reserved       int         `json:"reserved_replicas"`
	// OnDemand and Spot are the replicas rented in each hour of the day
	// (UTC); their sums are replica-hours a day.
	OnDemand [Hours]int `json:"on_demand_by_hour"`
	Spot     [Hours]int `json:"spot_by_hour"`
	Monthly  float64    `json:"monthly_cost"`
}

// CostOption is one way to buy the capacity.
type CostOption struct {
	Name    string  `json:"name"`
	Monthly float64 `json:"monthly_cost"`
	// Saving is 1 − Monthly ÷ the region-isolated reservation's.
	Saving float64 `json:"saving_vs_isolated"`
	How    string  `json:"how"`
}

// The options a cost plan compares.
const (
	OptionIsolated     = "region-isolated, reserved at every peak"
	OptionMeanOnDemand = "region-isolated, reserved for the mean + on demand"
	OptionPlan         = "planned: shared reservation + on demand"
	OptionBound        = "pooling bound"
)

// daysPerMonth turns a day's cost into a month's.
const daysPerMonth = price.HoursPerMonth / Hours

// priced reports whether every region that may hold replicas has a price.
func (in *Input) priced() bool {
	for _, r := range in.Regions {
		if !r.NoReplicas && r.Price.Reserved <= 0 && r.Price.OnDemand <= 0 {
			return false
		}
	}
	return true
}

// gpus is how many GPUs one replica of region j takes.
func (in *Input) gpus(j int) float64 { return float64(max(in.Regions[j].GPUs, 1)) }

// Hourly prices of one replica of region j.
func (in *Input) reservedRate(j int) float64 { return in.Regions[j].Price.Reserved * in.gpus(j) }
func (in *Input) onDemandRate(j int) float64 { return in.Regions[j].Price.OnDemand * in.gpus(j) }
func (in *Input) spotRate(j int) float64     { return in.Regions[j].Price.Spot * in.gpus(j) }

// rents says which kinds of hourly capacity region j may rent.
func (in *Input) rents(j int) (onDemand, spot bool) {
	r := in.Regions[j]
	if r.NoReplicas {
		return false, false
	}
	return r.Price.OnDemandAvailable && r.Price.OnDemand > 0, r.Price.Spot > 0
}

// PlanCost plans the cheapest fleet that serves every hour under the
// reach and residency rules: reserved replicas per region (paid all day)
// and on-demand or spot replicas per region and hour (paid by the hour;
// spot counts for 1 − its preemption), minimising money; whole replicas.
// It compares the plan with reserving each region's own peak, with each
// region reserving its mean and renting the rest, and with the pooling
// bound (every link in reach, no residency, fractional replicas: no plan
// costs less), and says which constraint holds the plan above the bound.
func PlanCost(in Input) (*CostPlan, error) {
	if err := in.validate(); err != nil {
		return nil, err
	}
	if !in.priced() {
		return nil, errors.New("plan: cost: a region that may hold replicas has no price")
	}
	day, err := costLP(in, nil, allHours())
	if err != nil {
		return nil, fmt.Errorf("plan: cost: %w", err)
	}
	reserved, rent, err := in.wholeReplicas(day.reserved)
	if err != nil {
		return nil, err
	}
	cp := &CostPlan{Term: in.Regions[0].Price.Term, DefaultPriceSource: price.DefaultSource}
	for j, r := range in.Regions {
		rc := RegionCost{Name: r.Name, Profile: r.Profile, GPU: r.GPU, GPUsPerReplica: int(in.gpus(j)), Capacity: in.capacity(j),
			CapacitySource: r.CapacitySource, Price: r.Price, Reserved: reserved[j]}
		daily := float64(reserved[j]) * in.reservedRate(j) * Hours
		for h := range Hours {
			rc.OnDemand[h], rc.Spot[h] = rent.onDemand[h][j], rent.spot[h][j]
			daily += float64(rc.OnDemand[h])*in.onDemandRate(j) + float64(rc.Spot[h])*in.spotRate(j)
		}
		rc.Monthly = daily * daysPerMonth
		cp.Monthly += rc.Monthly
		cp.Regions = append(cp.Regions, rc)
	}
	isolated, isoHow := in.isolatedCost()
	mean, meanHow := in.meanOnDemandCost()
	bound, err := costLP(in.relaxed(), nil, allHours())
	if err != nil {
		return nil, fmt.Errorf("plan: cost: pooling bound: %w", err)
	}
	for _, o := range []CostOption{
		{Name: OptionIsolated, Monthly: isolated, How: isoHow},
		{Name: OptionMeanOnDemand, Monthly: mean, How: meanHow},
		{Name: OptionPlan, Monthly: cp.Monthly, How: "shared across the links in reach, whole replicas"},
		{Name: OptionBound, Monthly: bound.daily * daysPerMonth, How: "every link in reach, no residency, fractional replicas: no plan costs less"},
	} {
		if isolated > 0 {
			o.Saving = 1 - o.Monthly/isolated
		}
		cp.Options = append(cp.Options, o)
	}
	if cp.HeldBy, err = in.costHeldBy(day.daily*daysPerMonth, bound.daily*daysPerMonth, cp.Monthly); err != nil {
		return nil, err
	}
	return cp, nil
}

// Option returns the named option.
func (cp *CostPlan) Option(name string) CostOption {
	for _, o := range cp.Options {
		if o.Name == name {
			return o
		}
	}
	return CostOption{Name: name}
}

// isolatedCost is every region reserving its own peak.
func (in *Input) isolatedCost() (float64, string) {
	total := 0.0
	var parts []string
	for j, r := range in.Regions {
		if r.NoReplicas {
			continue
		}
		n := replicasFor(in.peak(j), in.capacity(j))
		total += float64(n) * in.reservedRate(j) * price.HoursPerMonth
		parts = append(parts, fmt.Sprintf("%s %d", r.Name, n))
	}
	return total, "reserved " + strings.Join(parts, ", ")
}

// meanOnDemandCost is every region reserving its mean demand and renting
// on demand what each hour needs above it (its peak, where it cannot rent).
func (in *Input) meanOnDemandCost() (float64, string) {
	total := 0.0
	var parts []string
	for j, r := range in.Regions {
		if r.NoReplicas {
			continue
		}
		onDemand, _ := in.rents(j)
		mean := 0.0
		for _, d := range r.Demand {
			mean += d / Hours
		}
		reserved := replicasFor(mean, in.capacity(j))
		if !onDemand {
			reserved = replicasFor(in.peak(j), in.capacity(j))
		}
		daily := float64(reserved) * in.reservedRate(j) * Hours
		rented := 0
		for _, d := range r.Demand {
			n := max(0, replicasFor(d, in.capacity(j))-reserved)
			rented += n
			daily += float64(n) * in.onDemandRate(j)
		}
		total += daily * daysPerMonth
		parts = append(parts, fmt.Sprintf("%s %d + %d replica-hours a day", r.Name, reserved, rented))
	}
	return total, "reserved " + strings.Join(parts, ", ")
}

// costHeldBy says what keeps the plan (whole, a month) above the bound:
// each constraint lifted alone (residency; the links out of reach; each
// region that cannot rent on demand, given its GPU's default on-demand
// price), with what the plan would cost without it, then whole replicas
// (the plan's fractional optimum, fractional).
func (in *Input) costHeldBy(fractional, bound, whole float64) ([]string, error) {
	const noise = 0.005 // a cost within half a percent is the same cost
	var why []string
	// lift plans again, in whole replicas, with one constraint changed:
	// residency, say, costs little in fractions but a whole replica in
	// every region all day.
	lift := func(what string, change func(*Input)) error {
		r := *in
		r.Regions = slices.Clone(in.Regions)
		change(&r)
		sol, err := costLP(r, nil, allHours())
		if err != nil {
			return fmt.Errorf("plan: cost without %s: %w", what, err)
		}
		reserved, _, err := r.wholeReplicas(sol.reserved)
		if err != nil {
			return fmt.Errorf("plan: cost without %s: %w", what, err)
		}
		_, daily, _ := r.rentFor(reserved)
		if m := daily * daysPerMonth; m < whole*(1-noise) {
			why = append(why, fmt.Sprintf("%s: without it $%.0f a month (−$%.0f)", what, m, whole-m))
		}
		return nil
	}
	resident, outOfReach := false, false
	for i, reg := range in.Regions {
		resident = resident || reg.ResidencyShare > 0
		for j := range in.Regions {
			outOfReach = outOfReach || !reg.NoReplicas && !in.Regions[j].NoReplicas && !in.canShare(i, j, false)
		}
	}
	if whole > bound*(1+noise) && resident {
		if err := lift("residency", func(r *Input) {
			for i := range r.Regions {
				r.Regions[i].ResidencyShare = 0
			}
		}); err != nil {
			return nil, err
		}
	}
	if whole > bound*(1+noise) && outOfReach {
		if err := lift("reach (links out of reach)", func(r *Input) { r.Objective, r.MaxWANRTT = 0, math.MaxInt64 }); err != nil {
			return nil, err
		}
	}
	if whole > bound*(1+noise) {
		for j, reg := range in.Regions {
			if onDemand, _ := in.rents(j); onDemand || reg.NoReplicas {
				continue
			}
			def, err := (*price.Book)(nil).Resolve(reg.Name, reg.GPU)
			if err != nil || def.OnDemand <= 0 {
				continue
			}
			if err := lift(fmt.Sprintf("no on-demand in %s (at the default $%.2f/GPU-hour)", reg.Name, def.OnDemand), func(r *Input) {
				r.Regions[j].Price.OnDemand, r.Regions[j].Price.OnDemandAvailable = def.OnDemand, true
			}); err != nil {
				return nil, err
			}
		}
	}
	if whole > fractional*(1+noise) {
		why = append(why, fmt.Sprintf("whole replicas: the fractional optimum costs $%.0f a month", fractional))
	}
	return why, nil
}

func allHours() []int {
	hours := make([]int, Hours)
	for h := range hours {
		hours[h] = h
	}
	return hours
}

// costSolution is a cost LP's answer: its daily cost, the reserved
// replicas per region, and the hourly rentals by hour and region.
type costSolution struct {
	daily          float64
	reserved       []float64
	onDemand, spot map[int][]float64
	started        bool // the simplex began at costBasis's vertex (else it found one)
}

// flowTieBreak is what one request/s carried over one second of RTT
// costs in the cost LP, in dollars: small against any GPU-hour, so it only
// chooses among plans of equal price — the one that serves demand nearest
// where it arises (without it, equal prices let the LP pile a whole
// fleet's reservation into one region, which the simulator shows misses
// the SLO).
const flowTieBreak = 1e-6

// costLP is the cost linear program over the given hours, with the
// reserved replicas free (fixed nil) or fixed per region.
//
// Demand that one region alone may serve (residency, most often) is no
// flow at all but load on that region's capacity; the rest is one
// commodity per hour and origin (its classes merged when they may be
// served in the same regions).
//
// Variables: x_j, reserved replicas of region j (paid every hour of the
// day); for every hour h: y_hj on-demand and z_hj spot replicas where
// region j rents them; a flow f ≥ 0 for every hour, commodity and region
// j that may serve it; a capacity slack s_hj ≥ 0. Rows: each commodity's
// flows sum to its demand; for every (h, j),
// Σ flows into j + s_hj − cap_j·(x_j + y_hj + (1 − preemption)·z_hj) = −(demand only j may serve);
// x_j = 0 where the region holds no replicas, x_j = fixed_j when fixed.
// Objective: Σ 24·reserved_j·x_j + Σ on-demand_j·y_hj + spot_j·z_hj, and
// the tie-break on RTT-weighted flows.
func costLP(in Input, fixed []int, hours []int) (costSolution, error) {
	R := len(in.Regions)
	col := R // x_j first
	type rvar struct{ h, j, col int }
	var onDemandVars, spotVars []rvar
	for _, h := range hours {
		for j := range R {
			onDemand, spot := in.rents(j)
			if onDemand {
				onDemandVars = append(onDemandVars, rvar{h, j, col})
				col++
			}
			if spot {
				spotVars = append(spotVars, rvar{h, j, col})
				col++
			}
		}
	}
	// Where each region's demand of each class may be served.
	servers := make([][2][]int, R)
	for i := range R {
		for k := range 2 {
			for j := range R {
				if in.canShare(i, j, k == 1) {
					servers[i][k] = append(servers[i][k], j)
				}
			}
		}
	}
	type commodity struct {
		h, origin int
		servers   []int
		demand    float64
	}
	var goods []commodity
	only := map[[2]int]float64{} // (hour index, region): demand only it may serve
	for k, h := range hours {
		byKey := map[string]int{}
		for i := range R {
			for class := range 2 {
				d := in.servable(i, h, class == 1)
				set := servers[i][class]
				switch {
				case d <= 0 || len(set) == 0:
				case len(set) == 1:
					only[[2]int{k, set[0]}] += d
				default:
					key := fmt.Sprint(i, set)
					g, ok := byKey[key]
					if !ok {
						g = len(goods)
						byKey[key] = g
						goods = append(goods, commodity{h: k, origin: i, servers: set})
					}
					goods[g].demand += d
				}
			}
		}
	}
	type fvar struct{ good, j int }
	var fvars []fvar
	for g, good := range goods {
		for _, j := range good.servers {
			fvars = append(fvars, fvar{g, j})
		}
	}
	flowCol := col
	slackCol := flowCol + len(fvars)
	nvar := slackCol + len(hours)*R
	capRow := len(goods)
	rows := capRow + len(hours)*R
	var pinned []int // regions whose x_j is held: none, or fixed
	for j, r := range in.Regions {
		if fixed != nil || r.NoReplicas {
			pinned = append(pinned, j)
		}
	}
	pinRow := rows
	rows += len(pinned)
	A := mat.NewDense(rows, nvar, nil)
	b := make([]float64, rows)
	c := make([]float64, nvar)
	for g, good := range goods {
		b[g] = good.demand
	}
	for fi, f := range fvars {
		A.Set(f.good, flowCol+fi, 1)
		A.Set(capRow+goods[f.good].h*R+f.j, flowCol+fi, 1)
		if o := goods[f.good].origin; o != f.j {
			c[flowCol+fi] = flowTieBreak * in.rtt(o, f.j)
		}
	}
	for k := range hours {
		for j := range R {
			row := capRow + k*R + j
			A.Set(row, slackCol+k*R+j, 1)
			A.Set(row, j, -in.capacity(j))
			b[row] = -only[[2]int{k, j}]
		}
	}
	hourIndex := map[int]int{}
	for k, h := range hours {
		hourIndex[h] = k
	}
	for _, v := range onDemandVars {
		A.Set(capRow+hourIndex[v.h]*R+v.j, v.col, -in.capacity(v.j))
		c[v.col] = in.onDemandRate(v.j)
	}
	for _, v := range spotVars {
		A.Set(capRow+hourIndex[v.h]*R+v.j, v.col, -in.capacity(v.j)*(1-in.Regions[v.j].Price.SpotPreemption))
		c[v.col] = in.spotRate(v.j)
	}
	for j := range R {
		c[j] = in.reservedRate(j) * Hours
	}
	for k, j := range pinned {
		A.Set(pinRow+k, j, 1)
		if fixed != nil {
			b[pinRow+k] = float64(fixed[j])
		}
	}
	// A feasible starting vertex, so the simplex skips its phase 1 (half
	// its time): every demand served at home (or its first server), and
	// each region's hours covered by renting, else by its reservation.
	start := costBasis{rows: rows, capRow: capRow, pinRow: pinRow, slackCol: slackCol, R: R, nhours: len(hours)}
	start.load = make([]float64, len(hours)*R) // in replicas
	for k := range hours {
		for j := range R {
			start.load[k*R+j] = only[[2]int{k, j}] / in.capacity(j)
		}
	}
	start.flows = make([]int, len(goods))
	for fi, f := range fvars { // a good's flow home, else to its first server
		good := goods[f.good]
		if f.j == good.origin || start.flows[f.good] == 0 {
			start.flows[f.good] = flowCol + fi
		}
	}
	for g, good := range goods {
		j := fvars[start.flows[g]-flowCol].j
		start.load[good.h*R+j] += good.demand / in.capacity(j)
	}
	start.rent = make([]int, len(hours)*R)
	for i := range start.rent {
		start.rent[i] = -1
	}
	for _, v := range spotVars {
		if 1-in.Regions[v.j].Price.SpotPreemption > 0 {
			start.rent[hourIndex[v.h]*R+v.j] = v.col
		}
	}
	for _, v := range onDemandVars { // preferred to spot
		start.rent[hourIndex[v.h]*R+v.j] = v.col
	}
	start.pinned = make([]int, R)
	for j := range start.pinned {
		start.pinned[j] = -1
	}
	for k, j := range pinned {
		start.pinned[j] = k
	}
	start.fixed = fixed
	var basis []int
	if startAtBasis {
		basis = start.basis()
	}
	xs, started, err := simplexFrom(c, A, b, basis)
	if err != nil {
		return costSolution{}, err
	}
	sol := costSolution{reserved: xs[:R], onDemand: map[int][]float64{}, spot: map[int][]float64{}, started: started}
	for _, h := range hours {
		sol.onDemand[h], sol.spot[h] = make([]float64, R), make([]float64, R)
	}
	for _, v := range onDemandVars {
		sol.onDemand[v.h][v.j] = xs[v.col]
	}
	for _, v := range spotVars {
		sol.spot[v.h][v.j] = xs[v.col]
	}
	// The day's money.
	for j := range R {
		sol.daily += sol.reserved[j] * in.reservedRate(j) * Hours
	}
	for _, v := range onDemandVars {
		sol.daily += xs[v.col] * in.onDemandRate(v.j)
	}
	for _, v := range spotVars {
		sol.daily += xs[v.col] * in.spotRate(v.j)
	}
	return sol, nil
}

// rentals are whole replicas rented, by hour then region.
type rentals struct{ onDemand, spot [Hours][]int }

// maxRoundedRegions bounds the exhaustive rounding (2^n candidates).
const maxRoundedRegions = 8

// wholeReplicas rounds fractional reserved replicas to whole ones: every
// choice of floor or ceiling per region (up to maxRoundedRegions regions;
// beyond, the ceilings), each hour then renting the least it needs on
// top (its own LP, rounded up), the cheapest kept. The ceilings always
// serve every hour, so there is an answer.
func (in *Input) wholeReplicas(x []float64) ([]int, rentals, error) {
	R := len(x)
	var choices [][]int
	base := make([]int, R)
	var open []int
	for j, v := range x {
		base[j] = int(math.Floor(v + 1e-6))
		if v-float64(base[j]) > 1e-6 {
			open = append(open, j)
		}
	}
	if len(open) > maxRoundedRegions {
		c := slices.Clone(base)
		for _, j := range open {
			c[j]++
		}
		choices = [][]int{c}
	} else {
		for mask := range 1 << len(open) {
			c := slices.Clone(base)
			for k, j := range open {
				if mask&(1<<k) != 0 {
					c[j]++
				}
			}
			choices = append(choices, c)
		}
	}
	best, bestCost := []int(nil), math.Inf(1)
	var bestRent rentals
	for _, c := range choices {
		rent, daily, ok := in.rentFor(c)
		if ok && daily < bestCost-1e-9 {
			best, bestCost, bestRent = c, daily, rent
		}
	}
	if best == nil {
		return nil, rentals{}, errors.New("plan: cost: no whole reservation serves every hour (unexpected: the ceilings should)")
	}
	return best, bestRent, nil
}

// rentFor is what each hour rents on top of reserved whole replicas, and
// the day's cost; ok false when some hour cannot be served.
func (in *Input) rentFor(reserved []int) (rentals, float64, bool) {
	var rent rentals
	daily := 0.0
	for j, n := range reserved {
		daily += float64(n) * in.reservedRate(j) * Hours
	}
	for h := range Hours {
		sol, err := costLP(*in, reserved, []int{h})
		if err != nil {
			return rentals{}, 0, false
		}
		rent.onDemand[h], rent.spot[h] = make([]int, len(reserved)), make([]int, len(reserved))
		for j := range reserved {
			rent.onDemand[h][j] = int(math.Ceil(sol.onDemand[h][j] - 1e-6))
			rent.spot[h][j] = int(math.Ceil(sol.spot[h][j] - 1e-6))
			daily += float64(rent.onDemand[h][j])*in.onDemandRate(j) + float64(rent.spot[h][j])*in.spotRate(j)
		}
	}
	return rent, daily, true
}

// costBasis builds a feasible basis of costLP's program: each demand row's
// chosen flow (flows), and for each (hour, region) capacity row the
// variable that covers its load (load, in replicas): the hour's rental
// (rent, its column, or −1), else the slack under the region's pinned or
// all-day reservation.
type costBasis struct {
	rows, capRow, pinRow, slackCol, R, nhours int
	flows                                     []int
	load                                      []float64
	rent                                      []int
	pinned                                    []int // region → its pin row's index, or −1
	fixed                                     []int // the pinned reservations; nil: pinned to 0
}

// basis is the basis's columns, or nil when this construction has none
// (some hour's load has nothing to cover it): the simplex then finds one.
func (cb costBasis) basis() []int {
	basic := make([]int, 0, cb.rows)
	basic = append(basic, cb.flows...)
	var pins []int
	for j := range cb.R {
		if cb.pinned[j] >= 0 {
			pins = append(pins, j)
		}
	}
	for j := range cb.R {
		reserved := 0.0
		if cb.pinned[j] >= 0 && cb.fixed != nil {
			reserved = float64(cb.fixed[j])
		}
		peak := -1 // the hour an unpinned region's own reservation is basic in
		if cb.pinned[j] < 0 {
			for k := range cb.nhours {
				if cb.rent[k*cb.R+j] < 0 && (peak < 0 || cb.load[k*cb.R+j] > cb.load[peak*cb.R+j]) {
					peak = k
				}
			}
			if peak >= 0 {
				for k := range cb.nhours { // the reservation covers every hour without rentals
					if cb.rent[k*cb.R+j] < 0 {
						reserved = max(reserved, cb.load[k*cb.R+j])
					}
				}
			}
		}
		for k := range cb.nhours {
			i := k*cb.R + j
			switch {
			case k == peak:
				basic = append(basic, j) // x_j
			case cb.load[i] <= reserved+1e-12 && (cb.pinned[j] >= 0 || peak >= 0 || cb.rent[i] < 0):
				basic = append(basic, cb.slackCol+i)
			case cb.rent[i] >= 0:
				basic = append(basic, cb.rent[i])
			default:
				return nil
			}
		}
	}
	basic = append(basic, pins...)
	if len(basic) != cb.rows {
		return nil
	}
	return basic
}

// startAtBasis: costLP starts its simplex at costBasis's vertex (tests
// turn it off to compare with gonum's phase 1).
var startAtBasis = true

// simplexFrom solves min cᵀx, Ax = b, x ≥ 0 from the basis given, else
// (none, or one gonum finds singular or infeasible: it panics on those)
// from the vertex gonum's phase 1 finds; started says which.
func simplexFrom(c []float64, A *mat.Dense, b []float64, basis []int) (xs []float64, started bool, err error) {
	if basis != nil {
		func() {
			defer func() {
				if recover() != nil {
					xs, err = nil, errRetry
				}
			}()
			_, xs, err = lp.Simplex(c, A, b, 1e-10, basis)
		}()
		if err != errRetry {
			return xs, true, err
		}
	}
	_, xs, err = lp.Simplex(c, A, b, 1e-10, nil)
	return xs, false, err
}

var errRetry = errors.New("plan: retry without a starting basis")
