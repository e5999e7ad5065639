package mesh

import (
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"skywalker/internal/digest"
	"skywalker/internal/region"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestTablePeersAggregateFreshNodes(t *testing.T) {
	tb := NewTable("us-east", region.DefaultControlPlane())
	tb.Join("eu-1", Meta{Region: "eu-west", Jurisdiction: "eu", APIAddr: "http://eu-1"})
	tb.Join("eu-2", Meta{Region: "eu-west", Jurisdiction: "eu", APIAddr: "http://eu-2"})
	tb.Join("ap-1", Meta{Region: "ap-east", Jurisdiction: "ap", APIAddr: "http://ap-1"})
	tb.Join("us-2", Meta{Region: "us-east", APIAddr: "http://us-2"}) // same region: not a peer

	if !tb.ObserveLoad("eu-1", 0, 1, region.Load{Queued: 3, Outstanding: 10, Replicas: 4, Slots: 256, QueueWait: 50 * time.Millisecond,
		FreeCacheTokens: 9000, HitShare: 0.4}, t0) ||
		!tb.ObserveLoad("eu-2", 0, 5, region.Load{Queued: 2, Outstanding: 7, Replicas: 4, Slots: 256, QueueWait: 80 * time.Millisecond,
			FreeCacheTokens: 3000, HitShare: 0.6}, t0.Add(time.Second)) {
		t.Fatal("fresh summaries refused")
	}
	if tb.ObserveLoad("eu-2", 0, 4, region.Load{Queued: 99}, t0.Add(time.Second)) {
		t.Error("an older summary (by sequence) replaced a newer one")
	}
	if tb.ObserveLoad("nobody", 0, 1, region.Load{}, t0) {
		t.Error("a summary from an unknown node was kept")
	}

	peers := tb.Peers(t0.Add(1500 * time.Millisecond))
	if len(peers) != 2 || peers[0].Region != "ap-east" || peers[1].Region != "eu-west" {
		t.Fatalf("peers %+v: want ap-east and eu-west, sorted", peers)
	}
	ap, eu := peers[0], peers[1]
	if ap.Healthy || ap.Gate != "no RTT samples yet" {
		t.Errorf("ap-east without data: healthy %v gate %q", ap.Healthy, ap.Gate)
	}
	if !eu.Healthy || eu.Nodes != 2 || eu.Load.Queued != 5 || eu.Load.Outstanding != 17 || eu.Load.Replicas != 4 ||
		eu.Load.QueueWait != 80*time.Millisecond || eu.DataAge != 500*time.Millisecond || len(eu.APIAddrs) != 2 ||
		eu.Load.FreeCacheTokens != 9000 || math.Abs(eu.Load.HitShare-0.5) > 1e-9 {
		t.Errorf("eu-west %+v: want both nodes summed (queues, outstanding), the largest replicas, wait and free cache, the mean hit share, the newest age", eu)
	}

	// A node that says it is draining is no longer a node to forward to.
	tb.ObserveLoad("eu-1", 0, 2, region.Load{Queued: 3, Outstanding: 10, Replicas: 4, Slots: 256, Draining: true}, t0.Add(1200*time.Millisecond))
	if eu := tb.Peers(t0.Add(1500 * time.Millisecond))[1]; eu.Nodes != 1 || len(eu.APIAddrs) != 1 || eu.APIAddrs[0] != "http://eu-2" {
		t.Errorf("eu-1 draining: %d nodes at %v; want eu-2 alone", eu.Nodes, eu.APIAddrs)
	}
	tb.ObserveLoad("eu-1", 0, 3, region.Load{Queued: 3, Outstanding: 10, Replicas: 4, Slots: 256}, t0)

	// eu-1's summary is 2.5 s old: it no longer counts.
	eu = tb.Peers(t0.Add(2500 * time.Millisecond))[1]
	if eu.Nodes != 1 || eu.Load.Outstanding != 7 {
		t.Errorf("after eu-1 went stale: %d nodes, outstanding %d; want eu-2 alone", eu.Nodes, eu.Load.Outstanding)
	}
	eu = tb.Peers(t0.Add(10 * time.Second))[1]
	if eu.Healthy || eu.DataAge != 9*time.Second {
		t.Errorf("all data stale: healthy %v, age %v; stale means unavailable, not idle", eu.Healthy, eu.DataAge)
	}
	left := t0.Add(20 * time.Second)
	tb.Leave("eu-2", left)
	tb.Leave("eu-1", left)
	peers = tb.Peers(left.Add(time.Minute))
	if len(peers) != 2 || peers[1].Region != "eu-west" || peers[1].Healthy || peers[1].Gate != "left the mesh" {
		t.Errorf("a region whose nodes all left must stay listed, unhealthy, for a while: %+v", peers)
	}
	if peers := tb.Peers(left.Add(ForgetLeft)); len(peers) != 1 || peers[0].Region == "eu-west" {
		t.Errorf("after ForgetLeft it is forgotten: %+v", peers)
	}
	tb.Join("eu-3", Meta{Region: "eu-west"})
	tb.Leave("eu-3", left)
	tb.Join("eu-4", Meta{Region: "eu-west"})
	if peers := tb.Peers(left); len(peers) != 2 || peers[1].Gate == "left the mesh" {
		t.Errorf("a region that rejoined is no longer listed as left: %+v", peers)
	}
}

func TestTableDigestsAreUnionedPerRegion(t *testing.T) {
	tb := NewTable("us-east", region.DefaultControlPlane())
	tb.Join("eu-1", Meta{Region: "eu-west"})
	tb.Join("eu-2", Meta{Region: "eu-west"})
	for _, n := range []string{"eu-1", "eu-2"} {
		tb.ObserveLoad(n, 0, 1, region.Load{Replicas: 1}, t0)
	}
	d1 := digest.New("eu-west", "eu-1", 2, 1000, 0.01)
	d1.Add(1)
	d2 := digest.New("eu-west", "eu-2", 1, 1000, 0.01)
	d2.Add(2)
	if !tb.ObserveDigest("eu-1", d1.Clone(), t0) || !tb.ObserveDigest("eu-2", d2.Clone(), t0) {
		t.Fatal("digests refused")
	}
	if tb.ObserveDigest("eu-1", withGeneration(d1, 1), t0) {
		t.Error("an older generation replaced a newer one")
	}
	if tb.ObserveDigest("eu-1", digest.New("ap-east", "eu-1", 9, 1000, 0.01), t0) {
		t.Error("a digest of another region was kept")
	}
	u := tb.Peers(t0)[0].Digest
	if u == nil || !u.Contains(1) || !u.Contains(2) {
		t.Fatal("the region's digest is not the union of its nodes'")
	}
	if again := tb.Peers(t0)[0].Digest; again != u {
		t.Error("the union was rebuilt although no digest changed")
	}
}

func TestTableProbeTargetsTakeTurns(t *testing.T) {
	tb := NewTable("us-east", region.DefaultControlPlane())
	tb.Join("eu-1", Meta{Region: "eu-west"})
	tb.Join("eu-2", Meta{Region: "eu-west"})
	tb.Join("ap-1", Meta{Region: "ap-east"})
	first, second := tb.ProbeTargets(), tb.ProbeTargets()
	if len(first) != 2 || first[0] != "ap-1" || first[1] != "eu-1" || second[1] != "eu-2" {
		t.Errorf("targets %v then %v: one node per peer region, in turn", first, second)
	}
	g, changed := tb.ObserveProbe("eu-west", 70*time.Millisecond, true, t0)
	if changed || g.Open() {
		t.Error("one sample opened the gate; the default needs five")
	}
}

func withGeneration(d *digest.Digest, gen uint64) *digest.Digest {
	c := d.Clone()
	c.Generation = gen
	return c
}

// TestTablePeersCacheAgreesWithARecomputation: Peers caches its answer
// between changes; through random summaries, probes and the passing of
// time the cached answer equals one recomputed from scratch.
func TestTablePeersCacheAgreesWithARecomputation(t *testing.T) {
	tb := NewTable("us-east", region.DefaultControlPlane())
	nodes := []string{"eu-1", "eu-2", "ap-1"}
	for _, n := range nodes {
		tb.Join(n, Meta{Region: map[byte]string{'e': "eu-west", 'a': "ap-east"}[n[0]], APIAddr: "http://" + n})
	}
	rng := rand.New(rand.NewPCG(1, 2))
	now := t0
	seq := uint64(0)
	for step := range 2000 {
		switch rng.IntN(4) {
		case 0:
			seq++
			tb.ObserveLoad(nodes[rng.IntN(len(nodes))], 0, seq, region.Load{Queued: rng.IntN(9), Outstanding: rng.IntN(99), Replicas: 2, Slots: 64}, now)
		case 1:
			tb.ObserveProbe([]string{"eu-west", "ap-east"}[rng.IntN(2)], time.Duration(50+rng.IntN(300))*time.Millisecond, rng.IntN(10) > 0, now)
		default:
			now = now.Add(time.Duration(rng.IntN(1500)) * time.Millisecond)
		}
		cached := tb.Peers(now)
		tb.version++ // force a recomputation
		fresh := tb.Peers(now)
		if !reflect.DeepEqual(cached, fresh) {
			t.Fatalf("step %d at %v: cached %+v, recomputed %+v", step, now.Sub(t0), cached, fresh)
		}
	}
}

// TestARestartedNodeIsHeardAtOnce: a node restarted under the same id
// starts its sequence over; its first summary is kept because its
// incarnation is higher, however long the old process ran, and the old
// process's digest is dropped (the new one is pulled whole). Late summaries
// of the old process are not; one of an earlier incarnation is kept only
// once the one held is stale (a clock stepped back across the restart).
func TestARestartedNodeIsHeardAtOnce(t *testing.T) {
	tb := NewTable("us-east", region.DefaultControlPlane())
	tb.Join("eu-1", Meta{Region: "eu-west", APIAddr: "http://eu-1"})
	const oldProcess, newProcess = 1_000, 2_000
	weekOfSummaries := uint64(7 * 24 * 3600 * 4) // every 250 ms for a week
	if !tb.ObserveLoad("eu-1", oldProcess, weekOfSummaries, region.Load{Queued: 50, Replicas: 4}, t0) {
		t.Fatal("the first summary was refused")
	}
	if !tb.ObserveDigest("eu-1", digest.New("eu-west", "eu-1", 900, 1000, 0.01), t0) {
		t.Fatal("the old process's digest was refused")
	}
	at := t0.Add(250 * time.Millisecond)
	if !tb.ObserveLoad("eu-1", newProcess, 1, region.Load{Queued: 1, Replicas: 4}, at) {
		t.Fatal("the restarted process's first summary was refused: it is ignored until its sequence passes the old one")
	}
	if tb.Digest("eu-1") != nil {
		t.Error("the old process's digest is still held after a restart")
	}
	if eu := tb.Peers(at)[0]; eu.Load.Queued != 1 {
		t.Errorf("peers see queue %d, want the new process's 1", eu.Load.Queued)
	}
	if tb.ObserveLoad("eu-1", oldProcess, weekOfSummaries+1, region.Load{Queued: 99}, at) {
		t.Error("a late summary of the old process replaced the new one")
	}
	if !tb.ObserveLoad("eu-1", newProcess, 2, region.Load{Queued: 2}, at.Add(250*time.Millisecond)) {
		t.Error("the new process's next summary was refused")
	}
	stale := at.Add(region.DefaultControlPlane().MaxDataAge + time.Second)
	if !tb.ObserveLoad("eu-1", oldProcess+1, 1, region.Load{Queued: 3}, stale) {
		t.Error("after the held summary went stale, a restart with a lower incarnation (clock stepped back) is still ignored")
	}
}

// TestAPeersClockOffsetIsMeasuredFromItsSummaries: a region whose clock
// runs 30 s ahead sends summaries that cross a 72 ms link (36 ms one way)
// and wait up to half a second more in the gossip queue; the least lag of
// recent ones gives its offset to within the queueing that never let up.
func TestAPeersClockOffsetIsMeasuredFromItsSummaries(t *testing.T) {
	tb := NewTable("us-east", region.DefaultControlPlane())
	tb.Join("eu-1", Meta{Region: "eu-west"})
	now := time.Unix(1_790_000_000, 0)
	for range 5 {
		tb.ObserveProbe("eu-west", 72*time.Millisecond, true, now)
	}
	if p := tb.Peers(now)[0]; p.ClockOffset != 0 {
		t.Fatalf("offset %v before any summary, want 0", p.ClockOffset)
	}
	const ahead = 30 * time.Second
	rng := rand.New(rand.NewPCG(1, 2))
	for seq := range uint64(40) {
		sent := now.Add(ahead) // by eu-west's clock
		queued := time.Duration(rng.Int64N(int64(500 * time.Millisecond)))
		if seq%8 == 3 {
			queued = time.Duration(rng.Int64N(int64(5 * time.Millisecond))) // now and then one goes at once
		}
		now = now.Add(36*time.Millisecond + queued)
		tb.ObserveLoad("eu-1", 1, seq+1, region.Load{}, now)
		tb.ObserveClock("eu-1", sent, now)
		now = now.Add(250 * time.Millisecond)
	}
	got := tb.Peers(now)[0].ClockOffset
	if d := got - ahead; d < -10*time.Millisecond || d > 10*time.Millisecond {
		t.Errorf("measured offset %v, want %v within 10 ms", got, ahead)
	}
}
