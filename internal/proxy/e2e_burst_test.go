package proxy

import (
	"strings"
	"testing"
	"time"
)

func meanTTFT(rs []result) time.Duration {
	var sum time.Duration
	n := 0
	for _, r := range rs {
		if r.status == 200 && r.ttft > 0 {
			sum += r.ttft
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / time.Duration(n)
}

// TestABurstIsSharedWithPeers: a burst at us-east, more than its two
// replicas can start at once, is partly served by peers, and clients see a
// lower TTFT than with forwarding off.
func TestABurstIsSharedWithPeers(t *testing.T) {
	opts := clusterOpts{maxInFlight: 3, timeScale: 1}
	shared := burst(t, startCluster(t, opts).regions["us-east"].url, 36, 30)
	opts.policy = "local"
	isolated := burst(t, startCluster(t, opts).regions["us-east"].url, 36, 30)

	served := map[string]int{}
	for _, r := range shared {
		if r.status != 200 {
			t.Fatalf("status %d: %.200s", r.status, r.body)
		}
		served[r.region]++
		if r.region != "us-east" && r.ingress != "us-east" {
			t.Errorf("a forwarded response must name its ingress: %+v", r)
		}
	}
	if served["us-east"] == 36 {
		t.Fatalf("nothing was forwarded: %v", served)
	}
	got, base := meanTTFT(shared), meanTTFT(isolated)
	t.Logf("served %v; mean TTFT %v with sharing, %v with forwarding off", served, got, base)
	if got >= base {
		t.Errorf("mean TTFT with sharing %v, not lower than %v without", got, base)
	}
}

func TestAClosedGateKeepsTrafficLocal(t *testing.T) {
	c := startCluster(t, clusterOpts{maxInFlight: 3, timeScale: 1})
	c.links.SetRTT("us-east", "eu-west", 400*time.Millisecond)
	c.links.SetRTT("us-east", "ap-east", 400*time.Millisecond)
	gatesClosed(t, c.regions["us-east"])
	for _, r := range burst(t, c.regions["us-east"].url, 24, 30) {
		if r.status != 200 || r.region != "us-east" {
			t.Fatalf("served in %q (status %d) with every gate closed", r.region, r.status)
		}
	}
}

func TestQueueLimitsAnswer429And503WithRetryAfter(t *testing.T) {
	c := startCluster(t, clusterOpts{maxInFlight: 1, maxQueue: 2, maxWait: 400 * time.Millisecond, timeScale: 1, engines: 1})
	c.links.SetRTT("us-east", "eu-west", 400*time.Millisecond) // keep it local
	c.links.SetRTT("us-east", "ap-east", 400*time.Millisecond)
	gatesClosed(t, c.regions["us-east"])
	statuses := map[int]int{}
	for _, r := range burst(t, c.regions["us-east"].url, 12, 60) {
		statuses[r.status]++
		if (r.status == 429 || r.status == 503) && r.retryAfter == "" {
			t.Errorf("status %d without Retry-After", r.status)
		}
	}
	if statuses[429] == 0 || statuses[503] == 0 || statuses[200] == 0 {
		t.Errorf("statuses %v: want some served, some 429 (queue full) and some 503 (deadline)", statuses)
	}
}

func TestKillingAReplicaLosesNoRequestThatHadNotStarted(t *testing.T) {
	c := startCluster(t, clusterOpts{maxInFlight: 4, timeScale: 1})
	us := c.regions["us-east"]
	done := make(chan []result)
	go func() { done <- burst(t, us.url, 24, 20) }()
	time.Sleep(300 * time.Millisecond)
	victim := us.engines[0]
	victim.CloseClientConnections()
	victim.Listener.Close()
	for _, r := range <-done {
		complete := strings.HasSuffix(strings.TrimSpace(r.body), "data: [DONE]")
		failedMidStream := r.status == 200 && strings.Contains(r.body, `"upstream_error"`)
		if !complete && !failedMidStream {
			t.Errorf("request lost: status %d body %.200s", r.status, r.body)
		}
		if failedMidStream && r.ttft == 0 {
			t.Errorf("a request that had not streamed failed instead of being retried: %.200s", r.body)
		}
	}
	waitUntil(t, 5*time.Second, "the dead replica is ejected", func() bool { return us.proxy.router.healthyReplicas() == 1 })
}

func TestADeadPeerIsNoLongerForwardedTo(t *testing.T) {
	c := startCluster(t, clusterOpts{})
	ap := c.regions["ap-east"]
	ap.cancel()
	_ = ap.mesh.Shutdown()
	waitUntil(t, 10*time.Second, "us-east sees ap-east gone", func() bool {
		for _, p := range c.regions["us-east"].mesh.Peers() {
			if p.Region == "ap-east" && p.Healthy {
				return false
			}
		}
		return true
	})
	r := call(t, c.regions["us-east"].url, chat("for ap only", 2, false, `,"metadata":{"data_residency":"ap"}`), nil)
	if r.status != 503 {
		t.Errorf("a request only ap-east may serve: status %d (%s), want 503 once ap-east is gone", r.status, r.region)
	}
}

// gatesClosed waits until the region's router sees every gate closed.
func gatesClosed(t *testing.T, reg *testRegion) {
	t.Helper()
	waitUntil(t, 5*time.Second, "gates close", func() bool {
		r := reg.proxy.router
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, p := range r.peers {
			if p.GateOpen {
				return false
			}
		}
		return len(r.peers) > 0
	})
}

func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
