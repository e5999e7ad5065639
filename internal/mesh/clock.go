package mesh

import "time"

// Clock offsets. Every load summary carries its sender's wall clock when it
// was sent; a summary arrives one WAN crossing plus some queueing later.
// Over a window of recent summaries from a region, the least lag (arrival
// by our clock less the sending time by theirs) is the crossing with no
// queueing less the offset between the clocks, so the region's clock runs
//
//	offset = RTT/2 − min(lag)
//
// ahead of ours, to within the link's asymmetry and queueing that never
// let up. A forwarding marker's time, stamped by the origin's clock, is
// read through its origin's offset (see proxy markers): regions whose
// clocks drift apart keep forwarding to each other.

// clockWindow is how many recent summaries a region's offset is taken
// over (four seconds of them at the default LoadInterval).
const clockWindow = 16

// MaxClockOffset bounds a measured offset: a clock further off is broken,
// not skewed, and is read as this far off.
const MaxClockOffset = 10 * time.Minute

// clockLags are the lags of a region's recent summaries.
type clockLags struct {
	lag  [clockWindow]time.Duration
	n    int // samples held, at most clockWindow
	next int
}

func (c *clockLags) add(lag time.Duration) {
	c.lag[c.next] = lag
	c.next = (c.next + 1) % clockWindow
	c.n = min(c.n+1, clockWindow)
}

// offset is the region's clock less ours, given the link's smoothed RTT;
// ok is false before any sample.
func (c *clockLags) offset(rtt time.Duration) (time.Duration, bool) {
	if c == nil || c.n == 0 {
		return 0, false
	}
	least := c.lag[0]
	for _, l := range c.lag[1:c.n] {
		least = min(least, l)
	}
	return min(max(rtt/2-least, -MaxClockOffset), MaxClockOffset), true
}

// ObserveClock records that a summary node sent at sentAt (by its clock)
// arrived at now (by ours).
func (t *Table) ObserveClock(node string, sentAt, now time.Time) {
	n := t.nodes[node]
	if n == nil || sentAt.IsZero() {
		return
	}
	c := t.clocks[n.meta.Region]
	if c == nil {
		c = &clockLags{}
		t.clocks[n.meta.Region] = c
	}
	c.add(now.Sub(sentAt))
	t.version++
}
