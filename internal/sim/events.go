package sim

import "time"

type eventKind uint8

const (
	evArrival           eventKind = iota // the next workload arrival: a client sends it
	evReachRouter                        // a request reaches its router across the WAN (a single global router's)
	evForwardArrive                      // a forwarded request reaches its router
	evForwardFailed                      // a peer's refusal of a forwarded request reaches its ingress
	evForwardDone                        // a forwarded request's last byte reaches its ingress
	evDispatchArrive                     // a request reaches a replica in another region (a single global router's)
	evRefused                            // a dispatch to a dead replica fails (connection refused)
	evFirstTokenCheck                    // a dispatch's first-token timeout is read again (and may have passed)
	evStepEnd                            // a replica's engine step ends
	evEndNotice                          // the end of a request on a remote replica reaches its router
	evFirstNotice                        // the first token of a request on a remote replica reaches its router
	evClientTimeout                      // a client gives up waiting for its first token
	evScrape                             // a router scrapes its replicas' metrics
	evScrapeResult                       // a remote replica's metrics reach its router
	evKVEvents                           // a remote replica's KV events reach its router
	evHealth                             // a router health-checks its replicas
	evPump                               // a router's periodic pump: fresh peers' snapshot, held requests re-routed
	evLoadCheck                          // a router decides whether to publish its load summary
	evLoadArrive                         // a load summary reaches a peer
	evSiblingDispatches                  // what another proxy of the region dispatched reaches a proxy
	evDigestPublish                      // a router publishes its prefix digest
	evDigestArrive                       // a digest reaches a peer
	evProbe                              // a router probes every peer router
	evProbeResult                        // a probe's answer (or its timeout) comes back
	evExpire                             // a held request's deadline
	evFaultStart
	evFaultEnd
	evForwardCheck // a forward's first-token timeout at its ingress is read again (and may have passed)
)

// event is one entry of the simulator's queue. Fields are used per kind.
type event struct {
	at      time.Duration
	seq     uint64 // tie-break in insertion order: determinism
	kind    eventKind
	router  int32
	replica int32  // replica index in the router's table; sender router index for mesh messages
	epoch   uint32 // replica incarnation, so steps of a crashed engine are ignored
	req     *simRequest
	payload any // summary, digest, metrics or probe in flight; refusal; fault
}

// eventQueue is a 4-ary min-heap on (at, seq). The heap holds small
// pointer-free keys; the events themselves sit in a slab reused through a
// free list, so sifting moves 24-byte keys and never triggers the garbage
// collector's write barriers (moving whole events, which hold pointers,
// cost a fifth of a simulation's time).
type eventQueue struct {
	keys []eventKey
	slab []event
	free []uint32
	seq  uint64
}

type eventKey struct {
	at   time.Duration
	seq  uint64
	slot uint32
}

func (a *eventKey) less(b *eventKey) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}

func (q *eventQueue) push(e event) {
	q.seq++
	e.seq = q.seq
	var slot uint32
	if n := len(q.free); n > 0 {
		slot = q.free[n-1]
		q.free = q.free[:n-1]
		q.slab[slot] = e
	} else {
		slot = uint32(len(q.slab))
		q.slab = append(q.slab, e)
	}
	k := eventKey{at: e.at, seq: e.seq, slot: slot}
	i := len(q.keys)
	q.keys = append(q.keys, k)
	for i > 0 {
		p := (i - 1) / 4
		if !k.less(&q.keys[p]) {
			break
		}
		q.keys[i] = q.keys[p]
		i = p
	}
	q.keys[i] = k
}

func (q *eventQueue) pop() event {
	top := q.keys[0]
	e := q.slab[top.slot]
	q.slab[top.slot] = event{}
	q.free = append(q.free, top.slot)
	last := len(q.keys) - 1
	k := q.keys[last]
	q.keys = q.keys[:last]
	n := last
	if n > 0 {
		i := 0
		for {
			c := 4*i + 1
			if c >= n {
				break
			}
			m := c
			for j := c + 1; j < min(c+4, n); j++ {
				if q.keys[j].less(&q.keys[m]) {
					m = j
				}
			}
			if !q.keys[m].less(&k) {
				break
			}
			q.keys[i] = q.keys[m]
			i = m
		}
		q.keys[i] = k
	}
	return e
}

// next is the time of the earliest event; the queue must not be empty.
func (q *eventQueue) next() time.Duration { return q.keys[0].at }

func (q *eventQueue) len() int { return len(q.keys) }
