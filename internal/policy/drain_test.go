package policy

import (
	"testing"
	"time"
)

// heldHere is a region whose two replicas are at their cap of 8, with
// requests held (this one has position requests ahead, each 100 ms of
// queue), and one peer (eu-west, 72 ms away, fast GPUs, holding nothing
// of the request) with 4 of its 24 dispatch slots free and nothing held —
// but itself sending 10 requests to its own peers, so the congestion term
// prices it above this region: by score, the request stays.
func heldHere(position int) *View {
	return &View{
		Local: LocalRegion{Name: "us-east", Jurisdiction: "us", Replicas: busyReplicas(2), Queued: position, Held: position + 1,
			PerRequestWait: 100 * time.Millisecond, Prefill: fastPrefill, Objective: 2 * time.Second},
		Peers: []PeerRegion{{Name: "eu-west", Jurisdiction: "eu", Healthy: true, DataAge: 100 * time.Millisecond,
			RTT: 72 * time.Millisecond, GateOpen: true, Replicas: 3, Slots: 24, Outstanding: 20, Offloading: 10, Prefill: fastPrefill}},
	}
}

func TestAHeldRequestDrainsToAPeerWithRoomThatStartsItSooner(t *testing.T) {
	sw := NewSkywalker(DefaultSkywalkerConfig())
	tests := []struct {
		name   string
		modify func(*View)
		want   Action
		reason Reason
	}{
		{"a peer with free slots starts the request sooner than the local queue: it drains there", func(*View) {}, Forward, ReasonDrain},
		{"a peer with nothing free takes nothing", func(v *View) { v.Peers[0].Outstanding = 24 }, Hold, ReasonBusy},
		{"a peer whose summary shows a queue takes nothing", func(v *View) { v.Peers[0].QueueWait = 300 * time.Millisecond }, Hold, ReasonBusy},
		{"a peer whose estimates run 800 ms late is no sooner", func(v *View) {
			v.Peers[0].Error = ErrorSummary{Known: true, P10: 600 * time.Millisecond, P50: 700 * time.Millisecond, P90: 800 * time.Millisecond}
		}, Hold, ReasonBusy},
		{"the head of the queue starts here sooner than 150 ms away", func(v *View) {
			v.Local.Queued, v.Peers[0].RTT = 0, 150*time.Millisecond
		}, Hold, ReasonBusy},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := heldHere(3)
			tc.modify(v)
			d := sw.Route(exampleRequest(), v)
			if d.Action != tc.want || d.Reason != tc.reason {
				t.Errorf("got %s (%s), want %s (%s)", d.Action, d.Reason, tc.want, tc.reason)
			}
		})
	}
}

func TestAHeldRequestThatWouldMissHereDrainsToAPeerThatMeetsIt(t *testing.T) {
	// The head of the queue: here it starts in about 0.2 s, sooner than
	// at a peer 400 ms away, so it stays; but it has waited 1.7 s of its
	// 2 s objective and the region's estimates run 300 ms late nine times
	// in ten: here it would miss, there it still fits.
	sw := NewSkywalker(DefaultSkywalkerConfig())
	v := heldHere(0)
	v.Peers[0].RTT = 100 * time.Millisecond
	if d := sw.Route(exampleRequest(), v); d.Action != Hold {
		t.Fatalf("fresh: got %s (%s), want hold: the local queue is sooner", d.Action, d.Reason)
	}
	v.Local.Waited = 1700 * time.Millisecond
	v.Local.Error = ErrorSummary{Known: true, P10: 100 * time.Millisecond, P50: 200 * time.Millisecond, P90: 300 * time.Millisecond}
	if d := sw.Route(exampleRequest(), v); d.Action != Forward || d.Reason != ReasonDrain {
		t.Errorf("after 1.7 s: got %s (%s), want a drain to eu-west", d.Action, d.Reason)
	}
}

func TestRegionsDrainingAtOnceShareAPeersFreeSlots(t *testing.T) {
	tests := []struct {
		name                     string
		free, held, othersQueued int
		awaiting, wantClaim      int
	}{
		{"alone, a region may take every free slot", 8, 10, 0, 7, 8},
		{"with another region holding as much, half", 8, 10, 10, 3, 4},
		{"a region holding a tenth of the work, a tenth (rounded up)", 8, 2, 18, 0, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			claims := 0
			for n := 0; n <= tc.free; n++ {
				v := &View{Local: LocalRegion{Held: tc.held}, Peers: []PeerRegion{
					{Name: "p", Healthy: true, Slots: 16, Outstanding: 16 - tc.free + n, AwaitingFromUs: n},
					{Name: "q", Healthy: true, Queued: tc.othersQueued},
				}}
				if hasRoomFor(v, 0) {
					claims = n + 1
				}
			}
			if claims != tc.wantClaim {
				t.Errorf("claims %d of %d free slots, want %d", claims, tc.free, tc.wantClaim)
			}
		})
	}
}

func TestReachIsWhatIsLeftOfTheObjectiveWithTheLearnedError(t *testing.T) {
	// The peer's estimate is 72 ms + ~92 ms + its queue of 500 ms ≈ 0.66 s.
	sw := NewSkywalker(DefaultSkywalkerConfig())
	base := func() *View {
		v := exampleView()
		v.Peers[0].QueueWait = 500 * time.Millisecond
		v.Local.Objective = time.Second
		return v
	}
	tests := []struct {
		name   string
		modify func(*View)
		want   Action
	}{
		{"fresh, the peer fits a 1 s objective", func(*View) {}, Forward},
		{"after 0.5 s held, 0.66 s no longer fits what is left", func(v *View) { v.Local.Waited = 500 * time.Millisecond }, Hold},
		{"a peer learned to run 500 ms late does not fit either", func(v *View) {
			v.Peers[0].Error = ErrorSummary{Known: true, P10: 300 * time.Millisecond, P50: 400 * time.Millisecond, P90: 500 * time.Millisecond}
		}, Hold},
		{"a peer learned to run early fits even after 0.35 s", func(v *View) {
			v.Local.Waited = 350 * time.Millisecond
			v.Peers[0].Error = ErrorSummary{Known: true, P10: -100 * time.Millisecond, P50: -80 * time.Millisecond, P90: -50 * time.Millisecond}
		}, Forward},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := base()
			tc.modify(v)
			if d := sw.Route(exampleRequest(), v); d.Action != tc.want {
				t.Errorf("got %s (%s), want %s", d.Action, d.Reason, tc.want)
			}
		})
	}
}

func TestARequestIsNotHeldForItsPrefixPastWhenItCouldStillStartCold(t *testing.T) {
	// a has room but is cold (97 ms of prefill); b holds the prefix but
	// frees a slot only every 2 × 1 s, and as many requests are held as
	// there are replicas, so waiting for b costs the region nothing. With
	// plenty of its 3.5 s objective left the request waits for b; with
	// 1.7 s left, a's cold start still fits and b's 2 s wait no longer
	// fits in what a would leave spare: it goes to a.
	rs := []Replica{
		{Name: "a", Healthy: true, InFlight: 7, MaxInFlight: 8},
		{Name: "b", Healthy: true, InFlight: 8, MaxInFlight: 8, PrefixBlocks: 34},
	}
	sw := NewSkywalker(DefaultSkywalkerConfig())
	tests := []struct {
		name   string
		waited time.Duration
		want   Action
	}{
		{"plenty left: wait for the prefix", 0, Hold},
		{"1.7 s left: start cold now", 1800 * time.Millisecond, Dispatch},
		{"past the objective: serve late", 4 * time.Second, Dispatch},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := &View{Local: LocalRegion{Name: "us-east", Replicas: rs, Prefill: fastPrefill, PerRequestWait: time.Second,
				Held: 2, Objective: 3500 * time.Millisecond, Waited: tc.waited}}
			d := sw.Route(exampleRequest(), v)
			if d.Action != tc.want || d.Action == Dispatch && d.Replica != 0 {
				t.Errorf("got %s to %d, want %s (to a)", d.Action, d.Replica, tc.want)
			}
		})
	}
}

func TestTheFallbackIsThePeerThatStartsTheRequestSoonest(t *testing.T) {
	// Held here (its replicas at their dispatch caps, their KV caches far
	// from full: lightly congested). eu-west is lightly loaded but has a
	// 2 s queue: the best score of the peers, yet slow; ap-east is busy
	// (no slot free: no drain) but starts it in about 0.2 s. Admission's
	// fallback — where the request goes when it cannot wait here — is the
	// sooner one.
	v := exampleView()
	v.Local.Queued, v.Local.Objective = 0, 0
	for i := range v.Local.Replicas {
		v.Local.Replicas[i].Capacity = 64
	}
	v.Peers[0].QueueWait, v.Peers[0].Outstanding = 2*time.Second, 10
	v.Peers[1].GateOpen, v.Peers[1].RTT = true, 100*time.Millisecond
	v.Peers[1].Outstanding, v.Peers[1].Slots = 32, 32
	v.Peers[1].QueueWait = 10 * time.Millisecond
	d := NewSkywalker(DefaultSkywalkerConfig()).Route(exampleRequest(), v)
	if d.Action != Hold || !d.HasFallback || v.Peers[d.FallbackPeer].Name != "ap-east" {
		t.Errorf("got %s (%s) fallback %v to %d, want hold with ap-east as the fallback", d.Action, d.Reason, d.HasFallback, d.FallbackPeer)
	}
}

func TestTheCongestionWeightsAreAShareOfTheObjective(t *testing.T) {
	sw := NewSkywalker(DefaultSkywalkerConfig())
	tests := []struct {
		objective       time.Duration
		region, replica time.Duration // at load 0.5 and utilization 0.5
	}{
		{2 * time.Second, 3 * time.Second, 50 * time.Millisecond},               // the tuning set's: as chosen
		{600 * time.Millisecond, 900 * time.Millisecond, 15 * time.Millisecond}, // a tight objective: a share of it
		{0, 3 * time.Second, 50 * time.Millisecond},                             // no objective: the absolute weights
	}
	for _, tc := range tests {
		v := &View{Local: LocalRegion{Objective: tc.objective}}
		r := &Replica{InFlight: 4, MaxInFlight: 8}
		if got := sw.congestion(v, 0.5); got != tc.region {
			t.Errorf("objective %v: region congestion %v, want %v", tc.objective, got, tc.region)
		}
		if got := sw.replicaCongestion(&v.Local, r); got != tc.replica {
			t.Errorf("objective %v: replica congestion %v, want %v", tc.objective, got, tc.replica)
		}
	}
}

func TestARegionWithNoHealthyReplicaReachesEveryPeer(t *testing.T) {
	// The peer's estimate (queue 3 s) misses a 1 s objective: a region that
	// could serve the request holds it, one whose replicas are all down
	// sends it at once — waiting only makes it later.
	v := exampleView()
	v.Local.Objective = time.Second
	v.Peers[0].QueueWait = 3 * time.Second
	sw := NewSkywalker(DefaultSkywalkerConfig())
	if d := sw.Route(exampleRequest(), v); d.Action != Hold {
		t.Fatalf("replicas up: got %s, want hold", d.Action)
	}
	for i := range v.Local.Replicas {
		v.Local.Replicas[i].Healthy = false
	}
	if d := sw.Route(exampleRequest(), v); d.Action != Forward || d.Region != "eu-west" {
		t.Errorf("replicas down: got %s to %s, want a forward to eu-west", d.Action, d.Region)
	}
}
