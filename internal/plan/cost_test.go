package plan

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"skywalker/internal/price"
	"skywalker/internal/sim"
)

// priceAt is a price of reserved and on-demand dollars per GPU-hour
// (onDemand 0: none rented).
func priceAt(reserved, onDemand float64) price.Price {
	return price.Price{Term: price.OneYear, Reserved: reserved, OnDemand: onDemand, OnDemandAvailable: onDemand > 0, Source: "test"}
}

// spike is one request/s all day but hour 12, which wants peak.
func spike(peak float64) [Hours]float64 {
	var d [Hours]float64
	for h := range d {
		d[h] = 1
	}
	d[12] = peak
	return d
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6*math.Max(1, math.Abs(b)) }

// One region with a one-hour spike, capacity 1, reserved $1 and on
// demand $2 a replica-hour: every option by hand.
func TestOneRegionBuysItsPeakByTheHour(t *testing.T) {
	in := Input{Regions: []Region{{Name: "solo", Demand: spike(5), Price: priceAt(1, 2)}}, Capacity: 1, MaxWANRTT: time.Second}
	cp, err := PlanCost(in)
	if err != nil {
		t.Fatal(err)
	}
	r := cp.Regions[0]
	if r.Reserved != 1 || r.OnDemand[12] != 4 || r.OnDemand[0] != 0 {
		t.Errorf("reserved %d, on demand at 12:00 %d, at 00:00 %d; want 1, 4, 0", r.Reserved, r.OnDemand[12], r.OnDemand[0])
	}
	days := price.HoursPerMonth / Hours
	for name, daily := range map[string]float64{
		OptionIsolated:     5 * 24,     // five reserved all day
		OptionMeanOnDemand: 2*24 + 3*2, // mean 28/24 → two reserved, three more at the spike
		OptionPlan:         24 + 4*2,   // one reserved, four rented for an hour
		OptionBound:        24 + 4*2,
	} {
		if got := cp.Option(name).Monthly; !near(got, daily*days) {
			t.Errorf("%s: $%.2f a month, want $%.2f", name, got, daily*days)
		}
	}
	if !near(cp.Monthly, cp.Option(OptionPlan).Monthly) || len(cp.HeldBy) != 0 {
		t.Errorf("plan $%.2f, held by %v: want the plan's option and nothing holding it", cp.Monthly, cp.HeldBy)
	}
}

// A region that cannot rent reserves its peak when alone, and serves its
// spike from a neighbour's on-demand when the link is in reach; out of
// reach, the plan names what holds it above the bound.
func TestARegionWithoutOnDemandBorrowsItsNeighboursHours(t *testing.T) {
	in := twoRegions(spike(5), spike(1))
	in.Regions[0].Price, in.Regions[1].Price = priceAt(1, 0), priceAt(1, 2)
	in.Regions[0].GPU = "L4" // what its on-demand would cost, lifted: the default's price
	cp, err := PlanCost(in)
	if err != nil {
		t.Fatal(err)
	}
	east, west := cp.Regions[0], cp.Regions[1]
	if east.Reserved+west.Reserved != 2 || west.OnDemand[12] != 4 || east.OnDemand[12] != 0 {
		t.Errorf("in reach: reserved east %d west %d, west rents %d at 12:00; want 2 reserved in all, 4 rented in west", east.Reserved, west.Reserved, west.OnDemand[12])
	}
	in.MaxWANRTT = 10 * time.Millisecond // the 80 ms link is out of reach
	cp, err = PlanCost(in)
	if err != nil {
		t.Fatal(err)
	}
	if cp.Regions[0].Reserved != 5 {
		t.Errorf("out of reach: east reserves %d, want its peak 5 (it cannot rent)", cp.Regions[0].Reserved)
	}
	held := strings.Join(cp.HeldBy, "; ")
	if !strings.Contains(held, "reach") || !strings.Contains(held, "no on-demand in east") {
		t.Errorf("held by %q: want reach and east's missing on-demand named", held)
	}
	if bound, plan := cp.Option(OptionBound).Monthly, cp.Monthly; bound >= plan {
		t.Errorf("bound $%.0f ≥ plan $%.0f out of reach", bound, plan)
	}
}

// Unequal hardware: a fast expensive region and a slow cheap one, in
// reach of each other: the plan buys whichever serves a request/s for
// less, and it is never above the isolated reservation nor below the bound.
func TestMixedHardwareBuysTheCheaperRequests(t *testing.T) {
	for _, c := range []struct {
		name               string
		fastCap, fastPrice float64
		wantFast           bool
	}{
		{"the fast region is cheaper per request/s", 3, 2, true},
		{"the fast region is dearer per request/s", 3, 4, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := twoRegions(raised(6, 0.3, 2), raised(6, 0.3, 14))
			in.Regions[0].Capacity, in.Regions[0].Price = c.fastCap, priceAt(c.fastPrice, 0)
			in.Regions[1].Capacity, in.Regions[1].Price = 1, priceAt(1, 0)
			cp, err := PlanCost(in)
			if err != nil {
				t.Fatal(err)
			}
			fastShare := float64(cp.Regions[0].Reserved) * c.fastCap / (float64(cp.Regions[0].Reserved)*c.fastCap + float64(cp.Regions[1].Reserved))
			if (fastShare > 0.5) != c.wantFast {
				t.Errorf("fast region carries %.0f%% of the capacity (%d + %d reserved), want it %v", 100*fastShare, cp.Regions[0].Reserved, cp.Regions[1].Reserved, c.wantFast)
			}
			iso, bound := cp.Option(OptionIsolated).Monthly, cp.Option(OptionBound).Monthly
			if cp.Monthly > iso+1e-6 || cp.Monthly < bound-1e-6 {
				t.Errorf("plan $%.0f outside [bound $%.0f, isolated $%.0f]", cp.Monthly, bound, iso)
			}
		})
	}
}

func TestPlanCostNeedsPrices(t *testing.T) {
	if _, err := PlanCost(twoRegions(spike(2), spike(2))); err == nil || !strings.Contains(err.Error(), "no price") {
		t.Errorf("unpriced input: err %v", err)
	}
}

// A rented replica runs only in the hours the plan rents it: down through
// every other hour of the workload's day, one fault per run of hours.
func TestReplayRentsOnlyInTheirHours(t *testing.T) {
	s, err := sim.Builtin("priced-fleet")
	if err != nil {
		t.Fatal(err)
	}
	cp := &CostPlan{}
	for _, r := range s.Regions {
		cp.Regions = append(cp.Regions, RegionCost{Name: r.Name, Reserved: 1})
	}
	cp.Regions[0].OnDemand[13], cp.Regions[0].OnDemand[14] = 2, 1 // two at 13:00 UTC, one at 14:00
	spec, err := Replay(s, cp)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Regions[0].Replicas != 3 || spec.Regions[1].Replicas != 1 || s.Regions[0].Replicas == 3 {
		t.Fatalf("replicas %d/%d (the scenario's %d): want 1 reserved + 2 rented in %s, the scenario untouched", spec.Regions[0].Replicas, spec.Regions[1].Replicas, s.Regions[0].Replicas, s.Regions[0].Name)
	}
	_, wl, err := s.Build("")
	if err != nil {
		t.Fatal(err)
	}
	slot := s.Workload.Day / Hours
	running := func(replica int, h int) bool { // is the replica up during UTC hour h?
		mid := time.Duration((h-int(wl.Diurnal.StartHour)+24)%24)*slot + slot/2
		for _, f := range spec.Faults {
			if f.Region == s.Regions[0].Name && f.Replica == replica && f.At <= mid && mid < f.At+f.Duration {
				return false
			}
		}
		return true
	}
	for h := range Hours {
		if want := h == 13 || h == 14; running(1, h) != want {
			t.Errorf("rented replica 1 at %02d:00 running %v, want %v", h, running(1, h), want)
		}
		if want := h == 13; running(2, h) != want {
			t.Errorf("rented replica 2 at %02d:00 running %v, want %v", h, running(2, h), want)
		}
		if !running(0, h) {
			t.Errorf("the reserved replica is down at %02d:00", h)
		}
	}
	if len(spec.Faults) > 4 {
		t.Errorf("%d faults: want at most two runs per rented replica", len(spec.Faults))
	}
	// A region the plan holds nothing in keeps its router, its one
	// replica down all day.
	cp.Regions[1].Reserved = 0
	if spec, err = Replay(s, cp); err != nil {
		t.Fatal(err)
	}
	if spec.Regions[1].Replicas != 1 || !running(0, 0) {
		t.Fatalf("a region without replicas in the plan: %d replicas", spec.Regions[1].Replicas)
	}
	down := false
	for _, f := range spec.Faults {
		down = down || f.Region == s.Regions[1].Name && f.At == 0 && f.Duration > s.Workload.Duration
	}
	if !down {
		t.Errorf("a region without replicas in the plan: its replica is not down all day: %+v", spec.Faults)
	}
}

// Three equal regions, peaks eight hours apart, one price: the plan's
// reservation follows the demand (serving it near where it arises), not
// one region holding the fleet — every placement of equal price costs the
// same, and the simulator shows the piled-up one missing the SLO.
func TestEqualPricesReserveNearTheDemand(t *testing.T) {
	in := Input{Capacity: 1, MaxWANRTT: time.Second, RTT: map[[2]string]time.Duration{}}
	for i, name := range []string{"a", "b", "c"} {
		in.Regions = append(in.Regions, Region{Name: name, Demand: raised(10, 0.3, 8*i), Price: priceAt(1, 1.6)})
	}
	in.RTT[[2]string{"a", "b"}], in.RTT[[2]string{"a", "c"}], in.RTT[[2]string{"b", "c"}] = 70*time.Millisecond, 150*time.Millisecond, 90*time.Millisecond
	cp, err := PlanCost(in)
	if err != nil {
		t.Fatal(err)
	}
	least, most := cp.Regions[0].Reserved, cp.Regions[0].Reserved
	for _, r := range cp.Regions {
		least, most = min(least, r.Reserved), max(most, r.Reserved)
	}
	if most-least > 2 {
		t.Errorf("reserved %d / %d / %d for three equal regions: want it spread with the demand", cp.Regions[0].Reserved, cp.Regions[1].Reserved, cp.Regions[2].Reserved)
	}
}

// The cost LP starts its simplex at a vertex it builds (demand served at
// home, hours covered by rentals or the reservation) instead of gonum's
// phase 1, and ends where phase 1 would have: the same day's cost, on
// programs that rent, that cannot rent in a region, out of reach, with a
// resident share, and with the reservation fixed (one hour's LP).
func TestTheCostLPStartsAtAFeasibleVertex(t *testing.T) {
	rents := twoRegions(spike(5), spike(1))
	rents.Regions[0].Price, rents.Regions[1].Price = priceAt(1, 2), priceAt(1, 2)
	noRent := rents
	noRent.Regions = slices.Clone(rents.Regions)
	noRent.Regions[0].Price = priceAt(1, 0)
	apart := noRent
	apart.MaxWANRTT = 10 * time.Millisecond
	resident := rents
	resident.Regions = slices.Clone(rents.Regions)
	resident.Regions[0].ResidencyShare, resident.Regions[1].ResidencyShare = 0.5, 0.5
	cases := []struct {
		name  string
		in    Input
		fixed []int
		hours []int
	}{
		{"both rent", rents, nil, allHours()},
		{"east cannot rent", noRent, nil, allHours()},
		{"east cannot rent, out of reach", apart, nil, allHours()},
		{"half the demand resident", resident, nil, allHours()},
		{"reservation fixed, the peak hour", noRent, []int{5, 1}, []int{12}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := costLP(tc.in, tc.fixed, tc.hours)
			if err != nil {
				t.Fatal(err)
			}
			startAtBasis = false
			want, err := costLP(tc.in, tc.fixed, tc.hours)
			startAtBasis = true
			if err != nil {
				t.Fatal(err)
			}
			if !got.started || want.started {
				t.Errorf("started at the built vertex: %v (with it), %v (without); want true, false", got.started, want.started)
			}
			if !near(got.daily, want.daily) {
				t.Errorf("day's cost from the built vertex $%.4f, from phase 1 $%.4f", got.daily, want.daily)
			}
		})
	}
}
