package workload

import (
	"math"
	"testing"
	"time"
)

func testDiurnal() Diurnal {
	return Diurnal{
		Regions: []RegionLoad{{Name: "us-east", UTCOffset: -5, Jurisdiction: "us"}, {Name: "ap-east", UTCOffset: 9, Jurisdiction: "ap"}},
		Day:     24 * time.Minute, Duration: 24 * time.Minute, PeakRPS: 20, ValleyRatio: 0.3,
		MeanTurns: 3, ThinkTime: 5 * time.Second, Tenants: 4, TenantPromptTokens: 1024,
		MaxPromptTokens: 16000, Lengths: Synthetic(), BlockTokens: 128, Seed: 7, ResidencyShare: 0.1,
	}
}

func TestShapePeaksAtTwoPMWithTheValleyAtNight(t *testing.T) {
	d := testDiurnal()
	if s := d.Shape(14); math.Abs(s-1) > 1e-9 {
		t.Errorf("shape at 14:00 = %v, want 1", s)
	}
	if s := d.Shape(2); math.Abs(s-0.3) > 1e-9 {
		t.Errorf("shape at 02:00 = %v, want the 0.3 valley", s)
	}
	// us-east (UTC-5) peaks at 19:00 UTC: one compressed minute per hour.
	if r := d.Rate(0, 19*time.Minute); math.Abs(r-20) > 1e-9 {
		t.Errorf("us-east rate at 19:00 UTC = %v, want the 20 rps peak", r)
	}
}

func TestArrivalsFollowTheCurveAndAreOrdered(t *testing.T) {
	d := testDiurnal()
	src, err := d.Source()
	if err != nil {
		t.Fatal(err)
	}
	var last time.Duration
	perHour := map[string][]int{"us-east": make([]int, 24), "ap-east": make([]int, 24)}
	n := 0
	for a, ok := src.Next(); ok; a, ok = src.Next() {
		if a.At < last {
			t.Fatalf("arrival at %v after %v", a.At, last)
		}
		last = a.At
		perHour[a.Region][int(a.At/time.Minute)]++
		n++
		if a.Request.PromptTokens < len(a.Request.Blocks)*128 || a.Request.MaxTokens < 1 {
			t.Fatalf("inconsistent request %+v", a.Request)
		}
	}
	// Expected total: 2 regions × mean shape 0.65 × 20 rps × 1440 s ≈ 37k.
	if n < 30000 || n > 45000 {
		t.Errorf("%d arrivals, want about 37k", n)
	}
	us := perHour["us-east"]
	if us[19] < 2*us[7] {
		t.Errorf("us-east: %d requests in its peak hour vs %d at night, want the peak well above", us[19], us[7])
	}
	ap := perHour["ap-east"]
	if ap[5] < 2*ap[17] { // 14:00 local in ap-east is 05:00 UTC
		t.Errorf("ap-east: %d at its peak vs %d at night", ap[5], ap[17])
	}
}

func TestSessionsShareTheirPrefixAcrossTurns(t *testing.T) {
	d := testDiurnal()
	d.Tenants = 0
	src, _ := d.Source()
	bySession := map[string][][]uint64{}
	for a, ok := src.Next(); ok; a, ok = src.Next() {
		bySession[a.Request.Session] = append(bySession[a.Request.Session], a.Request.Blocks)
	}
	multi := 0
	for s, turns := range bySession {
		for i := 1; i < len(turns); i++ {
			multi++
			prev, cur := turns[i-1], turns[i]
			if len(cur) < len(prev) {
				t.Fatalf("session %s shrank", s)
			}
			for j := range prev {
				if prev[j] != cur[j] {
					t.Fatalf("session %s turn %d does not extend turn %d at block %d", s, i, i-1, j)
				}
			}
		}
	}
	if multi == 0 {
		t.Error("no multi-turn sessions")
	}
}

func TestTenantsShareTheirSystemPrompt(t *testing.T) {
	d := testDiurnal()
	src, _ := d.Source()
	roots := map[uint64]int{}
	residency := 0
	total := 0
	for a, ok := src.Next(); ok; a, ok = src.Next() {
		roots[a.Request.Blocks[0]]++
		total++
		if a.Request.Residency != "" {
			residency++
		}
	}
	if len(roots) != 4 {
		t.Errorf("%d distinct first blocks, want the 4 tenants' prompts", len(roots))
	}
	if share := float64(residency) / float64(total); share < 0.05 || share > 0.2 {
		t.Errorf("residency share %.2f, want about 0.1", share)
	}
}

func TestSourceIsDeterministic(t *testing.T) {
	d := testDiurnal()
	d.Duration = 2 * time.Minute
	collect := func() []string {
		src, _ := d.Source()
		var out []string
		for a, ok := src.Next(); ok; a, ok = src.Next() {
			out = append(out, a.Request.ID+a.Region+a.At.String())
		}
		return out
	}
	a, b := collect(), collect()
	if len(a) == 0 || len(a) != len(b) {
		t.Fatalf("lengths %d %d", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("arrival %d differs: %s vs %s", i, a[i], b[i])
		}
	}
}

func TestBurstMultipliesOneRegion(t *testing.T) {
	d := testDiurnal()
	d.Bursts = []Burst{{Region: "ap-east", At: 10 * time.Minute, Duration: time.Minute, Multiplier: 5}}
	base := testDiurnal()
	if got := d.Rate(1, 10*time.Minute+time.Second); got < 4.9*base.Rate(1, 10*time.Minute+time.Second) {
		t.Errorf("burst rate %v", got)
	}
	if d.Rate(0, 10*time.Minute+time.Second) != base.Rate(0, 10*time.Minute+time.Second) {
		t.Error("the burst must not touch other regions")
	}
}

func TestValidate(t *testing.T) {
	bad := testDiurnal()
	bad.ValleyRatio = 0
	if _, err := bad.Source(); err == nil {
		t.Error("a zero valley ratio must be refused")
	}
}

// TestATenantBurstRaisesOnlyThatTenantsDemand: two tenants at equal
// shares on flat demand; tenant-0 triples for a third of the run.
func TestATenantBurstRaisesOnlyThatTenantsDemand(t *testing.T) {
	d := testDiurnal()
	d.ValleyRatio, d.Tenants, d.MeanTurns = 1, 2, 1
	d.Bursts = []Burst{{Tenant: "tenant-0", At: 8 * time.Minute, Duration: 8 * time.Minute, Multiplier: 3}}
	src, err := d.Source()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string][3]int{} // tenant → before, during, after
	for {
		a, ok := src.Next()
		if !ok {
			break
		}
		c := counts[a.Request.Tenant]
		c[int(a.At/(8*time.Minute))]++
		counts[a.Request.Tenant] = c
	}
	noisy, quiet := counts["tenant-0"], counts["tenant-1"]
	if r := float64(noisy[1]) / float64(noisy[0]); r < 2.6 || r > 3.4 {
		t.Errorf("tenant-0 during/before the burst: %d/%d = %.2f, want about 3", noisy[1], noisy[0], r)
	}
	if r := float64(quiet[1]) / float64(quiet[0]); r < 0.85 || r > 1.15 {
		t.Errorf("tenant-1 during/before: %d/%d = %.2f, want about 1", quiet[1], quiet[0], r)
	}
	if r := float64(noisy[2]) / float64(noisy[0]); r < 0.85 || r > 1.15 {
		t.Errorf("tenant-0 after/before: %.2f, want about 1", r)
	}
	d.TenantShares = []float64{1}
	if _, err := d.Source(); err == nil {
		t.Error("one share for two tenants was accepted")
	}
}
