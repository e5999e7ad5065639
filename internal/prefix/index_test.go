package prefix

import (
	"math/rand/v2"
	"runtime"
	"testing"

	"skywalker/internal/prefix/prefixtest"
)

func TestMatchFindsTheLongestPrefixPerTarget(t *testing.T) {
	x := New(16)
	a, _ := x.AddTarget("a", 1<<20)
	b, _ := x.AddTarget("b", 1<<20)
	c, _ := x.AddTarget("c", 1<<20)
	req := prefixtest.Chain(1, 10)
	x.Insert(a, req[:10], nil)
	x.Insert(b, req[:3], nil)
	x.Insert(c, prefixtest.Chain(2, 5), nil) // an unrelated prompt

	matched := make([]int, MaxTargets)
	longest := x.Match(req, matched)
	tests := []struct {
		target Target
		want   int
	}{{a, 10}, {b, 3}, {c, 0}}
	for _, tc := range tests {
		if matched[tc.target] != tc.want {
			t.Errorf("target %s matched %d blocks, want %d", x.Name(tc.target), matched[tc.target], tc.want)
		}
	}
	if longest != 10 {
		t.Errorf("longest = %d, want 10", longest)
	}
	if got := x.Match(prefixtest.Chain(3, 4), matched); got != 0 || matched[a] != 0 {
		t.Errorf("an unseen prompt matched %d", got)
	}
}

func TestCapacityEvictsLeastRecentlyUsedLeavesFirst(t *testing.T) {
	x := New(10)
	a, _ := x.AddTarget("a", 50) // 5 blocks
	old := prefixtest.Chain(1, 4)
	x.Insert(a, old, nil)
	fresh := prefixtest.Chain(2, 3)
	x.Insert(a, fresh, nil)
	if x.TargetLen(a) != 5 {
		t.Fatalf("target holds %d blocks, want its capacity of 5", x.TargetLen(a))
	}
	matched := make([]int, MaxTargets)
	x.Match(fresh, matched)
	if matched[a] != 3 {
		t.Errorf("the fresh prompt matched %d blocks, want all 3", matched[a])
	}
	// The old prompt lost its two deepest blocks, not its root.
	x.Match(old, matched)
	if matched[a] != 2 {
		t.Errorf("the old prompt matched %d blocks, want the first 2 kept", matched[a])
	}
}

func TestTouchingAPrefixProtectsItFromEviction(t *testing.T) {
	x := New(1)
	a, _ := x.AddTarget("a", 6)
	p1, p2 := prefixtest.Chain(1, 3), prefixtest.Chain(2, 3)
	x.Insert(a, p1, nil)
	x.Insert(a, p2, nil)
	x.Insert(a, p1, nil) // p1 used again: now more recent than p2
	x.Insert(a, prefixtest.Chain(3, 1), nil)
	matched := make([]int, MaxTargets)
	x.Match(p1, matched)
	if matched[a] != 3 {
		t.Errorf("p1 matched %d, want all 3: it was used most recently", matched[a])
	}
	x.Match(p2, matched)
	if matched[a] != 2 {
		t.Errorf("p2 matched %d, want its deepest block evicted (2 left)", matched[a])
	}
}

func TestForgetAndRemoveTarget(t *testing.T) {
	x := New(1)
	a, _ := x.AddTarget("a", 100)
	b, _ := x.AddTarget("b", 100)
	p := prefixtest.Chain(1, 5)
	x.Insert(a, p, nil)
	x.Insert(b, p, nil)
	x.Forget(a)
	matched := make([]int, MaxTargets)
	x.Match(p, matched)
	if matched[a] != 0 || matched[b] != 5 {
		t.Errorf("after Forget(a): a=%d b=%d, want 0 and 5", matched[a], matched[b])
	}
	x.RemoveTarget(b)
	if x.Blocks() != 0 || x.Len() != 0 {
		t.Errorf("after removing every holder: %d blocks, %d entries", x.Blocks(), x.Len())
	}
	c, err := x.AddTarget("c", 100)
	if err != nil || c != b {
		t.Errorf("a removed target's id should be reused: got %d, %v", c, err)
	}
}

func TestAddTargetFailsPastMaxTargets(t *testing.T) {
	x := New(1)
	for i := range MaxTargets {
		if _, err := x.AddTarget("t", 10); err != nil {
			t.Fatalf("target %d: %v", i, err)
		}
	}
	if _, err := x.AddTarget("one too many", 10); err == nil {
		t.Error("want ErrTooManyTargets")
	}
}

func TestSetCapacityShrinks(t *testing.T) {
	x := New(1)
	a, _ := x.AddTarget("a", 10)
	x.Insert(a, prefixtest.Chain(1, 10), nil)
	x.SetCapacity(a, 4)
	if x.TargetLen(a) != 4 {
		t.Errorf("after shrinking to 4: %d blocks", x.TargetLen(a))
	}
}

// TestMatchAgreesWithALinearScan drives random inserts, evictions and
// forgets, and checks the bisecting Match against the obvious scan.
func TestMatchAgreesWithALinearScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	x := New(1)
	var targets []Target
	for i := range 8 {
		tg, _ := x.AddTarget(string(rune('a'+i)), 20+rng.IntN(200))
		targets = append(targets, tg)
	}
	// A small forest of prompts: each prompt is a root plus a length, and
	// prompts with the same root share prefixes.
	prompt := func() []uint64 { return prefixtest.Chain(uint64(rng.IntN(12)), 1+rng.IntN(60)) }
	matched := make([]int, MaxTargets)
	for step := range 5000 {
		tg := targets[rng.IntN(len(targets))]
		switch r := rng.IntN(100); {
		case r < 70:
			x.Insert(tg, prompt(), nil)
		case r < 72:
			x.Forget(tg)
		default:
			p := prompt()
			x.Match(p, matched)
			for _, u := range targets {
				want := 0
				for want < len(p) && x.blocks[p[want]].mask&(1<<u) != 0 {
					want++
				}
				if matched[u] != want {
					t.Fatalf("step %d target %d: Match says %d, scan says %d", step, u, matched[u], want)
				}
			}
		}
	}
}

func BenchmarkIndexMatch800Blocks(b *testing.B) {
	x, req := populated(16, 1_000_000)
	matched := make([]int, MaxTargets)
	b.ResetTimer()
	for b.Loop() {
		x.Match(req, matched)
	}
}

// BenchmarkIndexMemory reports heap bytes per (block, target) entry for an
// index of a million entries over 16 targets. Target: <= 100 bytes.
func BenchmarkIndexMemory(b *testing.B) {
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		x, _ := populated(16, 1_000_000)
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(x.Len()), "bytes/entry")
		runtime.KeepAlive(x)
	}
}

// populated builds an index of about entries (block, target) pairs over n
// targets from 100k-token prompts (800 blocks) that share tenant prefixes,
// and returns it with one fully cached request.
func populated(n, entries int) (*Index, []uint64) {
	x := New(128)
	var ts []Target
	for i := range n {
		t, _ := x.AddTarget(string(rune('a'+i)), entries/n*128)
		ts = append(ts, t)
	}
	var last []uint64
	for i := 0; x.Len() < entries; i++ {
		last = prefixtest.Chain(uint64(i), 800)
		x.Insert(ts[i%n], last, nil)
		x.Insert(ts[(i+1)%n], last[:200], nil)
	}
	return x, last
}

func TestInsertReportsBlocksNewToTheIndex(t *testing.T) {
	x := New(1)
	a, _ := x.AddTarget("a", 100)
	b, _ := x.AddTarget("b", 100)
	var added []uint64
	record := func(h uint64) { added = append(added, h) }
	p := prefixtest.Chain(1, 4)
	x.Insert(a, p[:2], record)
	x.Insert(b, p, record) // p[0], p[1] already held by a
	if len(added) != 4 {
		t.Errorf("reported %d new blocks, want 4 (each block once)", len(added))
	}
}
