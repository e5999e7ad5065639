package plan

import (
	"math"
	"strings"
	"testing"
	"time"
)

// raised is the raised-cosine demand peaking at peakHour with the given
// valley ratio, scaled to peak.
func raised(peak, valley float64, peakHour int) [Hours]float64 {
	var d [Hours]float64
	for h := range Hours {
		d[h] = peak * (valley + (1-valley)*(1+math.Cos(2*math.Pi*float64(h-peakHour)/24))/2)
	}
	return d
}

func twoRegions(a, b [Hours]float64) Input {
	return Input{
		Regions:   []Region{{Name: "east", Jurisdiction: "x", Demand: a}, {Name: "west", Jurisdiction: "x", Demand: b}},
		RTT:       map[[2]string]time.Duration{{"east", "west"}: 80 * time.Millisecond},
		MaxWANRTT: 120 * time.Millisecond, Capacity: 1,
	}
}

func TestInPhaseCurvesSaveNothing(t *testing.T) {
	d := raised(10, 0.3, 14)
	res, err := Solve(twoRegions(d, d))
	if err != nil {
		t.Fatal(err)
	}
	if res.IsolatedReplicas != 20 || res.AggregatedReplicas != 20 || res.Savings != 0 || res.PlannedReplicas != 20 {
		t.Errorf("in-phase: %+v, want 20/20, no savings", res)
	}
	if len(res.Offloads) != 0 {
		t.Errorf("in-phase regions have nothing to offload: %v", res.Offloads)
	}
}

func TestTwelveHoursApartSaveTheClosedForm(t *testing.T) {
	// Two raised cosines 12 h apart sum to a constant peak·(1+v): the
	// savings are (1−v)/2, 35% at v = 0.3.
	const peak, valley = 100, 0.3
	res, err := Solve(twoRegions(raised(peak, valley, 2), raised(peak, valley, 14)))
	if err != nil {
		t.Fatal(err)
	}
	wantAgg := int(math.Ceil(2 * peak * (1 + valley) / 2))
	if res.IsolatedReplicas != 200 || res.AggregatedReplicas != wantAgg {
		t.Errorf("isolated %d aggregated %d, want 200 and %d", res.IsolatedReplicas, res.AggregatedReplicas, wantAgg)
	}
	if want := (1 - valley) / 2; math.Abs(res.Savings-want) > 0.005 {
		t.Errorf("savings %.4f, want the closed form %.4f", res.Savings, want)
	}
	if res.PlannedReplicas != wantAgg {
		t.Errorf("planned %d, want the aggregated %d: the link is under the threshold", res.PlannedReplicas, wantAgg)
	}
	if res.Placement["east"]+res.Placement["west"] != wantAgg || len(res.Offloads) == 0 {
		t.Errorf("placement %v offloads %d", res.Placement, len(res.Offloads))
	}
}

func TestALinkOverTheThresholdCannotShare(t *testing.T) {
	in := twoRegions(raised(100, 0.3, 2), raised(100, 0.3, 14))
	in.RTT[[2]string{"east", "west"}] = 200 * time.Millisecond
	res, err := Solve(in)
	if err != nil {
		t.Fatal(err)
	}
	if res.PlannedReplicas != 200 || len(res.Offloads) != 0 || res.Placement["east"] != 100 {
		t.Errorf("slow link: planned %d placement %v offloads %d; want each region alone", res.PlannedReplicas, res.Placement, len(res.Offloads))
	}
	if res.AggregatedReplicas != 130 {
		t.Errorf("the ideal is still reported: %d", res.AggregatedReplicas)
	}
}

// TestReachFollowsTheObjective: with a TTFT objective, a link shares
// capacity when RTT + a typical TTFT fits it (the router's reach rule), so
// a 250 ms link pools under a 2 s objective and does not under a 400 ms
// one; the WAN cap still bounds it; RTTs of zero pool everything.
func TestReachFollowsTheObjective(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		rtt, cap, obj, ttft  time.Duration
		wantPlanned, wantOff int // offloads: 0 none, 1 some
	}{
		{"250 ms link, 2 s objective", 250 * time.Millisecond, time.Second, 2 * time.Second, 300 * time.Millisecond, 130, 1},
		{"250 ms link, 400 ms objective", 250 * time.Millisecond, time.Second, 400 * time.Millisecond, 300 * time.Millisecond, 200, 0},
		{"250 ms link over a 200 ms cap", 250 * time.Millisecond, 200 * time.Millisecond, 2 * time.Second, 300 * time.Millisecond, 200, 0},
		{"zero RTT", 0, time.Second, 2 * time.Second, 300 * time.Millisecond, 130, 1},
		{"zero RTT, no objective", 0, time.Second, 0, 0, 130, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := twoRegions(raised(100, 0.3, 2), raised(100, 0.3, 14))
			in.RTT[[2]string{"east", "west"}] = tc.rtt
			in.MaxWANRTT, in.Objective, in.TTFT = tc.cap, tc.obj, tc.ttft
			res, err := Solve(in)
			if err != nil {
				t.Fatal(err)
			}
			if res.PlannedReplicas != tc.wantPlanned || (len(res.Offloads) > 0) != (tc.wantOff > 0) {
				t.Errorf("planned %d with %d offloads; want %d, offloads %v", res.PlannedReplicas, len(res.Offloads), tc.wantPlanned, tc.wantOff > 0)
			}
			if out := len(res.OutOfReach) > 0; out != (tc.wantOff == 0) {
				t.Errorf("links out of reach %v (reach %s) with %d offloads", res.OutOfReach, res.Reach, len(res.Offloads))
			}
			if tc.rtt == 0 && res.CrossRegionTraffic != 0 {
				t.Errorf("zero RTT weighs %v of cross-region traffic", res.CrossRegionTraffic)
			}
		})
	}
}

func TestAResidencyGroupCannotShare(t *testing.T) {
	in := twoRegions(raised(100, 0.3, 2), raised(100, 0.3, 14))
	in.Regions[0].Jurisdiction, in.Regions[1].Jurisdiction = "eu", "us"
	in.Regions[0].ResidencyShare, in.Regions[1].ResidencyShare = 1, 1
	res, err := Solve(in)
	if err != nil {
		t.Fatal(err)
	}
	if res.PlannedReplicas != 200 || len(res.Offloads) != 0 {
		t.Errorf("fully resident demand: planned %d, offloads %v", res.PlannedReplicas, res.Offloads)
	}
	// 80% resident: each region must hold 80 replicas for its own peak's
	// resident part; only the free 20% may move.
	in.Regions[0].ResidencyShare, in.Regions[1].ResidencyShare = 0.8, 0.8
	res, _ = Solve(in)
	if res.PlannedReplicas != 160 {
		t.Errorf("80%% resident: planned %d, want 160", res.PlannedReplicas)
	}
	for _, o := range res.Offloads {
		if o.Demand > 0.2*100+1e-6 {
			t.Errorf("offload %+v moves more than the free 20%%", o)
		}
	}
}

func TestThreeRegionDiurnalSavings(t *testing.T) {
	in := Input{MaxWANRTT: 200 * time.Millisecond, Capacity: 4.5, RTT: map[[2]string]time.Duration{
		{"us-east", "eu-west"}: 72 * time.Millisecond, {"us-east", "ap-east"}: 160 * time.Millisecond, {"eu-west", "ap-east"}: 180 * time.Millisecond}}
	for _, r := range []struct {
		name   string
		offset int
	}{{"us-east", -5}, {"eu-west", 0}, {"ap-east", 9}} {
		in.Regions = append(in.Regions, Region{Name: r.name, Demand: raised(25, 0.3, (14-r.offset+24)%24)})
	}
	res, err := Solve(in)
	if err != nil {
		t.Fatal(err)
	}
	ideal := 1 - res.PeakOfSum/res.SumOfPeaks
	t.Logf("isolated %d, aggregated %d (%.1f%%), planned %d %v; peak of sum / sum of peaks saves %.1f%%",
		res.IsolatedReplicas, res.AggregatedReplicas, 100*res.Savings, res.PlannedReplicas, res.Placement, 100*ideal)
	if math.Abs(ideal-0.279) > 0.01 {
		t.Errorf("ideal savings %.3f, want about 0.28", ideal)
	}
	if res.PlannedReplicas != res.AggregatedReplicas {
		t.Errorf("every link is under 200 ms: planned %d should equal aggregated %d", res.PlannedReplicas, res.AggregatedReplicas)
	}
}

// TestFractionalNeedsAreRoundedUpWhereTheyAre: when the cheapest
// fractional placement needs 0.6 of a replica in each of several regions
// that cannot share, rounding must not starve one of them (it used to add
// replicas to the wrong region forever).
func TestFractionalNeedsAreRoundedUpWhereTheyAre(t *testing.T) {
	in := twoRegions(raised(1.2, 0.3, 2), raised(1.2, 0.3, 14))
	in.Capacity = 2
	in.Regions = append(in.Regions, Region{Name: "far", Jurisdiction: "x", Demand: raised(1.2, 0.3, 8)})
	in.RTT[[2]string{"east", "far"}] = 300 * time.Millisecond
	in.RTT[[2]string{"west", "far"}] = 300 * time.Millisecond
	for i, j := range []string{"us", "eu", "ap"} {
		in.Regions[i].Jurisdiction = j
		in.Regions[i].ResidencyShare = 0.05 // a little demand each region must keep
	}
	res, err := Solve(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"east", "west", "far"} {
		if res.Placement[name] < 1 {
			t.Errorf("placement %v: %s has resident demand and no replica", res.Placement, name)
		}
	}
	if res.PlannedReplicas != 3 {
		t.Errorf("planned %d replicas (%v), want 3: one per region covers every hour at 1.2 rps and capacity 2", res.PlannedReplicas, res.Placement)
	}
}

// TestAPlanSaysWhatKeptItFromPooling: two regions 12 h apart pool to the
// aggregated ideal; when residency, or a link out of reach, keeps the plan
// above it, the plan names that constraint and what lifting it would
// plan; a plan that pools fully names nothing.
func TestAPlanSaysWhatKeptItFromPooling(t *testing.T) {
	apart := func() Input { return twoRegions(raised(1.5, 0.1, 2), raised(1.5, 0.1, 14)) }
	tests := []struct {
		name   string
		change func(*Input)
		want   string // a word of the first reason; "" for none
	}{
		{"pools fully", func(*Input) {}, ""},
		{"residency in two jurisdictions", func(in *Input) {
			in.Regions[1].Jurisdiction = "y"
			in.Regions[0].ResidencyShare, in.Regions[1].ResidencyShare = 0.9, 0.9
		}, "residency"},
		{"a link out of reach", func(in *Input) { in.MaxWANRTT = 50 * time.Millisecond }, "reach"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := apart()
			tc.change(&in)
			res, err := Solve(in)
			if err != nil {
				t.Fatal(err)
			}
			pooled := res.PlannedReplicas == res.AggregatedReplicas
			switch {
			case tc.want == "" && (!pooled || len(res.HeldBy) != 0):
				t.Errorf("planned %d of aggregated %d, held by %q: want it pooled and nothing named", res.PlannedReplicas, res.AggregatedReplicas, res.HeldBy)
			case tc.want != "" && (pooled || len(res.HeldBy) == 0 || !strings.HasPrefix(res.HeldBy[0], tc.want)):
				t.Errorf("planned %d of aggregated %d, held by %q: want it above the ideal and %q named", res.PlannedReplicas, res.AggregatedReplicas, res.HeldBy, tc.want)
			}
		})
	}
}

// TestARegionWithoutReplicasIsServedFromItsPeers: a model served in some
// regions only (NoReplicas elsewhere) places nothing there, serves that
// region's free demand from its peers, and names its resident demand,
// which no region may serve, instead of failing or placing a replica the
// fleet does not have.
func TestARegionWithoutReplicasIsServedFromItsPeers(t *testing.T) {
	in := twoRegions(raised(10, 0.3, 2), raised(10, 0.3, 14))
	in.Regions[1].Jurisdiction, in.Regions[1].ResidencyShare, in.Regions[1].NoReplicas = "y", 0.1, true
	res, err := Solve(in)
	if err != nil {
		t.Fatal(err)
	}
	if res.Placement["west"] != 0 || res.IsolatedByRegion["west"] != 0 {
		t.Errorf("west holds no replicas: placement %v, isolated %v", res.Placement, res.IsolatedByRegion)
	}
	// East carries its own demand and west's free 90% every hour.
	need := 0.0
	for h := range Hours {
		need = math.Max(need, in.Regions[0].Demand[h]+0.9*in.Regions[1].Demand[h])
	}
	if want := replicasFor(need, 1); res.Placement["east"] != want || res.PlannedReplicas != want {
		t.Errorf("east %d, planned %d; want %d (its peak with west's free demand)", res.Placement["east"], res.PlannedReplicas, want)
	}
	if len(res.Unserved) != 1 || !strings.Contains(res.Unserved[0], "west: its resident demand (10%)") {
		t.Errorf("unserved %q, want west's resident demand named", res.Unserved)
	}
	for _, sharing := range []bool{true, false} {
		if got := Place(in, res, 5, sharing); got["west"] != 0 || got["east"] != 5 {
			t.Errorf("Place(5, sharing=%v) = %v, want all five in east", sharing, got)
		}
	}

	in.Regions[0].NoReplicas = true
	if _, err := Solve(in); err == nil || !strings.Contains(err.Error(), "no region may hold replicas") {
		t.Errorf("every region without replicas: err %v", err)
	}
}
