package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"skywalker/internal/apierr"
	"skywalker/internal/digest"
	"skywalker/internal/engine"
	"skywalker/internal/request"
	"skywalker/internal/workload"
)

// epoch is virtual time zero.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// world is one run's state.
type world struct {
	cfg         Config
	now         time.Duration
	q           eventQueue
	rng         *rand.Rand
	src         workload.Source
	srcDone     bool
	regions     []*region
	byName      map[string]int
	baseRTT     [][]time.Duration
	rtt         [][]time.Duration
	gateRTT     time.Duration
	blockTokens int
	live        map[*request.Request]*simRequest
	outstanding int
	lastArrival time.Duration
	events      int64
	collect     *collector
	series      *series
}

// Run simulates cfg over the arrivals of src and returns the result. span
// is the workload's arrival span (for time-series buckets); blockTokens is
// the workload's tokens per prefix block.
func Run(cfg Config, src workload.Source, span time.Duration, blockTokens int) (*Result, error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	w := &world{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x51a)), src: src, byName: map[string]int{},
		gateRTT: cfg.PolicyConfig.Skywalker.MaxWANRTT, blockTokens: blockTokens, live: map[*request.Request]*simRequest{}}
	if bucket := cfg.Bucket; bucket > 0 {
		w.series = newSeries(len(cfg.Regions), bucket)
	} else {
		w.series = newSeries(len(cfg.Regions), max(span/96, time.Second))
	}
	w.collect = newCollector(cfg)
	w.baseRTT = cfg.RTT
	w.rtt = make([][]time.Duration, len(cfg.RTT))
	for i := range cfg.RTT {
		w.rtt[i] = append([]time.Duration(nil), cfg.RTT[i]...)
	}
	for i, spec := range cfg.Regions {
		if _, dup := w.byName[spec.Name]; dup {
			return nil, fmt.Errorf("sim: region %s listed twice", spec.Name)
		}
		w.byName[spec.Name] = i
		w.regions = append(w.regions, newRegion(w, i, spec))
	}
	for i := range w.regions {
		// Stagger the periodic work so regions do not move in lockstep.
		offset := time.Duration(i) * cfg.Scrape / time.Duration(len(w.regions))
		w.push(event{at: offset, kind: evScrape, region: int32(i)})
		w.push(event{at: offset, kind: evRefresh, region: int32(i)})
		w.push(event{at: offset, kind: evDigestPublish, region: int32(i)})
	}
	for i, f := range cfg.Faults {
		if err := w.checkFault(f); err != nil {
			return nil, fmt.Errorf("sim: fault %d: %w", i, err)
		}
		w.push(event{at: f.At, kind: evFaultStart, payload: f})
		w.push(event{at: f.At + f.Duration, kind: evFaultEnd, payload: f})
	}
	if err := w.pullArrival(); err != nil {
		return nil, err
	}
	if err := w.loop(); err != nil {
		return nil, err
	}
	return w.result(), nil
}

func (w *world) clock(d time.Duration) time.Time { return epoch.Add(d) }

func (w *world) push(e event) { w.q.push(e) }

// oneWay is the delay of one crossing from region a to b, with jitter.
func (w *world) oneWay(a, b int) time.Duration {
	d := w.rtt[a][b] / 2
	if w.cfg.Jitter > 0 {
		d += time.Duration(w.rng.Int64N(int64(w.cfg.Jitter) + 1))
	}
	return d
}

func (w *world) pullArrival() error {
	a, ok := w.src.Next()
	if !ok {
		w.srcDone = true
		return nil
	}
	idx, ok := w.byName[a.Region]
	if !ok {
		return fmt.Errorf("sim: arrival %s at unknown region %q", a.Request.ID, a.Region)
	}
	sr := &simRequest{req: a.Request, ingress: idx, served: -1, forwardedTo: -1, arrival: a.At, firstToken: -1}
	w.push(event{at: a.At, kind: evArrival, region: int32(idx), req: sr})
	return nil
}

func (w *world) loop() error {
	for w.q.len() > 0 {
		if w.srcDone && w.outstanding == 0 {
			return nil
		}
		e := w.q.pop()
		if w.cfg.Drain > 0 && w.srcDone && e.at > w.lastArrival+w.cfg.Drain {
			break
		}
		w.now = e.at
		w.events++
		r := (*region)(nil)
		if int(e.region) < len(w.regions) {
			r = w.regions[e.region]
		}
		switch e.kind {
		case evArrival:
			w.lastArrival = w.now
			w.arrive(e.req, r)
			if err := w.pullArrival(); err != nil {
				return err
			}
		case evForwardArrive:
			e.req.req.Forwarded = true
			r.bal.Submit(r.now(), e.req.req, r)
			r.scheduleExpire()
		case evStepEnd:
			r.stepEnd(int(e.replica), e.epoch)
		case evScrape:
			r.scrape()
			w.push(event{at: w.now + w.cfg.Scrape, kind: evScrape, region: e.region})
		case evRefresh:
			s := r.summarize()
			w.series.queue(r.idx, w.now, s.queued)
			for j := range w.regions {
				if j != r.idx {
					w.push(event{at: w.now + w.oneWay(r.idx, j), kind: evSummaryArrive, region: int32(j), replica: e.region, payload: s})
				}
			}
			w.push(event{at: w.now + w.cfg.Refresh, kind: evRefresh, region: e.region})
		case evSummaryArrive:
			s := e.payload.(*summary)
			ps := &r.peers[e.replica]
			if ps.summary == nil || s.at > ps.summary.at {
				ps.summary = s
				r.bal.Pump(r.now(), r)
				r.scheduleExpire()
			}
		case evDigestPublish:
			d := r.publishDigest()
			for j := range w.regions {
				if j != r.idx {
					w.push(event{at: w.now + w.oneWay(r.idx, j), kind: evDigestArrive, region: int32(j), replica: e.region, payload: d})
				}
			}
			w.push(event{at: w.now + w.cfg.DigestInterval, kind: evDigestPublish, region: e.region})
		case evDigestArrive:
			d := e.payload.(*digest.Digest)
			ps := &r.peers[e.replica]
			if ps.digest == nil || d.Generation > ps.digest.Generation {
				ps.digest = d
			}
		case evExpire:
			if r.expireAt == w.now {
				r.expireAt = -1
			}
			r.bal.Expire(r.now(), r)
			r.scheduleExpire()
		case evFaultStart:
			w.fault(e.payload.(Fault), true)
		case evFaultEnd:
			w.fault(e.payload.(Fault), false)
		}
	}
	// Whatever is still outstanding when the run stops is counted, not hidden.
	for _, sr := range w.live {
		w.collect.drop(sr, "unfinished")
	}
	return nil
}

func (w *world) arrive(sr *simRequest, r *region) {
	w.live[sr.req] = sr
	w.outstanding++
	sr.req.Arrival = w.clock(w.now)
	w.collect.arrival(sr)
	w.series.arrival(r.idx, w.now)
	r.bal.Submit(r.now(), sr.req, r)
	r.scheduleExpire()
}

// forward sends a request across the WAN; it arrives half an RTT later.
func (w *world) forward(sr *simRequest, from, to int) {
	sr.forwarded = true
	w.series.forward(from, w.now)
	w.push(event{at: w.now + w.oneWay(from, to), kind: evForwardArrive, region: int32(to), req: sr})
}

// finish records a completed request. The client sees the first token and
// the end half an RTT later if another region served it.
func (w *world) finish(sr *simRequest, s *engine.Sequence) {
	back := time.Duration(0)
	if sr.served != sr.ingress {
		back = w.oneWay(sr.served, sr.ingress)
	}
	w.collect.complete(sr, s, sr.firstToken+back-sr.arrival, w.now+back-sr.arrival)
	w.settle(sr)
}

// settle forgets a request that completed or was dropped.
func (w *world) settle(sr *simRequest) {
	if sr.forwardedTo >= 0 {
		f := &w.regions[sr.ingress].forwarding[sr.forwardedTo]
		*f = max(*f-1, 0)
	}
	delete(w.live, sr.req)
	w.outstanding--
}

func (w *world) drop(sr *simRequest, code apierr.Code) {
	w.collect.drop(sr, string(code))
	w.settle(sr)
}

func (w *world) checkFault(f Fault) error {
	if f.Duration <= 0 || f.At < 0 {
		return fmt.Errorf("%s needs a non-negative start and a positive duration", f.Kind)
	}
	switch f.Kind {
	case ReplicaCrash, RegionOutage:
		i, ok := w.byName[f.Region]
		if !ok {
			return fmt.Errorf("%s: unknown region %q", f.Kind, f.Region)
		}
		if f.Kind == ReplicaCrash && (f.Replica < 0 || f.Replica >= len(w.regions[i].replicas)) {
			return fmt.Errorf("%s: region %s has no replica %d", f.Kind, f.Region, f.Replica)
		}
	case RTTSpike:
		_, okA := w.byName[f.A]
		_, okB := w.byName[f.B]
		if !okA || !okB || f.A == f.B || f.RTT <= 0 {
			return fmt.Errorf("rtt-spike needs two different known regions and a positive RTT")
		}
	default:
		return fmt.Errorf("unknown fault kind %q", f.Kind)
	}
	return nil
}

func (w *world) fault(f Fault, start bool) {
	switch f.Kind {
	case ReplicaCrash, RegionOutage:
		r := w.regions[w.byName[f.Region]]
		for i := range r.replicas {
			if f.Kind == ReplicaCrash && i != f.Replica {
				continue
			}
			if start {
				r.crash(i)
			} else {
				r.recover(i)
			}
		}
	case RTTSpike:
		a, b := w.byName[f.A], w.byName[f.B]
		rtt := w.baseRTT[a][b]
		if start {
			rtt = f.RTT
		}
		w.rtt[a][b], w.rtt[b][a] = rtt, rtt
	}
}
