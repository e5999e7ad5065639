package price

import (
	"math"
	"strings"
	"testing"

	"skywalker/internal/profile"
)

func TestResolve(t *testing.T) {
	book, err := Parse([]byte(`
term: 3y
gpus:
  L4: {reserved_3y: 0.30}
  MI300X: {on_demand: 6.0}
  B200: {reserved_1y: 9.0}
regions:
  ap-south: {no_on_demand: true}
  eu-west: {on_demand: 0.90, spot: 0.25, spot_preemption: 0.1}
`))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, region, gpu        string
		book                     *Book
		reserved, onDemand, spot float64
		available                bool
		source                   []string // substrings the source must hold
	}{
		{name: "the default, 1-year", region: "us-east", gpu: "L4", reserved: 0.7068 * 0.63, onDemand: 0.7068, available: true,
			source: []string{Default}},
		{name: "a GPU line sets the term's price", region: "us-east", gpu: "L4", book: book, reserved: 0.30, onDemand: 0.7068, available: true,
			source: []string{Default, "configured: gpus.L4"}},
		{name: "a region without on-demand", region: "ap-south", gpu: "H100-80GB", book: book, reserved: 11.0312 * 0.45, available: false,
			source: []string{"configured: regions.ap-south"}},
		{name: "a region's on-demand price brings its discounts, a GPU line's reserved price stays", region: "eu-west", gpu: "L4", book: book,
			reserved: 0.90 * 0.45, onDemand: 0.90, spot: 0.25, available: true, source: []string{"configured: regions.eu-west"}},
		{name: "a GPU without a default, priced on demand", region: "us-east", gpu: "MI300X", book: book, reserved: 6.0 * 0.45, onDemand: 6.0, available: true,
			source: []string{"configured: gpus.MI300X"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := c.book.Resolve(c.region, c.gpu)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(p.Reserved-c.reserved) > 1e-9 || math.Abs(p.OnDemand-c.onDemand) > 1e-9 || p.Spot != c.spot || p.OnDemandAvailable != c.available {
				t.Errorf("got reserved %v on-demand %v (available %v) spot %v, want %v %v (%v) %v", p.Reserved, p.OnDemand, p.OnDemandAvailable, p.Spot, c.reserved, c.onDemand, c.available, c.spot)
			}
			for _, s := range c.source {
				if !strings.Contains(p.Source, s) {
					t.Errorf("source %q does not say %q", p.Source, s)
				}
			}
		})
	}
}

func TestResolveRefusesWhatItCannotPrice(t *testing.T) {
	book := &Book{Term: ThreeYear, GPUs: map[string]Rates{"B200": {Reserved1y: ptr(9)}}}
	if _, err := book.Resolve("us-east", "B200"); err == nil || !strings.Contains(err.Error(), `GPU "B200"`) {
		t.Errorf("a 3-year plan of a GPU priced for 1 year only: err %v, want one naming the GPU", err)
	}
	if _, err := (*Book)(nil).Resolve("us-east", "TPU"); err == nil {
		t.Error("an unknown GPU without a book resolved")
	}
	p, err := (&Book{GPUs: map[string]Rates{"B200": {Reserved1y: ptr(9)}}}).Resolve("us-east", "B200")
	if err != nil || p.OnDemandAvailable || p.OnDemand != 0 {
		t.Errorf("a GPU priced reserved only: %+v, %v; want no on-demand (nothing says what it costs)", p, err)
	}
}

func TestParseRejectsBadBooks(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"term: 2y", "term must be 1y or 3y"},
		{"gpus: {L4: {on_demand: -1}}", "gpus.L4: on_demand must be a non-negative"},
		{"regions: {x: {spot_preemption: 1}}", "regions.x: spot_preemption must be in [0, 1)"},
		{"gpus: {L4: {ondemand: 1}}", "ondemand"},
		{"regions: [1, 2]", "line 1: found a list"},
	} {
		_, err := Parse([]byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want an error saying %q", c.yaml, err, c.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("term: 3y\ngpus: {L4: {on_demand: 0.7, reserved_3y: 0.3}}\nregions: {a: {no_on_demand: true, spot: 0.2, spot_preemption: 0.05}}"))
	f.Add([]byte("gpus: {X: {spot_preemption: .nan}}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := Parse(data)
		if err != nil {
			return
		}
		for region := range b.Regions {
			for _, gpu := range append(GPUs(), "unknown") {
				p, err := b.Resolve(region, gpu)
				if err == nil && (p.Reserved < 0 || p.OnDemand < 0 || math.IsNaN(p.Reserved) || (!p.OnDemandAvailable && p.OnDemand != 0)) {
					t.Fatalf("resolved %+v from %q", p, data)
				}
			}
		}
	})
}

func ptr(v float64) *float64 { return &v }

func TestEveryShippedProfileIsPriced(t *testing.T) {
	for _, name := range profile.Names() {
		p, _ := profile.Lookup(name)
		if p.GPUs < 1 {
			t.Errorf("profile %s: %d GPUs per replica", name, p.GPUs)
		}
		if _, err := (*Book)(nil).Resolve("any", p.GPU); err != nil {
			t.Errorf("profile %s: %v", name, err)
		}
	}
}
