package engine

import (
	"slices"
	"testing"
	"time"
)

// withAdapter is seq with a LoRA adapter.
func withAdapter(s *Sequence, adapter string) *Sequence { s.Adapter = adapter; return s }

// An adapter is loaded once into a slot (the step that loads it is
// LoRALoad longer) and stays resident for the next sequence of it; with
// every slot taken by idle adapters, the least recently used one is
// evicted.
func TestAdaptersAreLoadedIntoSlotsAndEvictedLeastRecentlyUsed(t *testing.T) {
	const load = 200 * time.Millisecond
	e := New(Config{Profile: testProfile(), MaxLoRAs: 2, LoRALoad: load})
	run := func(at time.Duration, adapter string, root uint64) *Sequence {
		s := withAdapter(seq(adapter, root, 1, 1), adapter)
		if _, err := RunVirtual(e, t0.Add(at), []Arrival{{0, s}}, nil); err != nil {
			t.Fatal(err)
		}
		return s
	}
	cold := run(0, "a", 1)
	warm := run(time.Minute, "a", 2)
	if d := ttft(cold) - ttft(warm); d < load-time.Millisecond || d > load+time.Millisecond {
		t.Errorf("a cold adapter's first token was %v later than a resident one's, want the load time %v", d, load)
	}
	run(2*time.Minute, "b", 3)
	run(3*time.Minute, "a", 4) // a is now more recently used than b
	run(4*time.Minute, "c", 5) // evicts b
	if _, _, resident := e.LoRAs(); !slices.Equal(resident, []string{"a", "c"}) {
		t.Errorf("resident adapters %v, want a and c (b, least recently used, evicted)", resident)
	}
	if n := e.Stats().LoRALoads; n != 3 {
		t.Errorf("%d adapter loads, want 3 (a, b, c)", n)
	}
}

// A sequence whose adapter can get no slot — every slot serves running
// sequences — waits, and sequences behind it that can run go first (as
// vLLM's scheduler skips it); it starts once a slot is idle.
func TestASequenceWithoutAnAdapterSlotWaitsAndOthersPass(t *testing.T) {
	e := New(Config{Profile: testProfile(), MaxLoRAs: 1, LoRALoad: time.Millisecond})
	long := withAdapter(seq("long", 1, 1, 20), "a")
	blocked := withAdapter(seq("blocked", 2, 1, 1), "b")
	base := seq("base", 3, 1, 1)
	if _, err := RunVirtual(e, t0, []Arrival{{0, long}, {time.Microsecond, blocked}, {2 * time.Microsecond, base}}, nil); err != nil {
		t.Fatal(err)
	}
	if !base.FirstTokenAt.Before(long.FinishedAt) {
		t.Errorf("the base-model sequence behind the blocked one started at %v, after the adapter's slot freed (%v)", base.FirstTokenAt.Sub(t0), long.FinishedAt.Sub(t0))
	}
	if blocked.FirstTokenAt.Before(long.FinishedAt) {
		t.Errorf("adapter b started at %v while a's only slot served a running sequence until %v", blocked.FirstTokenAt.Sub(t0), long.FinishedAt.Sub(t0))
	}
}
