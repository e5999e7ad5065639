package mesh

import (
	"fmt"
	"time"
)

// linkState is the smoothed RTT, loss estimate and WAN gate of the link to
// one peer region. It is pure: the mesh feeds it samples under its lock.
type linkState struct {
	rtt      float64 // EWMA, nanoseconds
	samples  int
	loss     float64 // EWMA of probe failures, 0..1
	open     bool
	reason   string
	goodRun  int
	lastSeen time.Time
	changes  int // gate transitions, for metrics
}

// gateParams are the gate's thresholds.
type gateParams struct {
	alpha   float64
	maxRTT  time.Duration
	maxLoss float64
	reopen  int
}

func newLinkState() *linkState { return &linkState{reason: "no RTT samples yet"} }

// observe folds in one probe: ok with its rtt, or a failure. The gate
// closes at once on a breach (a sample or the smoothed RTT over the
// threshold, or loss over its bound) and reopens only after p.reopen good
// samples in a row.
func (l *linkState) observe(rtt time.Duration, ok bool, now time.Time, p gateParams) {
	if ok {
		if l.samples == 0 {
			l.rtt = float64(rtt)
		} else {
			l.rtt += p.alpha * (float64(rtt) - l.rtt)
		}
		l.samples++
		l.loss -= p.alpha * l.loss
		l.lastSeen = now
	} else {
		l.loss += p.alpha * (1 - l.loss)
	}
	var breach string
	switch {
	case ok && rtt > p.maxRTT:
		breach = fmt.Sprintf("rtt sample %v over %v", rtt.Round(time.Millisecond), p.maxRTT)
	case l.samples > 0 && time.Duration(l.rtt) > p.maxRTT:
		breach = fmt.Sprintf("smoothed rtt %v over %v", time.Duration(l.rtt).Round(time.Millisecond), p.maxRTT)
	case l.loss > p.maxLoss:
		breach = fmt.Sprintf("loss %.0f%% over %.0f%%", 100*l.loss, 100*p.maxLoss)
	}
	if !ok && breach == "" {
		l.goodRun = 0 // a lone lost probe does not close the gate, but does not count toward reopening
		return
	}
	if breach != "" {
		l.goodRun = 0
		if l.open {
			l.open = false
			l.changes++
		}
		l.reason = breach
		return
	}
	l.goodRun++
	if !l.open && l.goodRun >= p.reopen {
		l.open = true
		l.changes++
		l.reason = "ok"
	} else if !l.open {
		l.reason = fmt.Sprintf("reopening: %d of %d good samples", l.goodRun, p.reopen)
	}
}
