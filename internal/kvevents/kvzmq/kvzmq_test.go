package kvzmq

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"skywalker/internal/kvevents"
	"skywalker/internal/testwait"
)

// recorder is a Sink that records what it is told, as text.
type recorder struct {
	mu  sync.Mutex
	log []string
}

func (r *recorder) Batch(rank int, b kvevents.Batch) {
	r.add(fmt.Sprintf("batch %v", b.TS))
}
func (r *recorder) Restarted(rank int)        { r.add("restarted") }
func (r *recorder) Lost(rank int, why string) { r.add("lost: " + why) }

func (r *recorder) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, s)
}

func (r *recorder) lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.log...)
}

// follow starts a publisher on loopback and a follower of it.
func follow(t *testing.T, replay bool) (*Publisher, *recorder) {
	t.Helper()
	cfg := PublisherConfig{Endpoint: "tcp://127.0.0.1:0", Topic: "kv"}
	if replay {
		cfg.ReplayEndpoint = "tcp://127.0.0.1:0"
	}
	p, err := Listen(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	rec := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	src := Source{Endpoint: "tcp://" + p.Addr(), Topic: "kv"}
	if replay {
		src.ReplayEndpoint = "tcp://" + p.ReplayAddr()
	}
	go func() { done <- Follow(ctx, src, rec) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Follow: %v", err)
		}
	})
	return p, rec
}

// ready waits until the follower hears the publisher (PUB/SUB drops what
// is published before a subscription takes hold): warm-up batches, then
// a sentinel, which the follower tells only after every warm-up batch
// before it (replayed or not: it delivers in sequence); then a clean
// record.
func ready(t *testing.T, p *Publisher, rec *recorder) {
	t.Helper()
	testwait.Eventually(t, 30*time.Second, "the follower hears the publisher", func() (bool, string) {
		if err := p.Publish(batch(-1, kvevents.MapShape)); err != nil {
			return false, err.Error()
		}
		return len(rec.lines()) > 0, "nothing heard"
	})
	if err := p.Publish(batch(-2, kvevents.MapShape)); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 30*time.Second, "the follower tells the sentinel after the warm-up batches", func() (bool, string) {
		got := rec.lines()
		return slices.Contains(got, "batch -2"), strings.Join(got, "; ")
	})
	rec.mu.Lock()
	rec.log = nil
	rec.mu.Unlock()
}

func batch(ts float64, shape kvevents.Shape) []byte {
	return kvevents.EncodeBatch(kvevents.Batch{TS: ts, Events: []kvevents.Event{{Kind: kvevents.Stored, Hashes: []uint64{uint64(ts)}, BlockSize: 16, Tokens: 16}}}, shape)
}

// waitFor waits until the recorder has heard want, in order, and nothing else.
func waitFor(t *testing.T, rec *recorder, want ...string) {
	t.Helper()
	testwait.Eventually(t, 30*time.Second, "the follower tells "+strings.Join(want, "; "), func() (bool, string) {
		got := rec.lines()
		return strings.Join(got, "; ") == strings.Join(want, "; "), strings.Join(got, "; ")
	})
}

// Batches arrive in order, in both shapes; batches published before the
// subscription took hold (PUB/SUB drops them) and one dropped on the way
// are replayed, so nothing is reported lost.
func TestBatchesArriveInOrderAndGapsAreReplayed(t *testing.T) {
	p, rec := follow(t, true)
	for i := range 3 {
		if err := p.Publish(batch(float64(i), kvevents.Shape(i%2))); err != nil {
			t.Fatal(err)
		}
	}
	p.Skip(batch(3, kvevents.MapShape), true) // lost on the way, still buffered
	// Batches after the gap, until the subscription has taken hold and
	// the follower hears one: then it replays what it missed.
	next := 4
	testwait.Eventually(t, 30*time.Second, "the follower hears a batch after the gap", func() (bool, string) {
		if err := p.Publish(batch(float64(next), kvevents.ArrayShape)); err != nil {
			return false, err.Error()
		}
		next++
		return len(rec.lines()) > 0, "nothing heard"
	})
	var want []string
	for i := range next {
		want = append(want, fmt.Sprintf("batch %d", i))
	}
	waitFor(t, rec, want...)
}

// A gap the replay buffer no longer holds is reported lost, once, and the
// stream goes on; a batch that cannot be read is reported lost and
// skipped; a restarted publisher (its sequence back to 0) is reported.
func TestLostGapsBadBatchesAndRestartsAreTold(t *testing.T) {
	p, rec := follow(t, true)
	ready(t, p, rec)
	publish := func(b []byte) {
		if err := p.Publish(b); err != nil {
			t.Fatal(err)
		}
	}
	publish(batch(0, kvevents.MapShape))
	waitFor(t, rec, "batch 0")
	p.Skip(batch(1, kvevents.MapShape), false) // gone for good
	publish(batch(2, kvevents.MapShape))
	testwait.Eventually(t, 30*time.Second, "the unfillable gap told lost, then the next batch", func() (bool, string) {
		got := rec.lines()
		return len(got) == 3 && strings.HasSuffix(got[1], "are no longer in the engine's replay buffer") && got[2] == "batch 2", strings.Join(got, "; ")
	})
	publish([]byte{0xc1}) // a byte msgpack never uses
	publish(batch(4, kvevents.MapShape))
	lines := rec.lines()
	testwait.Eventually(t, 30*time.Second, "the bad batch reported and the next one delivered", func() (bool, string) {
		lines = rec.lines()
		return len(lines) == 5 && strings.Contains(lines[3], "bad KV event batch") && lines[4] == "batch 4", strings.Join(lines, "; ")
	})
	p.Restart()
	publish(batch(10, kvevents.MapShape))
	testwait.Eventually(t, 30*time.Second, "the restart told", func() (bool, string) {
		lines = rec.lines()
		return len(lines) == 7 && lines[5] == "restarted" && lines[6] == "batch 10", strings.Join(lines, "; ")
	})
}

// Without a replay endpoint a gap is lost.
func TestAGapWithoutReplayIsLost(t *testing.T) {
	p, rec := follow(t, false)
	ready(t, p, rec)
	p.Skip(batch(1, kvevents.MapShape), true)
	if err := p.Publish(batch(2, kvevents.MapShape)); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 30*time.Second, "the gap told lost", func() (bool, string) {
		got := rec.lines()
		return len(got) == 2 && strings.Contains(got[0], "offers no replay") && got[1] == "batch 2", strings.Join(got, "; ")
	})
}

// counter is a Sink that counts the block events it is handed.
type counter struct {
	mu     sync.Mutex
	blocks int
	lost   int
}

func (c *counter) Batch(rank int, b kvevents.Batch) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range b.Events {
		c.blocks += len(e.Hashes)
	}
}
func (c *counter) Restarted(rank int)        {}
func (c *counter) Lost(rank int, why string) { c.mu.Lock(); c.lost++; c.mu.Unlock() }

func (c *counter) count() (int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.blocks, c.lost
}

// BenchmarkFollow is KV events end to end over loopback ZeroMQ: a
// publisher sends batches of 256 stored and 256 removed blocks (map
// shape); one follower decodes them, checks their sequence and hands them
// to a counting sink. Reported: block events per second the follower
// absorbs (publisher and follower share the machine's cores).
func BenchmarkFollow(b *testing.B) {
	p, err := Listen(context.Background(), PublisherConfig{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0", Topic: "kv", Buffer: 1 << 16})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	sink := &counter{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_ = Follow(ctx, Source{Endpoint: "tcp://" + p.Addr(), ReplayEndpoint: "tcp://" + p.ReplayAddr(), Topic: "kv"}, sink)
	}()
	stored := kvevents.Event{Kind: kvevents.Stored, BlockSize: 16, Tokens: 16 * 256, Medium: "GPU"}
	removed := kvevents.Event{Kind: kvevents.Removed, Medium: "GPU"}
	for i := range 256 {
		stored.Hashes = append(stored.Hashes, uint64(i)*0x9E3779B97F4A7C15)
		removed.Hashes = append(removed.Hashes, uint64(i+1000)*0x9E3779B97F4A7C15)
	}
	payload := kvevents.EncodeBatch(kvevents.Batch{TS: 1, Events: []kvevents.Event{stored, removed}, HasRank: true}, kvevents.MapShape)
	deadline := time.Now().Add(30 * time.Second)
	for n, _ := sink.count(); n == 0; n, _ = sink.count() { // the subscription takes hold
		if time.Now().After(deadline) {
			b.Fatal("the follower heard nothing in 30 s")
		}
		_ = p.Publish(payload)
		time.Sleep(10 * time.Millisecond)
	}
	start, _ := sink.count()
	began := time.Now()
	for b.Loop() {
		if err := p.Publish(payload); err != nil {
			b.Fatal(err)
		}
	}
	want := start + 512*b.N
	for n, _ := sink.count(); n < want; n, _ = sink.count() {
		if time.Now().After(deadline.Add(time.Minute)) {
			b.Fatalf("the follower absorbed %d of %d block events", n-start, want-start)
		}
		time.Sleep(time.Millisecond)
	}
	_, lost := sink.count()
	b.ReportMetric(float64(512*b.N)/time.Since(began).Seconds(), "block-events/s") // until the last is absorbed
	b.ReportMetric(float64(lost), "losses")
}
