package sim

import "testing"

// TestAColdBurstAgainstASlowPeerWastesNoPeerCompute: on slow-engines-burst
// (out of sample: engines ten times slower than their profile, a burst at
// home while the peer has measured nothing) SkyWalker's forwards are
// priced at the speed learned at home and waited for as long as they were
// estimated to take: none is cut, so the peer computes nothing for nobody.
// A policy that forwards blind (least-load) shows what is counted
// otherwise: forwards cut at their deadline after the peer's engine had
// begun them, and the engine time they took there.
func TestAColdBurstAgainstASlowPeerWastesNoPeerCompute(t *testing.T) {
	rep, err := Compare(scenario(t, "slow-engines-burst"), Options{Policies: []string{"skywalker", "least-load"}})
	if err != nil {
		t.Fatal(err)
	}
	sky, blind := rep.Results[0], rep.Results[1]
	if sky.ForwardTimeouts != 0 || sky.ForwardsWasted != 0 || sky.WastedEngineSeconds != 0 {
		t.Errorf("skywalker: %d forwards cut at their deadline, %d wasted (%.1f engine-seconds at the peer for nobody); want none",
			sky.ForwardTimeouts, sky.ForwardsWasted, sky.WastedEngineSeconds)
	}
	if sky.CrossRegion == 0 {
		t.Error("skywalker forwarded nothing: the burst should still be shared with the idle peer")
	}
	if blind.ForwardsWasted == 0 || blind.WastedEngineSeconds <= 0 || blind.ForwardsWasted > blind.ForwardTimeouts {
		t.Errorf("least-load: %d forwards cut, %d wasted (%.1f engine-seconds); want some wasted, each one cut (the count counts)",
			blind.ForwardTimeouts, blind.ForwardsWasted, blind.WastedEngineSeconds)
	}
}
