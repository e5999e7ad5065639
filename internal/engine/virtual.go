package engine

import (
	"fmt"
	"sort"
	"time"
)

// Arrival is a sequence that reaches the engine At after the start.
type Arrival struct {
	At  time.Duration
	Seq *Sequence
}

// NopSink ignores every event.
type NopSink struct{}

func (NopSink) FirstToken(*Sequence, time.Time) {}
func (NopSink) Token(*Sequence, time.Time)      {}
func (NopSink) Finished(*Sequence, time.Time)   {}

var _ Sink = NopSink{}

// RunVirtual drives one engine on virtual time from start until every
// arrival has finished: the single-engine case of the simulator, used to
// check the HTTP driver against the model and to measure a profile's
// capacity. Arrivals are sorted by time; a sequence that arrives during a
// step joins at the next one, as in vLLM. It returns the virtual end time.
func RunVirtual(e *Engine, start time.Time, arrivals []Arrival, sink Sink) (time.Time, error) {
	if sink == nil {
		sink = NopSink{}
	}
	sort.SliceStable(arrivals, func(i, j int) bool { return arrivals[i].At < arrivals[j].At })
	now := start
	next := 0
	for {
		for next < len(arrivals) && !start.Add(arrivals[next].At).After(now) {
			a := arrivals[next]
			a.Seq.Arrival = start.Add(a.At)
			if err := e.Add(a.Seq); err != nil {
				return now, fmt.Errorf("arrival %d: %w", next, err)
			}
			next++
		}
		d, ok := e.BeginStep(now)
		if !ok {
			if next == len(arrivals) {
				return now, nil
			}
			now = start.Add(arrivals[next].At)
			continue
		}
		now = now.Add(d)
		e.EndStep(now, sink)
	}
}
