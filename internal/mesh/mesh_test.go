package mesh

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"skywalker/internal/region"

	"skywalker/internal/digest"
	"skywalker/internal/testwait"
)

// fakeSource is a node's published state, settable by the test.
type fakeSource struct {
	mu     sync.Mutex
	load   region.Load
	digest *digest.Digest
}

func (f *fakeSource) Load() region.Load { f.mu.Lock(); defer f.mu.Unlock(); return f.load }
func (f *fakeSource) Digest() *digest.Digest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.digest
}
func (f *fakeSource) set(l region.Load)          { f.mu.Lock(); f.load = l; f.mu.Unlock() }
func (f *fakeSource) setDigest(d *digest.Digest) { f.mu.Lock(); f.digest = d; f.mu.Unlock() }

var testKey = base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))

type testNode struct {
	*Mesh
	src *fakeSource
}

// cluster starts one node per entry of regions on loopback with emulated
// links, all joined through the first.
func cluster(t *testing.T, links *Links, regions ...string) []*testNode {
	t.Helper()
	var nodes []*testNode
	for i, region := range regions {
		n := startNode(t, links, region, fmt.Sprintf("%s-%d", region, i), func(c *Config) {})
		nodes = append(nodes, n)
		if i > 0 {
			if _, err := n.Join([]string{nodes[0].Addr()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return nodes
}

func startNode(t *testing.T, links *Links, region, name string, tweak func(*Config)) *testNode {
	t.Helper()
	tr, err := links.Transport(region)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig(region)
	cfg.NodeID, cfg.Preset, cfg.Keys, cfg.Transport = name, "local", []string{testKey}, tr
	cfg.Jurisdiction, cfg.APIAddr = region[:2], "http://"+name+":9000"
	cfg.Control.LoadInterval, cfg.Control.DigestInterval, cfg.Control.ProbeInterval = 100*time.Millisecond, 300*time.Millisecond, 100*time.Millisecond
	cfg.Control.ReopenSamples = 3
	// An operator's cap between the two links, so that the gate tests see
	// one link under it and one over it (the default is a 1 s ceiling).
	cfg.Control.MaxWANRTT = 120 * time.Millisecond
	tweak(&cfg)
	src := &fakeSource{}
	m, err := New(cfg, src)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Shutdown() })
	return &testNode{Mesh: m, src: src}
}

// patience bounds every wait in these tests: generous, because a busy
// machine delays goroutines; how long things took is logged, not judged.
const patience = 30 * time.Second

// eventually waits for cond (see testwait.Eventually).
func eventually(t *testing.T, what string, cond func() bool) time.Duration {
	t.Helper()
	return testwait.Eventually(t, patience, what, func() (bool, string) { return cond(), "condition false" })
}

func peer(m *Mesh, name string) (region.Peer, bool) {
	for _, p := range m.Peers() {
		if p.Region == name {
			return p, true
		}
	}
	return region.Peer{}, false
}

func threeRegions() *Links {
	l := NewLinks()
	l.SetRTT("us-east", "eu-west", 72*time.Millisecond)
	l.SetRTT("us-east", "ap-east", 160*time.Millisecond)
	l.SetRTT("eu-west", "ap-east", 180*time.Millisecond)
	return l
}

func TestMembershipLoadAndDigestsPropagate(t *testing.T) {
	nodes := cluster(t, threeRegions(), "us-east", "eu-west", "ap-east", "eu-west")
	us, eu := nodes[0], nodes[1]
	eventually(t, "membership converges", func() bool {
		for _, n := range nodes {
			if len(n.Members()) != 4 {
				return false
			}
		}
		return true
	})

	eu.src.set(region.Load{Queued: 7, Replicas: 4, Slots: 32, Outstanding: 20, QueueWait: 175 * time.Millisecond})
	nodes[3].src.set(region.Load{Queued: 3, Replicas: 4, Slots: 32, Outstanding: 10, QueueWait: 75 * time.Millisecond})
	took := eventually(t, "load reaches us-east", func() bool {
		p, ok := peer(us.Mesh, "eu-west")
		return ok && p.Nodes == 2 && p.Load.Queued == 10 && p.Load.Outstanding == 30
	})
	t.Logf("load summary reached the peer in %v", took)
	us.mu.Lock()
	sampled := us.table.clocks["eu-west"] != nil && us.table.clocks["eu-west"].n > 0
	us.mu.Unlock()
	if !sampled {
		t.Error("no clock sample from eu-west's summaries: its clock offset cannot be measured")
	}
	p, _ := peer(us.Mesh, "eu-west")
	if p.ClockOffset < -time.Second || p.ClockOffset > time.Second {
		t.Errorf("eu-west, on this machine's clock, measured %v ahead", p.ClockOffset)
	}
	if p.Load.Replicas != 4 || p.Load.QueueWait != 175*time.Millisecond || len(p.APIAddrs) != 2 || p.Jurisdiction != "eu" {
		t.Errorf("aggregated peer %+v: want replicas and queue wait as the largest report, both API addresses", p)
	}

	d := digest.New("eu-west", "eu-west-1", 1, 10_000, 0.01)
	blocks := make([]uint64, 50)
	for i := range blocks {
		blocks[i] = uint64(i)*7919 + 1
		d.Add(blocks[i])
	}
	eu.src.setDigest(d)
	took = eventually(t, "digest reaches us-east", func() bool {
		p, ok := peer(us.Mesh, "eu-west")
		return ok && p.Digest != nil && p.Digest.MatchLength(blocks) == 50
	})
	t.Logf("digest reached the peer in %v", took)

	// A new generation with more blocks travels as the bits it gained, to
	// the other regions' nodes only (eu-west-3 routes by its own digest).
	eventually(t, "every other region's node holds generation 1", func() bool {
		eu.mu.Lock()
		defer eu.mu.Unlock()
		return len(eu.sender.sentGen) == 2 && eu.sender.sentGen["us-east-0"] == 1 && eu.sender.sentGen["ap-east-2"] == 1
	})
	before := eu.Stats().BytesSent
	d2 := d.Clone()
	d2.Generation = 2
	more := append(blocks, 999_983, 999_979)
	d2.Add(999_983)
	d2.Add(999_979)
	eu.src.setDigest(d2)
	eventually(t, "digest delta reaches us-east", func() bool {
		p, ok := peer(us.Mesh, "eu-west")
		return ok && p.Digest != nil && p.Digest.Generation == 2 && p.Digest.MatchLength(more) == 52
	})
	full, _ := d2.MarshalBinary()
	if sent := eu.Stats().BytesSent - before; sent > int64(len(full)) {
		t.Errorf("publishing a two-block change cost %d bytes; the whole digest is %d: want a delta", sent, len(full))
	}
}

func TestRTTMatchesTheInjectedDelayAndGatesFollowIt(t *testing.T) {
	links := threeRegions()
	nodes := cluster(t, links, "us-east", "eu-west", "ap-east")
	us := nodes[0]
	for _, n := range nodes {
		n.src.set(region.Load{Replicas: 1, Slots: 8})
	}
	eventually(t, "gate to eu-west opens", func() bool {
		p, ok := peer(us.Mesh, "eu-west")
		return ok && p.GateOpen
	})
	// Let the averages settle: each link's estimate reaches most of its
	// injected delay (a busy machine can only add to it).
	for name, rtt := range map[string]time.Duration{"eu-west": 72 * time.Millisecond, "ap-east": 160 * time.Millisecond} {
		eventually(t, fmt.Sprintf("the RTT estimate to %s reaches 80%% of %v", name, rtt), func() bool {
			p, _ := peer(us.Mesh, name)
			return p.RTT >= rtt*8/10
		})
	}
	for _, want := range []struct {
		region string
		rtt    time.Duration
		open   bool
	}{{"eu-west", 72 * time.Millisecond, true}, {"ap-east", 160 * time.Millisecond, false}} {
		eventually(t, fmt.Sprintf("gate to %s open=%v", want.region, want.open), func() bool {
			p, _ := peer(us.Mesh, want.region)
			return p.GateOpen == want.open
		})
		p, _ := peer(us.Mesh, want.region)
		// A busy machine can only add to the emulated delay.
		t.Logf("%s: RTT estimate %v, injected %v", want.region, p.RTT, want.rtt)
		if p.RTT < want.rtt*8/10 {
			t.Errorf("%s: RTT estimate %v, injected %v: the estimate cannot be far below the delay", want.region, p.RTT, want.rtt)
		}
	}
	p, _ := peer(us.Mesh, "ap-east")
	if !strings.Contains(p.Gate, "over 120ms") {
		t.Errorf("ap-east gate reason %q should say the RTT is over the threshold", p.Gate)
	}

	links.SetRTT("us-east", "eu-west", 250*time.Millisecond)
	took := eventually(t, "gate closes when the link slows", func() bool {
		p, _ := peer(us.Mesh, "eu-west")
		return !p.GateOpen
	})
	t.Logf("gate closed %v after the delay jumped", took)
	links.SetRTT("us-east", "eu-west", 72*time.Millisecond)
	reopened := eventually(t, "gate reopens when the link recovers", func() bool {
		p, _ := peer(us.Mesh, "eu-west")
		return p.GateOpen
	})
	t.Logf("gate reopened %v after the delay recovered", reopened)
}

func TestKilledNodeLeavesTheView(t *testing.T) {
	nodes := cluster(t, threeRegions(), "us-east", "eu-west", "ap-east")
	for _, n := range nodes {
		n.src.set(region.Load{Replicas: 2, Slots: 16})
	}
	eventually(t, "ap-east healthy", func() bool {
		p, ok := peer(nodes[0].Mesh, "ap-east")
		return ok && p.Healthy
	})
	_ = nodes[2].Shutdown() // a crash: no leave message
	took := eventually(t, "crashed node disappears", func() bool {
		p, ok := peer(nodes[0].Mesh, "ap-east")
		return (!ok || !p.Healthy) && len(nodes[0].Members()) == 2
	})
	t.Logf("crashed node left the view in %v", took)
}

func TestStaleDataMeansUnavailable(t *testing.T) {
	nodes := cluster(t, NewLinks(), "us-east", "eu-west")
	nodes[1].src.set(region.Load{Replicas: 2, Slots: 16})
	eventually(t, "eu-west healthy", func() bool {
		p, ok := peer(nodes[0].Mesh, "eu-west")
		return ok && p.Healthy
	})
	// Stop eu-west's publishing without it leaving the membership.
	close(nodes[1].stop)
	nodes[1].closed.Store(true)
	nodes[1].wg.Wait()
	eventually(t, "silent region becomes unavailable", func() bool {
		p, _ := peer(nodes[0].Mesh, "eu-west")
		return !p.Healthy && p.DataAge > 2*time.Second
	})
	_ = nodes[1].ml.Shutdown()
}

func TestSecurity(t *testing.T) {
	t.Run("refuses to start without a key", func(t *testing.T) {
		cfg := DefaultConfig("us-east")
		if _, err := New(cfg, &fakeSource{}); err == nil || !strings.Contains(err.Error(), "SKYWALKER_GOSSIP_KEY") {
			t.Errorf("err = %v, want a refusal naming SKYWALKER_GOSSIP_KEY", err)
		}
		cfg.Keys = []string{"not base64!"}
		if _, err := New(cfg, &fakeSource{}); err == nil {
			t.Error("a malformed key must be refused")
		}
		for _, weak := range [][]byte{make([]byte, 32), bytes.Repeat([]byte{0xa5}, 16), []byte("keykeykeykeykeyk")} {
			cfg.Keys = []string{base64.StdEncoding.EncodeToString(weak)}
			if _, err := New(cfg, &fakeSource{}); err == nil || !strings.Contains(err.Error(), "distinct byte values") {
				t.Errorf("weak key % x: err = %v, want it refused", weak, err)
			}
		}
	})
	links := NewLinks()
	good := startNode(t, links, "us-east", "good", func(*Config) {})
	t.Run("a node with the wrong key cannot join", func(t *testing.T) {
		other := base64.StdEncoding.EncodeToString([]byte("fedcba9876543210"))
		bad := startNode(t, links, "eu-west", "wrong-key", func(c *Config) { c.Keys = []string{other} })
		if _, err := bad.Join([]string{good.Addr()}); err == nil || !strings.Contains(err.Error(), "another gossip key") {
			t.Errorf("join with the wrong key: err = %v, want it to say the seed uses another gossip key", err)
		}
		testwait.Holds(t, 500*time.Millisecond, "a node with another key stays out", func() (bool, string) {
			return len(good.Members()) == 1 && len(bad.Members()) == 1, fmt.Sprintf("members %v / %v", good.Members(), bad.Members())
		})
	})
	t.Run("a mesh with another label is ignored", func(t *testing.T) {
		alien := startNode(t, links, "eu-west", "alien", func(c *Config) { c.Label = "another-mesh" })
		if _, err := alien.Join([]string{good.Addr()}); err == nil || !strings.Contains(err.Error(), "SKYWALKER_CLUSTER_LABEL") {
			t.Errorf("join with another label: err = %v, want it to name the cluster label", err)
		}
		if _, err := alien.Join([]string{"127.0.0.1:1"}); err == nil || !strings.Contains(err.Error(), "unreachable") {
			t.Errorf("join of a closed port: err = %v, want it called unreachable", err)
		}
		testwait.Holds(t, 500*time.Millisecond, "meshes with different labels stay apart", func() (bool, string) {
			return len(good.Members()) == 1 && len(alien.Members()) == 1, fmt.Sprintf("members %v / %v", good.Members(), alien.Members())
		})
	})
	t.Run("keys rotate without losing members", func(t *testing.T) {
		peerNode := startNode(t, links, "eu-west", "rotating", func(*Config) {})
		if _, err := peerNode.Join([]string{good.Addr()}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the seed lists the node that joined it", func() bool { return len(good.Members()) == 2 })
		newKey := []byte("abcdefghijklmnopqrstuvwxyz012345")
		for _, n := range []*testNode{good, peerNode} {
			if err := n.Keyring().AddKey(newKey); err != nil {
				t.Fatal(err)
			}
		}
		for _, n := range []*testNode{good, peerNode} {
			if err := n.Keyring().UseKey(newKey); err != nil {
				t.Fatal(err)
			}
		}
		old, _ := ParseKey(testKey)
		for _, n := range []*testNode{good, peerNode} {
			if err := n.Keyring().RemoveKey(old); err != nil {
				t.Fatal(err)
			}
		}
		testwait.Holds(t, time.Second, "both members stay through the rotation", func() (bool, string) {
			return len(good.Members()) == 2, fmt.Sprintf("members %v", good.Members())
		})
	})
}

func TestGateHysteresis(t *testing.T) {
	p := GateParams{Alpha: 0.3, MaxRTT: 120 * time.Millisecond, MaxLoss: 0.5, Reopen: 3}
	l := NewGate()
	now := time.Now()
	steps := []struct {
		rtt      time.Duration
		ok       bool
		wantOpen bool
	}{
		{70 * time.Millisecond, true, false}, // first samples: measuring
		{70 * time.Millisecond, true, false},
		{70 * time.Millisecond, true, true},   // three good: open
		{0, false, true},                      // one lost probe: loss 30%, under the 50% bound: still open
		{200 * time.Millisecond, true, true},  // one sample over does not close it (smoothed 109 ms)
		{200 * time.Millisecond, true, false}, // two do: smoothed 136 ms, over 120
		{70 * time.Millisecond, true, false},  // smoothed 117 ms, not yet 5% under: no good sample
		{70 * time.Millisecond, true, false},  // hysteresis: one good sample is not enough
		{70 * time.Millisecond, true, false},
		{70 * time.Millisecond, true, true},    // the third good sample in a row reopens
		{1000 * time.Millisecond, true, false}, // one sample far over: smoothed 360 ms, closed at once
		{70 * time.Millisecond, true, false},
		{70 * time.Millisecond, true, false},
		{70 * time.Millisecond, true, false}, // good samples, but the average is still over 114 ms
	}
	for i, s := range steps {
		l.Observe(s.rtt, s.ok, now, p)
		if l.Open() != s.wantOpen {
			t.Fatalf("step %d (%v, ok=%v): open=%v (%s), want %v", i, s.rtt, s.ok, l.Open(), l.Reason(), s.wantOpen)
		}
	}
	for i := 0; i < 10 && !l.Open(); i++ {
		l.Observe(70*time.Millisecond, true, now, p)
	}
	if !l.Open() {
		t.Errorf("gate never reopened: %s", l.Reason())
	}
	for range 3 {
		l.Observe(0, false, now, p)
	}
	if l.Open() || !strings.Contains(l.Reason(), "loss") {
		t.Errorf("after repeated loss: open=%v reason=%q, want closed for loss", l.Open(), l.Reason())
	}
}

// TestAGateDoesNotFlapOnJitter: with the default smoothing, RTT samples
// jittering between 190 and 215 ms around a 200 ms threshold close the
// gate at most once in 100 probes; a 180 ms link whose samples spike over
// the threshold now and then never closes; a real jump to 300 ms closes an
// open gate within three probes.
func TestAGateDoesNotFlapOnJitter(t *testing.T) {
	cp := region.DefaultControlPlane()
	cp.MaxWANRTT = 200 * time.Millisecond
	p := GateParamsFrom(cp)
	rng := rand.New(rand.NewPCG(7, 11))
	now := time.Now()
	for seed := range 20 {
		g := NewGate()
		for range 100 {
			g.Observe(190*time.Millisecond+time.Duration(rng.Int64N(int64(25*time.Millisecond))), true, now, p)
		}
		if closes := g.Changes() - 1; closes > 1 { // the first change is the opening
			t.Errorf("run %d: jitter around the threshold closed the gate %d times in 100 probes", seed, closes)
		}
	}
	// A 180 ms link (the demo's) whose samples now and then spike to
	// 215 ms, as a busy host's scheduling makes them, stays open.
	spiky := NewGate()
	for i := range 100 {
		rtt := 180*time.Millisecond + time.Duration(rng.Int64N(int64(10*time.Millisecond)))
		if i%10 == 9 {
			rtt = 215 * time.Millisecond
		}
		spiky.Observe(rtt, true, now, p)
	}
	if !spiky.Open() || spiky.Changes() != 1 {
		t.Errorf("a 180 ms link with a spike in ten: open %v after %d changes (%s), want opened once and never closed", spiky.Open(), spiky.Changes(), spiky.Reason())
	}
	g := NewGate()
	for !g.Open() {
		g.Observe(150*time.Millisecond, true, now, p)
	}
	for i := 1; i <= 3; i++ {
		g.Observe(300*time.Millisecond, true, now, p)
		if !g.Open() {
			return
		}
	}
	t.Errorf("a jump from 150 to 300 ms left the gate open after three probes (smoothed %v)", g.RTT())
}

// TestATightGossipBudgetCoalescesDigestChanges: a node whose digest grows
// faster than its gossip budget sends fewer, larger changes — the bits
// since the generation its peer holds — so the peer skips generations but
// ends up with the very filter the node holds, without a whole digest
// being sent again. The peer pulled the first, whole digest itself.
func TestATightGossipBudgetCoalescesDigestChanges(t *testing.T) {
	for _, tt := range []struct {
		budget   int
		coalesce bool
	}{{-1, false}, {4000, true}} { // unlimited; 4 KB/s, load summaries included
		links := threeRegions()
		us := startNode(t, links, "us-east", "us-east-0", func(c *Config) {})
		eu := startNode(t, links, "eu-west", "eu-west-1", func(c *Config) { c.GossipBudget = tt.budget })
		if _, err := eu.Join([]string{us.Addr()}); err != nil {
			t.Fatal(err)
		}
		d := digest.New("eu-west", "eu-west-1", 1, 200_000, 0.01)
		next := uint64(1)
		grow := func(d *digest.Digest, n int) {
			for range n {
				d.Add(next * 0x9E3779B97F4A7C15)
				next++
			}
		}
		grow(d, 100_000)
		eu.src.setDigest(d)
		eventually(t, "us-east pulls eu-west's whole digest", func() bool {
			p, ok := peer(us.Mesh, "eu-west")
			return ok && p.Digest != nil && p.Digest.Generation == 1
		})
		full, _ := d.MarshalBinary()
		before := eu.Stats().BytesSent
		seen := map[uint64]bool{}
		watch := func() {
			if p, ok := peer(us.Mesh, "eu-west"); ok && p.Digest != nil {
				seen[p.Digest.Generation] = true
			}
		}
		for gen := uint64(2); gen <= 11; gen++ { // ~7 KB of bits every digest interval
			d = d.Clone()
			grow(d, 500)
			d.Generation = gen
			eu.src.setDigest(d)
			for range 15 { // pace the generations: ~7 KB of bits each digest interval
				watch()
				time.Sleep(20 * time.Millisecond)
			}
		}
		eventually(t, "us-east holds eu-west's generation 11", func() bool {
			watch()
			return seen[11]
		})
		sent := eu.Stats().BytesSent - before
		if sent >= int64(len(full)) {
			t.Errorf("budget %d: sent %d bytes, a whole digest is %d: changes must travel as bits", tt.budget, sent, len(full))
		}
		if p, _ := peer(us.Mesh, "eu-west"); !slices.Equal(p.Digest.Words(), d.Words()) {
			t.Errorf("budget %d: the peer's copy differs from the published filter", tt.budget)
		}
		skipped := 10 - (len(seen) - 1)
		if tt.coalesce && skipped < 3 || !tt.coalesce && skipped > 3 {
			t.Errorf("budget %d: the peer saw %d of generations 2..11 (%v); want %s", tt.budget, len(seen)-1, seen,
				map[bool]string{true: "several skipped", false: "nearly all"}[tt.coalesce])
		}
		t.Logf("budget %d B/s: %d bytes sent, %d of 10 generations seen", tt.budget, sent, len(seen)-1)
	}
}

// A region whose probes hang (a lossy link waits out memberlist's
// timeout) delays no other region's samples: regions are probed
// concurrently, and the hung one is not probed again while its probe is
// out. Probed one after another, ap-east would get no sample until
// eu-west's probe returned.
func TestALossyRegionDoesNotDelayTheOthersProbes(t *testing.T) {
	nodes := cluster(t, threeRegions(), "us-east", "eu-west", "ap-east")
	us := nodes[0]
	eventually(t, "us-east sees both peers' nodes", func() bool { return len(us.Members()) == 3 })
	release := make(chan struct{})
	t.Cleanup(func() { close(release) }) // runs before the nodes shut down
	var mu sync.Mutex
	calls := map[string]int{}
	us.mu.Lock()
	real := us.ping
	us.ping = func(node string, addr net.Addr) (time.Duration, error) {
		region := node[:strings.LastIndex(node, "-")] // cluster names nodes region-i
		mu.Lock()
		calls[region]++
		mu.Unlock()
		if region == "eu-west" {
			<-release // hung until the test ends
			return 0, errors.New("timeout")
		}
		return real(node, addr)
	}
	us.mu.Unlock()
	before := func(region string) int { mu.Lock(); defer mu.Unlock(); return calls[region] }
	eventually(t, "eu-west's probe is out (hung)", func() bool { return before("eu-west") >= 1 })
	base := before("ap-east")
	eventually(t, "ap-east probed ten more times while eu-west's probe hangs", func() bool { return before("ap-east") >= base+10 })
	if n := before("eu-west"); n != 1 {
		t.Errorf("eu-west was probed %d times while its first probe was out, want once", n)
	}
}
