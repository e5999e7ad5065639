package policy

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"skywalker/internal/request"
)

// fastPrefill is a region of fast GPUs: 10 ms fixed + 20 µs per token, so
// a 4,096-token prefix costs about 92 ms to prefill.
var fastPrefill = PrefillProfile{Fixed: 10 * time.Millisecond, PerToken: 20 * time.Microsecond}

// exampleRequest is the worked example's request: 34 blocks of 128 tokens,
// the first 32 (4,096 tokens) a shared prefix.
func exampleRequest() *request.Request {
	blocks := make([]uint64, 34)
	for i := range blocks {
		blocks[i] = uint64(i + 1)
	}
	return &request.Request{ID: "r1", Region: "us-east", PromptTokens: 34 * 128, Blocks: blocks, BlockTokens: 128}
}

// busyReplicas are n replicas each at their in-flight cap of 8.
func busyReplicas(n int) []Replica {
	rs := make([]Replica, n)
	for i := range rs {
		rs[i] = Replica{Name: fmt.Sprintf("r%d", i), Healthy: true, Running: 8, InFlight: 8, MaxInFlight: 8}
	}
	return rs
}

// exampleView is the seed's worked example: us-east has 30 queued requests
// at ~25 ms each and no cached prefix; eu-west (RTT 72 ms) has 2 queued and
// the 4,096-token prefix warm.
func exampleView() *View {
	return &View{
		Local: LocalRegion{
			Name: "us-east", Jurisdiction: "us", Replicas: busyReplicas(4),
			Queued: 30, PerRequestWait: 25 * time.Millisecond, Prefill: fastPrefill,
		},
		Peers: []PeerRegion{{
			Name: "eu-west", Jurisdiction: "eu", Healthy: true, DataAge: 300 * time.Millisecond,
			RTT: 72 * time.Millisecond, GateOpen: true, QueueWait: 50 * time.Millisecond, Queued: 2,
			Replicas: 4, Slots: 32, Outstanding: 34, PrefixBlocks: 32, Prefill: fastPrefill,
		}, {
			Name: "ap-east", Jurisdiction: "ap", Healthy: true, DataAge: 300 * time.Millisecond,
			RTT: 160 * time.Millisecond, GateOpen: false, GateReason: "rtt 160ms > 120ms", QueueWait: 0,
			Replicas: 4, Slots: 32, Outstanding: 0, Prefill: fastPrefill,
		}},
	}
}

// shortQueue turns the example's us-east into a lightly loaded region: no
// queue, and replica 1 has room.
func shortQueue(v *View) {
	v.Local.Queued = 0
	v.Local.Replicas[1].InFlight, v.Local.Replicas[1].Running = 2, 2
}

func TestWorkedExample(t *testing.T) {
	type want struct {
		action Action
		region string
		reason Reason
	}
	tests := []struct {
		name   string
		policy Policy
		modify func(*View, *request.Request)
		want   want
	}{
		{"skywalker sends the request to the warm, short eu-west queue", NewSkywalker(DefaultSkywalkerConfig()), nil,
			want{Forward, "eu-west", ReasonRemoteFaster}},
		{"skywalker keeps it local when the us-east queue is short", NewSkywalker(DefaultSkywalkerConfig()),
			func(v *View, _ *request.Request) { shortQueue(v) }, want{Dispatch, "us-east", ReasonLeastLoad}},
		{"skywalker reaches no peer whose estimate misses the request's objective", NewSkywalker(DefaultSkywalkerConfig()),
			func(v *View, _ *request.Request) { v.Local.Objective = 100 * time.Millisecond }, want{Hold, "us-east", ReasonBusy}},
		{"skywalker reaches a 250 ms link when the objective affords it", NewSkywalker(DefaultSkywalkerConfig()),
			func(v *View, _ *request.Request) {
				v.Local.Objective, v.Peers[0].RTT = 2*time.Second, 250*time.Millisecond
			},
			want{Forward, "eu-west", ReasonRemoteFaster}},
		{"skywalker never crosses a link above the operator's cap", NewSkywalker(capped(120 * time.Millisecond)),
			func(v *View, _ *request.Request) { v.Peers[0].RTT = 130 * time.Millisecond }, want{Hold, "us-east", ReasonBusy}},
		{"skywalker sends work to a peer that is itself offloading, its outflow priced as its load", NewSkywalker(DefaultSkywalkerConfig()),
			func(v *View, _ *request.Request) { v.Peers[0].Offloading = 2 }, want{Forward, "eu-west", ReasonRemoteFaster}},
		{"skywalker never crosses a closed gate", NewSkywalker(DefaultSkywalkerConfig()),
			func(v *View, _ *request.Request) { v.Peers[0].GateOpen = false }, want{Hold, "us-east", ReasonBusy}},
		{"skywalker treats stale data as unavailable", NewSkywalker(DefaultSkywalkerConfig()),
			func(v *View, _ *request.Request) { v.Peers[0].DataAge = 5 * time.Second }, want{Hold, "us-east", ReasonBusy}},
		{"skywalker honours residency", NewSkywalker(DefaultSkywalkerConfig()),
			func(_ *View, r *request.Request) { r.Residency = "us" }, want{Hold, "us-east", ReasonBusy}},
		{"skywalker never re-forwards a forwarded request", NewSkywalker(DefaultSkywalkerConfig()),
			func(_ *View, r *request.Request) { r.Forwarded = true }, want{Hold, "us-east", ReasonBusy}},
		{"skywalker ignores a remote prefix shorter than the minimum", NewSkywalker(DefaultSkywalkerConfig()),
			func(v *View, _ *request.Request) { shortQueue(v); v.Peers[0].PrefixBlocks = 15 }, want{Dispatch, "us-east", ReasonLeastLoad}},
		{"skywalker serves an eu-only request in eu even when local is idle", NewSkywalker(DefaultSkywalkerConfig()),
			func(v *View, r *request.Request) { shortQueue(v); r.Residency = "eu" }, want{Forward, "eu-west", ReasonResidency}},
		{"skywalker rejects what no region may serve", NewSkywalker(DefaultSkywalkerConfig()),
			func(_ *View, r *request.Request) { r.Residency = "cn" }, want{Reject, "us-east", ReasonNoRegion}},
		{"skylb forwards when no local replica is free and eu-west's queue is shorter", NewSkyLB(DefaultSkywalkerConfig()), nil,
			want{Forward, "eu-west", ReasonLocalBusy}},
		{"skylb stays local whenever a replica is free", NewSkyLB(DefaultSkywalkerConfig()),
			func(v *View, _ *request.Request) { shortQueue(v) }, want{Dispatch, "us-east", ReasonLeastLoad}},
		{"skylb holds when no peer has a shorter queue", NewSkyLB(DefaultSkywalkerConfig()),
			func(v *View, _ *request.Request) { v.Peers[0].Queued = 40 }, want{Hold, "us-east", ReasonBusy}},
		{"skylb respects the gate", NewSkyLB(DefaultSkywalkerConfig()),
			func(v *View, _ *request.Request) { v.Peers[0].GateOpen = false }, want{Hold, "us-east", ReasonBusy}},
		{"local-least-load pushes into a busy local engine rather than leave the region", LocalLeastLoad{}, nil,
			want{Dispatch, "us-east", ReasonLeastLoad}},
		{"local-least-load rejects a request it may not serve", LocalLeastLoad{},
			func(_ *View, r *request.Request) { r.Residency = "eu" }, want{Reject, "us-east", ReasonNoRegion}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, req := exampleView(), exampleRequest()
			if tc.modify != nil {
				tc.modify(v, req)
			}
			d := tc.policy.Route(req, v)
			if d.Action != tc.want.action || d.Region != tc.want.region || d.Reason != tc.want.reason {
				t.Errorf("got %s to %s (%s), want %s to %s (%s)", d.Action, d.Region, d.Reason, tc.want.action, tc.want.region, tc.want.reason)
			}
		})
	}
}

// capped is the default configuration with the operator's WAN cap set.
func capped(rtt time.Duration) SkywalkerConfig {
	cfg := DefaultSkywalkerConfig()
	cfg.MaxWANRTT = rtt
	return cfg
}

// A request forwarded in is placed by the same rule as a local one: a
// replica holding its whole long document is worth a short wait, where
// the receiver's old rule took any replica with room and prefilled the
// document cold.
func TestAForwardedRequestIsPlacedByTheLocalRule(t *testing.T) {
	blocks := make([]uint64, 128) // a 16k-token document
	for i := range blocks {
		blocks[i] = uint64(i + 1)
	}
	req := &request.Request{ID: "doc", PromptTokens: 128 * 128, Blocks: blocks, BlockTokens: 128, Forwarded: true}
	v := &View{Local: LocalRegion{Name: "eu-west", Jurisdiction: "eu", PerRequestWait: 40 * time.Millisecond,
		Prefill: PrefillProfile{Fixed: 10 * time.Millisecond, PerToken: 85 * time.Microsecond}, Replicas: []Replica{
			{Name: "holder", Healthy: true, Running: 8, InFlight: 8, MaxInFlight: 8, PrefixBlocks: 128, IndexedBlocks: 128},
			{Name: "cold", Healthy: true, Running: 2, InFlight: 2, MaxInFlight: 8},
		}}}
	sw := NewSkywalker(DefaultSkywalkerConfig())
	d := sw.Route(req, v)
	if d.Action == Dispatch && d.Replica == 1 {
		t.Fatalf("forwarded-in request dispatched cold to %q: %+v", v.Local.Replicas[1].Name, d)
	}
	if d.Action != Hold || d.Reason != ReasonBusy {
		t.Errorf("got %+v, want it held for the replica that holds its document", d)
	}
	v.Local.Replicas[0].InFlight, v.Local.Replicas[0].Running = 4, 4 // the holder has room
	if d := sw.Route(req, v); d.Action != Dispatch || d.Replica != 0 || d.Reason != ReasonForwarded {
		t.Errorf("got %+v, want dispatch to the holder, reason %s", d, ReasonForwarded)
	}
}

// A cold 16k-token document costs what it evicts where the cache is full
// (16,384 tokens × hit share 0.6 × 20 µs ≈ 197 ms of re-prefill others
// will pay), so it goes where the cache has room: to the emptier-cached
// replica though the full one is less loaded, and to a peer with room
// though it is 20 ms away. With nothing reused (hit share 0), or the
// same eviction wherever it goes, the old choice stands. The previous
// rule, which priced no eviction, chose "full" and stayed local in every
// case.
func TestAColdLongPromptGoesWhereTheCacheHasRoom(t *testing.T) {
	blocks := make([]uint64, 128)
	for i := range blocks {
		blocks[i] = uint64(1000 + i)
	}
	req := &request.Request{ID: "doc", Region: "us-east", PromptTokens: 128 * 128, Blocks: blocks, BlockTokens: 128}
	const cache = 100_000 // tokens; full at 781 blocks of 128
	full := Replica{Name: "full", Healthy: true, Running: 1, InFlight: 1, MaxInFlight: 8, CacheTokens: cache, IndexedBlocks: cache / 128}
	room := Replica{Name: "room", Healthy: true, Running: 2, InFlight: 2, MaxInFlight: 8, CacheTokens: cache}
	peer := PeerRegion{Name: "eu-west", Jurisdiction: "eu", Healthy: true, GateOpen: true, RTT: 20 * time.Millisecond,
		Prefill: fastPrefill, FreeCacheTokens: cache, HitShare: 0.6}
	tests := []struct {
		name     string
		replicas []Replica
		hitShare float64
		peerFull bool
		want     Decision
	}{
		{"in the region, to the replica with room", []Replica{full, room}, 0.6, false, Decision{Action: Dispatch, Replica: 1}},
		{"nothing is reused: the less loaded replica", []Replica{full, room}, 0, false, Decision{Action: Dispatch, Replica: 0}},
		{"the local cache is full: to the peer with room", []Replica{full}, 0.6, false, Decision{Action: Forward, Peer: 0}},
		{"the local cache has room: stay", []Replica{room}, 0.6, false, Decision{Action: Dispatch, Replica: 0}},
		{"both caches are full: stay (the peer is farther)", []Replica{full}, 0.6, true, Decision{Action: Dispatch, Replica: 0}},
	}
	sw := NewSkywalker(DefaultSkywalkerConfig())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := peer // as loaded as the local region: only the caches differ
			p.Replicas, p.Slots, p.Outstanding = len(tt.replicas), 8*len(tt.replicas), 0
			for _, r := range tt.replicas {
				p.Outstanding += r.Load()
			}
			if tt.peerFull {
				p.FreeCacheTokens = 0
			}
			v := &View{Local: LocalRegion{Name: "us-east", Jurisdiction: "us", Prefill: fastPrefill, HitShare: tt.hitShare,
				Replicas: tt.replicas}, Peers: []PeerRegion{p}}
			d := sw.Route(req, v)
			if d.Action != tt.want.Action || d.Replica != tt.want.Replica || d.Peer != tt.want.Peer {
				t.Errorf("got %s replica %d peer %d (%+v), want %s replica %d peer %d",
					d.Action, d.Replica, d.Peer, d, tt.want.Action, tt.want.Replica, tt.want.Peer)
			}
		})
	}
}

func TestEvictionCost(t *testing.T) {
	p := PrefillProfile{Fixed: 10 * time.Millisecond, PerToken: 100 * time.Microsecond}
	tests := []struct {
		uncached, free int
		hitShare       float64
		want           time.Duration
	}{
		{10_000, 0, 0.5, 500 * time.Millisecond},     // 10k evicted, half of it reused
		{10_000, 4_000, 0.5, 300 * time.Millisecond}, // the free room takes 4k
		{10_000, 20_000, 0.9, 0},                     // it all fits
		{10_000, 0, 0, 0},                            // nothing is reused
		{10_000, -5, 2, time.Second},                 // out-of-range inputs clamp
		{0, 0, 1, 0},
	}
	for _, tt := range tests {
		if got := EvictionCost(tt.uncached, tt.free, tt.hitShare, p); got != tt.want {
			t.Errorf("EvictionCost(%d, %d, %v) = %v, want %v", tt.uncached, tt.free, tt.hitShare, got, tt.want)
		}
	}
}

func TestSkywalkerEstimatesFollowTheRule(t *testing.T) {
	v, req := exampleView(), exampleRequest()
	d := NewSkywalker(DefaultSkywalkerConfig()).Route(req, v)
	// eu-west: RTT 72 + queue 50 + prefill of the 256 uncached tokens.
	want := 72*time.Millisecond + 50*time.Millisecond + fastPrefill.Time(256)
	if d.Estimate != want {
		t.Errorf("estimate %v, want %v", d.Estimate, want)
	}
	shortQueue(v)
	d = NewSkywalker(DefaultSkywalkerConfig()).Route(req, v)
	if want := fastPrefill.Time(34 * 128); d.Estimate != want {
		t.Errorf("local estimate %v, want the full prefill %v", d.Estimate, want)
	}
}

func TestSkywalkerPrefersTheLongestPrefixWithinTheLoadMargin(t *testing.T) {
	rs := []Replica{
		{Name: "a", Healthy: true, InFlight: 1, MaxInFlight: 64},
		{Name: "b", Healthy: true, InFlight: 4, MaxInFlight: 64, PrefixBlocks: 20},
		{Name: "c", Healthy: true, InFlight: 7, MaxInFlight: 64, PrefixBlocks: 34},
	}
	v := &View{Local: LocalRegion{Name: "us-east", Replicas: rs, Prefill: fastPrefill}}
	cfg := DefaultSkywalkerConfig()
	cfg.LoadMargin = 4
	d := NewSkywalker(cfg).Route(exampleRequest(), v)
	// c holds more but is 6 above the least loaded (margin 4); b is within.
	if d.Action != Dispatch || d.Replica != 1 || d.Reason != ReasonPrefix {
		t.Errorf("got %+v, want replica b for its prefix", d)
	}
}

func TestSkywalkerWaitsForTheReplicaHoldingALongPrefix(t *testing.T) {
	// a has a free slot but is cold; b is at its cap but holds all 34
	// blocks. A slot frees on b every 2 × 10 ms, far less than the 97 ms
	// prefill a needs, and the two are about as congested.
	rs := []Replica{
		{Name: "a", Healthy: true, InFlight: 7, MaxInFlight: 8},
		{Name: "b", Healthy: true, InFlight: 8, MaxInFlight: 8, PrefixBlocks: 34},
	}
	v := &View{Local: LocalRegion{Name: "us-east", Replicas: rs, Prefill: fastPrefill, PerRequestWait: 10 * time.Millisecond}}
	if d := NewSkywalker(DefaultSkywalkerConfig()).Route(exampleRequest(), v); d.Action != Hold {
		t.Errorf("got %s to %d, want hold for b", d.Action, d.Replica)
	}
	v.Local.PerRequestWait = time.Second // b frees too slowly: take a now
	if d := NewSkywalker(DefaultSkywalkerConfig()).Route(exampleRequest(), v); d.Action != Dispatch || d.Replica != 0 {
		t.Errorf("got %s to %d, want dispatch to a", d.Action, d.Replica)
	}
}

func TestASaturatedRegionWaitsForTheReplicaHoldingThePrefix(t *testing.T) {
	// The same two replicas, b freeing a slot only every 2 s: with nobody
	// held, a's free slot is worth the cold prefill; once as many requests
	// as replicas are held, every slot that frees is taken at once anyway,
	// and a cache miss only costs the region prefill.
	rs := []Replica{
		{Name: "a", Healthy: true, InFlight: 7, MaxInFlight: 8},
		{Name: "b", Healthy: true, InFlight: 8, MaxInFlight: 8, PrefixBlocks: 34},
	}
	tests := []struct {
		held int
		want Action
	}{
		{0, Dispatch},
		{1, Dispatch}, // half saturated: b's slot wait halves to 1 s, still worse than 97 ms of prefill
		{2, Hold},
		{40, Hold},
	}
	for _, tc := range tests {
		v := &View{Local: LocalRegion{Name: "us-east", Replicas: rs, Prefill: fastPrefill, PerRequestWait: time.Second, Held: tc.held}}
		if d := NewSkywalker(DefaultSkywalkerConfig()).Route(exampleRequest(), v); d.Action != tc.want {
			t.Errorf("with %d held: got %s to %d, want %s", tc.held, d.Action, d.Replica, tc.want)
		}
	}
}

func TestSkywalkerHoldsWhileEngineQueuesAreNonEmpty(t *testing.T) {
	rs := []Replica{{Name: "a", Healthy: true, Waiting: 1, Running: 4, InFlight: 5}}
	v := &View{Local: LocalRegion{Name: "us-east", Replicas: rs, Prefill: fastPrefill}}
	if d := NewSkywalker(DefaultSkywalkerConfig()).Route(exampleRequest(), v); d.Action != Hold {
		t.Errorf("got %s, want hold: the engine already has a waiting queue", d.Action)
	}
}

func TestRoundRobinCyclesOverEveryReplicaOfEveryRegion(t *testing.T) {
	v := exampleView()
	v.Local.Replicas = busyReplicas(2)
	v.Peers = v.Peers[:1]
	v.Peers[0].Replicas = 2
	p := NewRoundRobin(DefaultSkywalkerConfig())
	var got []string
	for range 8 {
		d := p.Route(exampleRequest(), v)
		got = append(got, fmt.Sprintf("%s/%d", d.Region, d.Replica))
	}
	want := "[us-east/0 us-east/1 eu-west/0 eu-west/0 us-east/0 us-east/1 eu-west/0 eu-west/0]"
	if fmt.Sprint(got) != want {
		t.Errorf("got %v, want %s", got, want)
	}
}

func TestLeastLoadComparesPerReplicaLoad(t *testing.T) {
	v := exampleView() // us-east replicas carry 8 each; eu-west 34/4 = 8.5
	v.Peers[1].Healthy = false
	if d := NewLeastLoad(DefaultSkywalkerConfig()).Route(exampleRequest(), v); d.Region != "us-east" {
		t.Errorf("got %s, want us-east (8 < 8.5)", d.Region)
	}
	v.Peers[0].Outstanding = 20 // 5 per replica
	if d := NewLeastLoad(DefaultSkywalkerConfig()).Route(exampleRequest(), v); d.Region != "eu-west" {
		t.Errorf("got %s, want eu-west (5 < 8)", d.Region)
	}
	// ap-east is idle but its gate is closed: global baselines ignore gates.
	v.Peers[1].Healthy = true
	if d := NewLeastLoad(DefaultSkywalkerConfig()).Route(exampleRequest(), v); d.Region != "ap-east" {
		t.Errorf("got %s, want ap-east (idle)", d.Region)
	}
}

func TestConsistentHashIsStickyAndBounded(t *testing.T) {
	idle := func() *View {
		v := exampleView()
		for i := range v.Local.Replicas {
			v.Local.Replicas[i].InFlight, v.Local.Replicas[i].Running = 0, 0
		}
		v.Local.Queued = 0
		v.Peers[0].Outstanding = 0
		return v
	}
	p := NewConsistentHash(DefaultConsistentHashConfig(), DefaultSkywalkerConfig())
	seen := map[string]bool{}
	for i := range 200 {
		req := exampleRequest()
		req.Session = fmt.Sprintf("user-%d", i)
		first := p.Route(req, idle())
		again := p.Route(req, idle())
		if first != again {
			t.Fatalf("session %s moved: %+v then %+v", req.Session, first, again)
		}
		seen[fmt.Sprintf("%s/%d", first.Region, first.Replica)] = true
	}
	if len(seen) < 5 {
		t.Errorf("200 sessions landed on only %d members", len(seen))
	}
	// Bounded loads: overload the session's member and it must move.
	req := exampleRequest()
	req.Session = "user-7"
	v := idle()
	d := p.Route(req, v)
	if d.Action == Dispatch {
		v.Local.Replicas[d.Replica].InFlight = 50
	} else {
		v.Peers[d.Peer].Outstanding = 200
	}
	if moved := p.Route(req, v); moved == d {
		t.Errorf("member over the load bound kept the session: %+v", moved)
	}
}

func TestConsistentHashRingIsTheSameFromEveryRegion(t *testing.T) {
	mk := func(local string, peers ...string) *View {
		v := &View{Local: LocalRegion{Name: local, Replicas: make([]Replica, 2)}}
		for i := range v.Local.Replicas {
			v.Local.Replicas[i].Healthy = true
		}
		for _, name := range peers {
			v.Peers = append(v.Peers, PeerRegion{Name: name, Healthy: true, Replicas: 2, Slots: 2})
		}
		return v
	}
	a := NewConsistentHash(DefaultConsistentHashConfig(), DefaultSkywalkerConfig())
	b := NewConsistentHash(DefaultConsistentHashConfig(), DefaultSkywalkerConfig())
	for i := range 50 {
		req := &request.Request{Session: fmt.Sprintf("s%d", i)}
		da := a.Route(req, mk("us-east", "eu-west"))
		db := b.Route(req, mk("eu-west", "us-east"))
		if da.Region != db.Region {
			t.Fatalf("session %s: us-east sends it to %s, eu-west to %s", req.Session, da.Region, db.Region)
		}
	}
}

func TestCacheAware(t *testing.T) {
	p := NewCacheAware(DefaultCacheAwareConfig(), DefaultSkywalkerConfig())
	v := exampleView() // eu-west holds 32 of 34 blocks: 94% > 50%
	if d := p.Route(exampleRequest(), v); d.Region != "eu-west" || d.Reason != ReasonCacheHit {
		t.Errorf("got %s (%s), want eu-west by cache hit", d.Region, d.Reason)
	}
	v.Peers[0].PrefixBlocks = 10 // 29%: below the threshold, least load wins
	if d := p.Route(exampleRequest(), v); d.Reason != ReasonLeastLoad {
		t.Errorf("got %s, want least-load", d.Reason)
	}
	v.Peers[0].PrefixBlocks = 34
	v.Peers[0].Outstanding = 400 // 100 per replica vs 8 and 0: imbalanced
	if d := p.Route(exampleRequest(), v); d.Reason != ReasonImbalance || d.Region != "ap-east" {
		t.Errorf("got %s (%s), want ap-east by imbalance", d.Region, d.Reason)
	}
}

// TestNoPolicyBreaksTheHardRules routes random requests over random views
// with every policy and checks what must always hold: residency, health,
// one hop, and for the WAN-aware policies freshness, and the gate and the
// threshold for every request that could be served locally.
func TestNoPolicyBreaksTheHardRules(t *testing.T) {
	rng := rand.New(rand.NewPCG(42, 42))
	jurisdictions := []string{"us", "eu", "ap"}
	for _, name := range Names {
		p, err := New(name, DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		for trial := range 2000 {
			req, v := randomCase(rng, jurisdictions)
			d := p.Route(req, v)
			where := fmt.Sprintf("%s trial %d: %+v", name, trial, d)
			switch d.Action {
			case Dispatch:
				if d.Replica < 0 || d.Replica >= len(v.Local.Replicas) || !v.Local.Replicas[d.Replica].Healthy {
					t.Fatalf("%s: dispatched to a missing or unhealthy replica", where)
				}
				if !req.AllowedIn(v.Local.Jurisdiction) {
					t.Fatalf("%s: served a %q request in %q", where, req.Residency, v.Local.Jurisdiction)
				}
			case Forward:
				peer := v.Peers[d.Peer]
				if req.Forwarded {
					t.Fatalf("%s: forwarded a request twice", where)
				}
				if !peer.Healthy || !req.AllowedIn(peer.Jurisdiction) || d.Region != peer.Name {
					t.Fatalf("%s: forwarded to an unhealthy or non-resident peer %+v", where, peer)
				}
				wanAware := name == "skywalker" || name == "skylb"
				if wanAware && peer.DataAge > 2*time.Second {
					t.Fatalf("%s: forwarded on stale data %+v", where, peer)
				}
				// The gate and the operator's cap apply while the request
				// could stay; one the local region may not serve (its
				// residency, or no replica of its model) may cross them.
				// SkyWalker reaches only a peer whose estimate fits the
				// objective, while a local replica could serve it.
				stays := StayingPossible(req, v)
				if wanAware && stays && (!peer.GateOpen || peer.RTT > DefaultSkywalkerConfig().MaxWANRTT) {
					t.Fatalf("%s: crossed a closed or slow link %+v", where, peer)
				}
				if name == "skywalker" && stays && anyHealthy(v.Local.Replicas) && v.Local.Objective > 0 && d.Estimate > v.Local.Objective {
					t.Fatalf("%s: forwarded beyond the objective %v", where, v.Local.Objective)
				}
			}
		}
	}
}

func randomCase(rng *rand.Rand, jurisdictions []string) (*request.Request, *View) {
	req := exampleRequest()
	if rng.IntN(4) == 0 {
		req.Residency = jurisdictions[rng.IntN(3)]
	}
	req.Forwarded = rng.IntN(5) == 0
	req.Session = fmt.Sprint(rng.IntN(10))
	v := &View{Local: LocalRegion{Name: "local", Jurisdiction: jurisdictions[rng.IntN(3)], Queued: rng.IntN(20),
		PerRequestWait: time.Duration(rng.IntN(50)) * time.Millisecond, Prefill: fastPrefill,
		Objective: time.Duration(rng.IntN(3)) * time.Second}}
	for i := range rng.IntN(5) {
		v.Local.Replicas = append(v.Local.Replicas, Replica{Name: fmt.Sprint(i), Healthy: rng.IntN(4) > 0,
			Waiting: rng.IntN(2), Running: rng.IntN(8), InFlight: rng.IntN(10), MaxInFlight: 8, PrefixBlocks: rng.IntN(35)})
	}
	for i := range rng.IntN(4) {
		v.Peers = append(v.Peers, PeerRegion{Name: fmt.Sprintf("peer%d", i), Jurisdiction: jurisdictions[rng.IntN(3)],
			Healthy: rng.IntN(4) > 0, DataAge: time.Duration(rng.IntN(3000)) * time.Millisecond,
			RTT: time.Duration(rng.IntN(1500)) * time.Millisecond, GateOpen: rng.IntN(3) > 0,
			QueueWait: time.Duration(rng.IntN(1000)) * time.Millisecond, Queued: rng.IntN(30), Replicas: rng.IntN(4),
			Slots: 16, Outstanding: rng.IntN(40), PrefixBlocks: rng.IntN(35), Prefill: fastPrefill})
	}
	return req, v
}

func TestNewKnowsEveryName(t *testing.T) {
	for _, name := range Names {
		p, err := New(name, DefaultConfig())
		if err != nil || p.Name() != name {
			t.Errorf("New(%q) = %v, %v", name, p, err)
		}
	}
	if _, err := New("random", DefaultConfig()); err == nil {
		t.Error("unknown policy name must fail")
	}
}

func TestEstimators(t *testing.T) {
	e := NewEWMA(0.5)
	if e.Seen() || e.Value() != 0 {
		t.Error("a fresh EWMA has no value")
	}
	e.Observe(100 * time.Millisecond)
	e.Observe(200 * time.Millisecond)
	if e.Value() != 150*time.Millisecond {
		t.Errorf("EWMA = %v, want 150ms", e.Value())
	}
	if got := PerRequestWait(800*time.Millisecond, 32); got != 25*time.Millisecond {
		t.Errorf("PerRequestWait = %v, want 25ms", got)
	}
	p := PrefillProfile{Fixed: time.Millisecond, PerToken: time.Microsecond, PerTokenSquared: 0.001}
	if got := p.Time(1000); got != time.Millisecond+time.Microsecond {
		t.Errorf("Time(1000) = %v, want max(1ms, 1000·1µs + 1000²·0.001ns)", got)
	}
	if got := p.Time(100); got != time.Millisecond {
		t.Errorf("Time(100) = %v, want the 1ms floor of one step", got)
	}
	if p.Time(0) != 0 {
		t.Error("no uncached tokens, no prefill")
	}
}

func TestLocalQueueWait(t *testing.T) {
	l := LocalRegion{Replicas: busyReplicas(2), Queued: 30, PerRequestWait: 25 * time.Millisecond}
	if got := l.QueueWait(); got != 750*time.Millisecond {
		t.Errorf("30 queued at 25ms: %v", got)
	}
	l.Queued = 0
	if got := l.QueueWait(); got != 25*time.Millisecond {
		t.Errorf("busy, nobody queued: %v, want one slot's wait", got)
	}
	l.Replicas[0].InFlight = 1
	if got := l.QueueWait(); got != 0 {
		t.Errorf("a replica has room: %v, want 0", got)
	}
}

// TestAResidentRequestCrossesAClosedGate: the gate keeps requests off slow
// links while they could stay; a request only a peer may serve goes there
// over a closed gate (slow beats never), but never to a stale peer.
func TestAResidentRequestCrossesAClosedGate(t *testing.T) {
	for _, name := range []string{"skywalker", "skylb"} {
		p, _ := New(name, DefaultConfig())
		req := exampleRequest()
		req.Residency = "eu"
		v := &View{Local: LocalRegion{Name: "us-east", Jurisdiction: "us", Replicas: []Replica{{Name: "a", Healthy: true}}, Prefill: fastPrefill},
			Peers: []PeerRegion{{Name: "eu-west", Jurisdiction: "eu", Healthy: true, RTT: 180 * time.Millisecond, GateOpen: false,
				GateReason: "rtt sample 190ms over 120ms", Replicas: 2, Slots: 16, DataAge: 300 * time.Millisecond, Prefill: fastPrefill}}}
		if d := p.Route(req, v); d.Action != Forward || d.Region != "eu-west" {
			t.Errorf("%s: an EU-resident request at us-east: %+v, want it forwarded to eu-west over the closed gate", name, d)
		}
		v.Peers[0].DataAge = 5 * time.Second
		if d := p.Route(req, v); d.Action == Forward {
			t.Errorf("%s: forwarded to a peer whose data is 5 s old: %+v", name, d)
		}
		req.Residency = ""
		v.Peers[0].DataAge = 300 * time.Millisecond
		v.Local.Replicas[0].Waiting = 3 // busy: a peer would be welcome, but not over a closed gate
		if d := p.Route(req, v); d.Action == Forward {
			t.Errorf("%s: a request that may stay crossed a closed gate: %+v", name, d)
		}
	}
}

// A request of a LoRA adapter goes where its adapter is resident rather
// than pay its load on an idler replica; where it is resident nowhere it
// is charged the load everywhere (and balanced as usual); a replica whose
// every adapter slot serves other adapters has no room for it, and with
// no other it is held.
func TestARequestGoesWhereItsAdapterIsResident(t *testing.T) {
	s := NewSkywalker(DefaultSkywalkerConfig())
	req := &request.Request{ID: "a", Region: "us-east", PromptTokens: 256, BlockTokens: 128, Blocks: []uint64{7, 8}, Adapter: "sql-lora"}
	view := func(resident, blocked [2]bool) *View {
		v := &View{Local: LocalRegion{Name: "us-east", Jurisdiction: "us", Prefill: fastPrefill, PerRequestWait: 20 * time.Millisecond,
			AdapterLoad: 200 * time.Millisecond}}
		for i := range 2 {
			v.Local.Replicas = append(v.Local.Replicas, Replica{Name: fmt.Sprintf("r%d", i), Healthy: true, MaxInFlight: 8,
				AdapterResident: resident[i], AdapterBlocked: blocked[i]})
		}
		v.Local.Replicas[1].InFlight, v.Local.Replicas[1].Running = 3, 3 // r1 is the busier
		return v
	}
	for _, tc := range []struct {
		name              string
		resident, blocked [2]bool
		want              Action
		replica           int
	}{
		{"resident on the busier replica: it goes there", [2]bool{false, true}, [2]bool{}, Dispatch, 1},
		{"resident nowhere: the idler replica", [2]bool{}, [2]bool{}, Dispatch, 0},
		{"the idler replica's slots all serve other adapters", [2]bool{}, [2]bool{true, false}, Dispatch, 1},
		{"no replica has a slot for it: held", [2]bool{}, [2]bool{true, true}, Hold, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := s.Route(req, view(tc.resident, tc.blocked))
			if d.Action != tc.want || d.Action == Dispatch && d.Replica != tc.replica {
				t.Errorf("decision %+v, want %v on replica %d", d, tc.want, tc.replica)
			}
		})
	}
}
