package digest

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"skywalker/internal/prefix"
	"skywalker/internal/prefix/prefixtest"
)

var _ BlockSource = (*prefix.Index)(nil)

func TestBuildFromIndexAndMatch(t *testing.T) {
	x := prefix.New(128)
	a, _ := x.AddTarget("a", 1<<20)
	b, _ := x.AddTarget("b", 1<<20)
	long, short := prefixtest.Chain(1, 800), prefixtest.Chain(2, 40)
	x.Insert(a, long, nil)
	x.Insert(b, short[:10], nil)
	d := Build(x, "eu-west", "node-1", 7, 10_000, 0)

	tests := []struct {
		name   string
		blocks []uint64
		want   int
	}{
		{"fully cached 800-block prompt", long, 800},
		{"partly cached prompt", short, 10},
		{"a prompt extending a cached one", append(append([]uint64{}, long[:500]...), prefixtest.Chain(3, 100)...), 500},
		{"unseen prompt", prefixtest.Chain(4, 50), 0},
		{"empty request", nil, 0},
	}
	for _, tc := range tests {
		if got := d.MatchLength(tc.blocks); got != tc.want {
			t.Errorf("%s: MatchLength = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestFalsePositiveRateAtCapacityIsAtMostOnePercent(t *testing.T) {
	const capacity = 100_000
	d := New("r", "", 1, capacity, 0.01)
	rng := rand.New(rand.NewPCG(7, 7))
	for range capacity {
		d.Add(rng.Uint64())
	}
	const probes = 200_000
	fp := 0
	for range probes {
		if d.Contains(rng.Uint64()) {
			fp++
		}
	}
	if rate := float64(fp) / probes; rate > 0.01 {
		t.Errorf("false-positive rate at capacity = %.4f, want <= 0.01", rate)
	}
}

// TestMatchLengthSurvivesFalsePositives fills a filter far past capacity, so
// false positives are frequent, and checks that MatchLength never reports a
// length whose blocks are not all (reported) present.
func TestMatchLengthSurvivesFalsePositives(t *testing.T) {
	d := New("r", "", 1, 1000, 0.01)
	rng := rand.New(rand.NewPCG(3, 3))
	for range 5000 { // five times over capacity
		d.Add(rng.Uint64())
	}
	for trial := range 200 {
		req := prefixtest.Chain(uint64(trial)+100, 300)
		k := rng.IntN(300)
		for _, h := range req[:k] {
			d.Add(h)
		}
		got := d.MatchLength(req)
		if got < k {
			t.Fatalf("trial %d: MatchLength %d below the %d blocks inserted (Bloom filters have no false negatives)", trial, got, k)
		}
		for i := range got {
			if !d.Contains(req[i]) {
				t.Fatalf("trial %d: claimed %d leading blocks but block %d is absent", trial, got, i)
			}
		}
	}
}

// TestMatchLengthAgreesWithAScanAtCapacity checks the bisection against the
// definition (count leading present blocks) on a filter at its design load.
func TestMatchLengthAgreesWithAScanAtCapacity(t *testing.T) {
	const capacity = 20_000
	d := New("r", "", 1, capacity, 0.01)
	rng := rand.New(rand.NewPCG(5, 5))
	var reqs [][]uint64
	var cached []int
	for added := 0; added < capacity; {
		req := prefixtest.Chain(rng.Uint64(), 1+rng.IntN(800))
		k := rng.IntN(len(req) + 1)
		for _, h := range req[:k] {
			d.Add(h)
		}
		added += k
		reqs, cached = append(reqs, req), append(cached, k)
	}
	for i, req := range reqs {
		if got, want := d.MatchLength(req), d.scan(req); got != want || got < cached[i] {
			t.Fatalf("request %d: MatchLength %d, scan %d, inserted %d", i, got, want, cached[i])
		}
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	d := New("ap-east", "proxy-2", 42, 5000, 0.01)
	for _, h := range prefixtest.Chain(9, 300) {
		d.Add(h)
	}
	enc, err := d.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(enc)
	if err != nil {
		t.Fatal(err)
	}
	if got.Region != "ap-east" || got.Node != "proxy-2" || got.Generation != 42 || got.Bits() != d.Bits() || got.Hashes() != d.Hashes() {
		t.Errorf("header lost in round trip: %+v", got)
	}
	if n := got.MatchLength(prefixtest.Chain(9, 300)); n != 300 {
		t.Errorf("decoded digest matches %d blocks, want 300", n)
	}
	again, _ := got.MarshalBinary()
	if !bytes.Equal(enc, again) {
		t.Error("re-encoding changed the bytes")
	}
}

func TestDecodeRejectsMalformedInput(t *testing.T) {
	good, _ := New("r", "n", 1, 100, 0.01).MarshalBinary()
	mutate := func(f func([]byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	tests := []struct {
		name string
		in   []byte
	}{
		{"empty", nil},
		{"bad magic", mutate(func(b []byte) []byte { b[0] = 'X'; return b })},
		{"future version", mutate(func(b []byte) []byte { b[4] = 9; return b })},
		{"truncated header", good[:10]},
		{"truncated filter", good[:len(good)-1]},
		{"extra bytes", append(append([]byte(nil), good...), 0)},
		{"empty region", []byte("SWDG\x01\x00\x00" + "\x01\x00\x00\x00\x00\x00\x00\x00" + "\x40\x00\x00\x00\x00\x00\x00\x00" + "\x03" + "\x00\x00\x00\x00\x00\x00\x00\x00")},
		{"huge filter", []byte("SWDG\x01\x01r\x00" + "\x01\x00\x00\x00\x00\x00\x00\x00" + "\x00\x00\x00\x00\x00\x00\x00\x40" + "\x03")},
		{"zero hashes", mutate(func(b []byte) []byte { b[4+1+2+1+1+8+8] = 0; return b })},
	}
	for _, tc := range tests {
		if _, err := Decode(tc.in); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err = %v, want ErrMalformed", tc.name, err)
		}
	}
}

func TestMergeIsTheUnion(t *testing.T) {
	a := New("r", "a", 1, 1000, 0.01)
	b := New("r", "b", 1, 1000, 0.01)
	p, q := prefixtest.Chain(1, 20), prefixtest.Chain(2, 20)
	for _, h := range p {
		a.Add(h)
	}
	for _, h := range q {
		b.Add(h)
	}
	u := a.Clone()
	if err := u.Merge(b); err != nil {
		t.Fatal(err)
	}
	if u.MatchLength(p) != 20 || u.MatchLength(q) != 20 {
		t.Error("merged digest must hold both nodes' blocks")
	}
	if a.MatchLength(q) == 20 {
		t.Error("Merge into a clone must not change the original")
	}
	if err := u.Merge(New("r", "c", 1, 50_000, 0.01)); err == nil {
		t.Error("merging filters of different sizes must fail")
	}
}

func BenchmarkMatchLength800Blocks(b *testing.B) {
	d := New("r", "", 1, 1_000_000, 0.01)
	req := prefixtest.Chain(1, 800)
	for _, h := range req {
		d.Add(h)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	for range 1_000_000 - 800 {
		d.Add(rng.Uint64())
	}
	b.ResetTimer()
	for b.Loop() {
		if d.MatchLength(req) != 800 {
			b.Fatal("wrong match")
		}
	}
}

func TestFillRatioEstimateTracksTheCount(t *testing.T) {
	d := New("r", "", 1, 10_000, 0.01)
	rng := rand.New(rand.NewPCG(2, 2))
	for range 5_000 {
		d.Add(rng.Uint64())
	}
	est := d.FillRatio()
	counted := d.Clone().FillRatio() // a clone is sealed: counted
	if est < counted-0.02 || est > counted+0.02 {
		t.Errorf("estimated fill %.3f, counted %.3f", est, counted)
	}
	c := d.Clone()
	for range 5_000 {
		c.Add(rng.Uint64())
	}
	if est, counted := c.FillRatio(), c.Clone().FillRatio(); est < counted-0.02 || est > counted+0.02 {
		t.Errorf("after more additions to a sealed digest: estimated %.3f, counted %.3f", est, counted)
	}
}

func TestAddedBitsCarryAGrowingFilterExactly(t *testing.T) {
	old := New("r", "n", 1, 10_000, 0.01)
	for i := range uint64(5_000) {
		old.Add(i * 0x9E3779B97F4A7C15)
	}
	cur := old.Clone()
	for i := range uint64(200) {
		cur.Add(1e6 + i)
	}
	cur.Generation = 2
	positions, ok := cur.AddedSince(old)
	if !ok || len(positions) == 0 || len(positions) > 200*int(cur.Hashes()) {
		t.Fatalf("AddedSince: %d positions, ok %v; want at most %d new bits", len(positions), ok, 200*cur.Hashes())
	}
	for i := 1; i < len(positions); i++ {
		if positions[i] <= positions[i-1] {
			t.Fatal("positions must ascend")
		}
	}
	got, err := old.WithBits(positions, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Words(), cur.Words()) || got.Generation != 2 {
		t.Error("old plus the added bits must be the new filter, word for word")
	}
	if old.Generation != 1 || slices.Equal(old.Words(), cur.Words()) {
		t.Error("WithBits must not modify the receiver")
	}
	// Not a growth: a rebuilt filter, or one of another size.
	if _, ok := old.AddedSince(cur); ok {
		t.Error("a filter with bits cleared is not a growth")
	}
	if _, ok := cur.AddedSince(New("r", "n", 1, 20_000, 0.01)); ok {
		t.Error("filters of different sizes cannot be diffed")
	}
	if _, err := old.WithBits([]uint64{uint64(old.Bits()) + 5}, 3); err == nil {
		t.Error("a bit past the end must be an error")
	}
}
