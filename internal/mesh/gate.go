package mesh

import (
	"fmt"
	"time"

	"skywalker/internal/region"
)

// GateParams are a WAN gate's thresholds.
type GateParams struct {
	Alpha   float64       // weight of a new sample in the RTT and loss averages
	MaxRTT  time.Duration // a sample or average above this closes the gate
	MaxLoss float64       // an average loss above this closes the gate
	Reopen  int           // good samples in a row that reopen a closed gate
}

// GateParamsFrom takes a gate's thresholds from the control plane's.
func GateParamsFrom(cp region.ControlPlane) GateParams {
	return GateParams{Alpha: cp.RTTAlpha, MaxRTT: cp.MaxWANRTT, MaxLoss: cp.MaxLoss, Reopen: cp.ReopenSamples}
}

// Gate is the link to one peer region: its smoothed RTT, a loss estimate
// and the WAN gate that closes the link to forwarding while it is too slow
// or too lossy. It is pure (time is an argument) and not safe for
// concurrent use. The mesh feeds it memberlist's probes; the simulator
// feeds it simulated probes, so both route through the same gate.
type Gate struct {
	rtt      float64 // EWMA, nanoseconds
	samples  int
	loss     float64 // EWMA of probe failures, 0..1
	open     bool
	reason   string
	goodRun  int
	lastSeen time.Time
	changes  int
}

// NewGate returns a closed gate with no samples.
func NewGate() *Gate { return &Gate{reason: "no RTT samples yet"} }

// Open reports whether the link may carry forwarded requests.
func (g *Gate) Open() bool { return g.open }

// Reason says why the gate is as it is.
func (g *Gate) Reason() string { return g.reason }

// RTT is the smoothed round-trip time (zero before any sample).
func (g *Gate) RTT() time.Duration { return time.Duration(g.rtt) }

// Loss is the smoothed share of failed probes.
func (g *Gate) Loss() float64 { return g.loss }

// Changes counts the gate's transitions.
func (g *Gate) Changes() int { return g.changes }

// Observe folds in one probe: ok with its rtt, or a failure. The gate
// closes when the smoothed RTT passes the threshold, or the smoothed loss
// its bound — never on one sample, which jitter around the threshold
// would turn into flapping (a sustained jump from well under the
// threshold to well over it closes the gate within three probes; a single
// sample far over it, at once). A gate that closed reopens only after
// p.Reopen good samples in a row with the smoothed RTT, and each sample,
// GateMargin under the threshold; a gate never yet open opens at the
// threshold itself.
func (g *Gate) Observe(rtt time.Duration, ok bool, now time.Time, p GateParams) {
	if ok {
		if g.samples == 0 {
			g.rtt = float64(rtt)
		} else {
			g.rtt += p.Alpha * (float64(rtt) - g.rtt)
		}
		g.samples++
		g.loss -= p.Alpha * g.loss
		g.lastSeen = now
	} else {
		g.loss += p.Alpha * (1 - g.loss)
	}
	var breach string
	switch {
	case g.samples > 0 && time.Duration(g.rtt) > p.MaxRTT:
		breach = fmt.Sprintf("smoothed rtt %v over %v", time.Duration(g.rtt).Round(time.Millisecond), p.MaxRTT)
	case g.loss > p.MaxLoss:
		breach = fmt.Sprintf("loss %.0f%% over %.0f%%", 100*g.loss, 100*p.MaxLoss)
	}
	if breach != "" {
		g.goodRun = 0
		if g.open {
			g.open = false
			g.changes++
		}
		g.reason = breach
		return
	}
	if !ok {
		g.goodRun = 0 // a lone lost probe does not close the gate, but does not count toward reopening
		return
	}
	if g.open {
		return
	}
	bar := p.MaxRTT
	if g.changes > 0 { // it closed on a breach: hysteresis
		bar = time.Duration(float64(p.MaxRTT) * (1 - GateMargin))
	}
	if rtt > bar || time.Duration(g.rtt) > bar {
		g.goodRun = 0
		g.reason = fmt.Sprintf("reopening: smoothed rtt %v, waiting for samples under %v", time.Duration(g.rtt).Round(time.Millisecond), bar.Round(time.Millisecond))
		return
	}
	if g.goodRun++; g.goodRun >= p.Reopen {
		g.open = true
		g.changes++
		g.reason = "ok"
		return
	}
	g.reason = fmt.Sprintf("reopening: %d of %d good samples", g.goodRun, p.Reopen)
}

// GateMargin is how far under the threshold a closed gate's link must be
// to reopen: jitter around the threshold then closes it once, not every
// other probe.
const GateMargin = 0.05
