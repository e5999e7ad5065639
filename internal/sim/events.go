package sim

import "time"

type eventKind uint8

const (
	evArrival       eventKind = iota // the next workload arrival
	evForwardArrive                  // a forwarded request reaches its region
	evForwardFailed                  // a peer's refusal of a forwarded request reaches its ingress
	evForwardDone                    // a forwarded request's last byte reaches its ingress
	evRefused                        // a dispatch to a dead replica fails (connection refused)
	evStepEnd                        // a replica's engine step ends
	evScrape                         // a region scrapes its replicas' metrics
	evHealth                         // a region health-checks its replicas
	evPump                           // a region's periodic pump: fresh peers' snapshot, held requests re-routed
	evLoadCheck                      // a region decides whether to publish its load summary
	evLoadArrive                     // a load summary reaches a peer
	evDigestPublish                  // a region publishes its prefix digest
	evDigestArrive                   // a digest reaches a peer
	evProbe                          // a region probes one node of every peer region
	evProbeResult                    // a probe's answer (or its timeout) comes back
	evExpire                         // a held request's deadline
	evFaultStart
	evFaultEnd
)

// event is one entry of the simulator's queue. Fields are used per kind.
type event struct {
	at      time.Duration
	seq     uint64 // tie-break in insertion order: determinism
	kind    eventKind
	region  int32
	replica int32
	epoch   uint32 // replica incarnation, so steps of a crashed engine are ignored
	req     *simRequest
	payload any // summary, digest or probe in flight; fault
}

// eventQueue is a binary min-heap on (at, seq), without interface boxing.
type eventQueue struct {
	items []event
	seq   uint64
}

func (q *eventQueue) push(e event) {
	q.seq++
	e.seq = q.seq
	q.items = append(q.items, e)
	i := len(q.items) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !q.less(i, p) {
			break
		}
		q.items[i], q.items[p] = q.items[p], q.items[i]
		i = p
	}
}

func (q *eventQueue) pop() event {
	top := q.items[0]
	last := len(q.items) - 1
	q.items[0] = q.items[last]
	q.items[last] = event{}
	q.items = q.items[:last]
	i := 0
	for {
		l, r := 2*i+1, 2*i+2
		m := i
		if l < len(q.items) && q.less(l, m) {
			m = l
		}
		if r < len(q.items) && q.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		q.items[i], q.items[m] = q.items[m], q.items[i]
		i = m
	}
	return top
}

func (q *eventQueue) less(i, j int) bool {
	a, b := &q.items[i], &q.items[j]
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}

func (q *eventQueue) len() int { return len(q.items) }
