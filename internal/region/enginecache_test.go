package region

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"skywalker/internal/kvevents"
	"skywalker/internal/policy"
	"skywalker/internal/request"
)

// stored is a run of GPU blocks an engine stored, one prompt block (128
// tokens) each; parent 0 for none.
func stored(parent uint64, hashes ...uint64) kvevents.Event {
	e := kvevents.Event{Kind: kvevents.Stored, Hashes: hashes, BlockSize: 128, Tokens: 128 * len(hashes), Medium: "GPU"}
	if parent != 0 {
		e.Parent, e.HasParent = parent, true
	}
	return e
}

func removed(hashes ...uint64) kvevents.Event {
	return kvevents.Event{Kind: kvevents.Removed, Hashes: hashes, Medium: "GPU"}
}

// send dispatches a prompt of blocks to replica i of r and returns its
// request.
func send(r *pool, id string, i int, blocks ...uint64) *request.Request {
	o := deliveryFor(r, id, i, blocks...)
	r.Deliver(o)
	return o.Request
}

// holds is how many leading blocks of prompt r's index believes replica
// rp holds.
func holds(r *pool, rp *replica, prompt ...uint64) int {
	r.index.Match(prompt, r.matched)
	return r.matched[rp.target]
}

// TestKVEventsDecideWhatTheIndexForgets: the first batch makes a
// replica's events its cache source; a run it stores is attributed to the
// prompt sent there (a continuation to the prompt that extends it); an
// evicted block takes its prompt block and every deeper one out of the
// index; a block another rank still holds, or one on the CPU, does not;
// AllBlocksCleared empties it.
func TestKVEventsDecideWhatTheIndexForgets(t *testing.T) {
	r, _ := newTestRegion(t, 2)
	rp := r.Replicas()[0]
	if s := r.CacheSource(rp); s != CacheBelief {
		t.Fatalf("before any event: source %v, want belief", s)
	}
	r.EngineEvents(t0, rp, 0, nil)
	if s := r.CacheSource(rp); s != CacheEvents {
		t.Fatalf("after a batch: source %v, want events", s)
	}
	a := send(r, "a", 0, 1, 2, 3)
	r.EngineEvents(t0, rp, 0, []kvevents.Event{stored(0, 101, 102, 103)})
	r.end(a, Served, time.Second)
	b := send(r, "b", 0, 1, 2, 3, 4) // three blocks cached: the engine stores the fourth
	r.EngineEvents(t0, rp, 0, []kvevents.Event{stored(103, 104)})
	r.end(b, Served, time.Second)
	if n := holds(r, rp, 1, 2, 3, 4); n != 4 {
		t.Fatalf("the index holds %d blocks of b, want 4", n)
	}

	steps := []struct {
		name   string
		rank   int
		events []kvevents.Event
		want   int // leading blocks of b the index then holds
	}{
		{"the fourth block evicted", 0, []kvevents.Event{removed(104)}, 3},
		{"the first stored on a second rank too", 1, []kvevents.Event{stored(0, 101)}, 3},
		{"the second offloaded to the CPU", 0, []kvevents.Event{{Kind: kvevents.Stored, Hashes: []uint64{102}, Medium: "CPU"}, {Kind: kvevents.Removed, Hashes: []uint64{102}, Medium: "CPU"}}, 3},
		{"the second evicted: it and the third go", 0, []kvevents.Event{removed(102)}, 1},
		{"the first evicted on rank 0: rank 1 still holds it", 0, []kvevents.Event{removed(101)}, 1},
		{"a block never seen stored", 0, []kvevents.Event{removed(999)}, 1},
		{"the first evicted on rank 1", 1, []kvevents.Event{removed(101)}, 0},
	}
	for _, s := range steps {
		r.EngineEvents(t0, rp, s.rank, s.events)
		if n := holds(r, rp, 1, 2, 3, 4); n != s.want {
			t.Errorf("%s: the index holds %d blocks of b, want %d", s.name, n, s.want)
		}
	}

	c := send(r, "c", 0, 7, 8)
	r.EngineEvents(t0, rp, 0, []kvevents.Event{stored(0, 107, 108)})
	r.end(c, Served, time.Second)
	r.EngineEvents(t0, rp, 0, []kvevents.Event{{Kind: kvevents.Cleared}})
	if n := r.IndexedBlocks(rp); n != 0 || r.CacheSource(rp) != CacheEvents {
		t.Errorf("after AllBlocksCleared: %d blocks indexed, source %v; want none, events", n, r.CacheSource(rp))
	}
}

// TestALostStreamFallsBackToBeliefUntilRebuilt: when a replica's events
// could not be kept whole its index rests on belief (bounded by its cache
// again) until the engine has stored a cache's worth of blocks since —
// everything from before is gone — and then on events again; a restarted
// engine's index is emptied.
func TestALostStreamFallsBackToBeliefUntilRebuilt(t *testing.T) {
	r, _ := newTestRegion(t, 1)
	rp := r.Replicas()[0]
	r.EngineEventsLost(rp)
	if s := r.CacheSource(rp); s != CacheBelief {
		t.Errorf("lost before any event: source %v, want belief (nothing was known)", s)
	}
	r.EngineEvents(t0, rp, 0, nil)
	a := send(r, "a", 0, 1, 2)
	r.EngineEvents(t0, rp, 0, []kvevents.Event{stored(0, 101, 102)})
	r.end(a, Served, time.Second)
	r.EngineEventsLost(rp)
	if s := r.CacheSource(rp); s != CacheLost {
		t.Fatalf("after a loss: source %v, want lost", s)
	}
	cacheWorth := r.capacityTokens(rp) / r.cfg.BlockTokens * engineBlocksPerPromptBlock
	hashes := make([]uint64, cacheWorth)
	for i := range hashes {
		hashes[i] = uint64(1000 + i)
	}
	r.EngineEvents(t0, rp, 0, []kvevents.Event{stored(0, hashes[:cacheWorth-1]...)})
	if s := r.CacheSource(rp); s != CacheLost {
		t.Errorf("a block short of a cache's worth stored since the loss: source %v, want still lost", s)
	}
	r.EngineEvents(t0, rp, 0, []kvevents.Event{stored(hashes[cacheWorth-2], hashes[cacheWorth-1])})
	if s := r.CacheSource(rp); s != CacheEvents {
		t.Errorf("a cache's worth stored since the loss: source %v, want events (rebuilt)", s)
	}

	if holds(r, rp, 1, 2) != 2 {
		t.Fatal("the prompt sent before the loss left the index")
	}
	r.EngineRestarted(rp)
	if n := r.IndexedBlocks(rp); n != 0 || r.CacheSource(rp) != CacheEvents {
		t.Errorf("after a restart: %d blocks indexed, source %v; want none, events", n, r.CacheSource(rp))
	}
}

// newNode is a one-region node named node with n replicas.
func newNode(t *testing.T, node string, n int) *pool {
	t.Helper()
	r, err := newPool(Config{Name: "us-east", Node: node, MaxInFlight: 4, Prefill: policy.PrefillProfile{PerToken: 100 * time.Microsecond}},
		policy.NewSkywalker(policy.DefaultSkywalkerConfig()), func(*Attempt) {})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.SetReplicas(Specs("r0", "r1")[:n]); err != nil {
		t.Fatal(err)
	}
	return r
}

// tell hands what from dispatched to to, as the mesh does.
func tell(from, to *pool) {
	for _, d := range from.TakeDispatches() {
		to.SiblingDispatched(from.cfg.Node, d)
	}
}

// TestTwoNodesOfARegionHoldTheSameIndex: two proxies in front of one
// engine, each sending its own prompt, hear the same KV events; each
// tells the other what it sent (one of them late, after the other's
// events settled). Both end with the same index, and forget the same
// blocks when the engine evicts.
func TestTwoNodesOfARegionHoldTheSameIndex(t *testing.T) {
	for _, late := range []bool{false, true} {
		a, b := newNode(t, "a", 1), newNode(t, "b", 1)
		nodes := []*pool{a, b}
		hear := func(at time.Time, events ...kvevents.Event) {
			for _, n := range nodes {
				n.EngineEvents(at, n.Replicas()[0], 0, events)
			}
		}
		pump := func(at time.Time) {
			for _, n := range nodes {
				n.Pump(at)
			}
		}
		for _, n := range nodes {
			n.ShareDispatches(true)
		}
		hear(t0)
		pump(t0.Add(time.Second))

		t1 := t0.Add(2 * time.Second)
		for _, n := range nodes {
			n.at(t1)
		}
		p := send(a, "p", 0, 1, 2, 3) // a's prompt
		b.at(t1.Add(time.Millisecond))
		q := send(b, "q", 0, 1, 5, 6) // b's, under the same first block
		// The engine prefills p, then q's two blocks past the shared one.
		hear(t1.Add(50*time.Millisecond), stored(0, 101, 102, 103), stored(101, 105, 106))
		tell(a, b)
		if !late {
			tell(b, a)
		}
		pump(t1.Add(400 * time.Millisecond)) // the events settle
		if late {
			tell(b, a) // q's dispatch reaches a after its stores were applied
		}
		a.end(p, Served, time.Second)
		b.end(q, Served, time.Second)
		tell(a, b)
		tell(b, a)

		check := func(when string, wantP, wantQ int) {
			for _, n := range nodes {
				rp := n.Replicas()[0]
				if gotP, gotQ := holds(n, rp, 1, 2, 3), holds(n, rp, 1, 5, 6); gotP != wantP || gotQ != wantQ {
					t.Errorf("late=%v, %s: node %s holds %d blocks of p and %d of q, want %d and %d", late, when, n.cfg.Node, gotP, gotQ, wantP, wantQ)
				}
			}
			if na, nb := a.IndexedBlocks(a.Replicas()[0]), b.IndexedBlocks(b.Replicas()[0]); na != nb {
				t.Errorf("late=%v, %s: a indexes %d blocks, b %d", late, when, na, nb)
			}
		}
		check("both prompts stored", 3, 3)
		t2 := t1.Add(time.Second)
		hear(t2, removed(102)) // p's second block evicted
		pump(t2.Add(400 * time.Millisecond))
		check("p's second block evicted", 1, 3)
		hear(t2.Add(time.Second), removed(106))
		pump(t2.Add(2 * time.Second))
		check("q's last block evicted", 1, 2)
	}
}

// TestAKVEventFloodIsBounded: an engine (or whoever reaches its event
// port) that publishes valid BlockStored events for blocks it never held —
// 400 batches of 100 runs of 16 blocks, twenty times its cache — cannot
// grow the replica's event state past its bound (a few times its 2,000
// blocks), nor the heap by more than 64 MB; its index falls back to
// belief meanwhile and the debug view says why.
func TestAKVEventFloodIsBounded(t *testing.T) {
	r, _ := newTestRegion(t, 1)
	rp := r.Replicas()[0]
	r.Scraped(rp, Metrics{Known: true, KVBlocks: 2000, BlockSize: 16})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	next := uint64(1 << 40)
	batch := make([]kvevents.Event, 100)
	for range 400 {
		for i := range batch {
			hashes := make([]uint64, 16)
			for j := range hashes {
				hashes[j] = next
				next++
			}
			batch[i] = kvevents.Event{Kind: kvevents.Stored, Hashes: hashes, BlockSize: 16, Tokens: 256, Medium: "GPU"}
		}
		r.EngineEvents(t0, rp, 0, batch)
		if n := len(rp.engine.held); n > r.heldCap(rp) {
			t.Fatalf("%d entries held for a replica of 2,000 blocks, over its bound %d", n, r.heldCap(rp))
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 64<<20 {
		t.Errorf("the heap grew %d MB under the flood, want at most 64", grew>>20)
	}
	if rp.engine.overflows == 0 || !strings.Contains(rp.engine.String(), "more blocks than its cache holds") {
		t.Errorf("the flood was not noticed: %s", rp.engine.String())
	}
}
