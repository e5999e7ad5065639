package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"skywalker/internal/apierr"
	"skywalker/internal/digest"
	"skywalker/internal/engine"
	"skywalker/internal/mesh"
	"skywalker/internal/request"
	"skywalker/internal/results"
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
	regions     []*simRegion
	byName      map[string]int
	baseRTT     [][]time.Duration
	rtt         [][]time.Duration
	loss        [][]float64
	blockTokens int
	live        map[*request.Request]*simRequest
	outstanding int
	lastArrival time.Duration
	events      int64
	collect     *results.Collector
	series      *series
}

// Run simulates cfg over the arrivals of src and returns the result. span
// is the workload's arrival span (for time-series buckets); blockTokens is
// the workload's tokens per prefix block.
func Run(cfg Config, src workload.Source, span time.Duration, blockTokens int) (*results.Result, error) {
	w, err := newWorld(cfg, src, span, blockTokens)
	if err != nil {
		return nil, err
	}
	if err := w.pullArrival(); err != nil {
		return nil, err
	}
	if err := w.loop(); err != nil {
		return nil, err
	}
	return w.result(), nil
}

// newWorld builds the regions and schedules the periodic work and faults.
func newWorld(cfg Config, src workload.Source, span time.Duration, blockTokens int) (*world, error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	w := &world{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x51a)), src: src, byName: map[string]int{},
		blockTokens: blockTokens, live: map[*request.Request]*simRequest{}, collect: results.NewCollector(cfg.SLO)}
	bucket := cfg.Bucket
	if bucket <= 0 {
		bucket = max(span/96, time.Second)
	}
	w.series = newSeries(len(cfg.Regions), bucket)
	w.baseRTT = cfg.RTT
	w.rtt = make([][]time.Duration, len(cfg.RTT))
	w.loss = make([][]float64, len(cfg.RTT))
	for i := range cfg.RTT {
		w.rtt[i] = append([]time.Duration(nil), cfg.RTT[i]...)
		w.loss[i] = make([]float64, len(cfg.RTT))
	}
	for i, spec := range cfg.Regions {
		if _, dup := w.byName[spec.Name]; dup {
			return nil, fmt.Errorf("sim: region %s listed twice", spec.Name)
		}
		w.byName[spec.Name] = i
		r, err := newSimRegion(w, i, spec)
		if err != nil {
			return nil, fmt.Errorf("sim: region %s: %w", spec.Name, err)
		}
		w.regions = append(w.regions, r)
	}
	// Every region has joined the mesh: its peers are members from the
	// start, with no load data and no RTT samples yet.
	for _, r := range w.regions {
		for _, p := range w.regions {
			if p != r {
				r.table.Join(p.spec.Name, mesh.Meta{Region: p.spec.Name, Jurisdiction: p.spec.Jurisdiction})
			}
		}
	}
	cp := cfg.Control
	for i := range w.regions {
		// Stagger the periodic work so regions do not move in lockstep.
		offset := time.Duration(i) * cp.ScrapeInterval / time.Duration(len(w.regions))
		for _, kind := range []eventKind{evScrape, evHealth, evPump, evLoadCheck, evDigestPublish, evProbe} {
			w.push(event{at: offset, kind: kind, region: int32(i)})
		}
	}
	for i, f := range cfg.Faults {
		if err := w.checkFault(f); err != nil {
			return nil, fmt.Errorf("sim: fault %d: %w", i, err)
		}
		w.push(event{at: f.At, kind: evFaultStart, payload: f})
		w.push(event{at: f.At + f.Duration, kind: evFaultEnd, payload: f})
	}
	return w, nil
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

// lost reports whether the link from a to b loses one packet now.
func (w *world) lost(a, b int) bool {
	p := w.loss[a][b]
	return p > 0 && w.rng.Float64() < p
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

// every reschedules a periodic event of region r.
func (w *world) every(kind eventKind, r int32, interval time.Duration) {
	w.push(event{at: w.now + interval, kind: kind, region: r})
}

func (w *world) loop() error {
	for w.q.len() > 0 {
		if w.srcDone && w.outstanding == 0 {
			break
		}
		e := w.q.pop()
		if w.cfg.Drain > 0 && w.srcDone && e.at > w.lastArrival+w.cfg.Drain {
			break
		}
		w.now = e.at
		w.events++
		if err := w.handle(e); err != nil {
			return err
		}
	}
	// Whatever is still outstanding when the run stops is counted, not hidden.
	for _, sr := range w.live {
		w.collect.Add(w.sample(sr, "unfinished"))
	}
	return nil
}

// handle runs one event at w.now.
func (w *world) handle(e event) error {
	cp := w.cfg.Control
	var r *simRegion
	if int(e.region) < len(w.regions) {
		r = w.regions[e.region]
	}
	switch e.kind {
	case evArrival:
		w.lastArrival = w.now
		w.arrive(e.req, r)
		return w.pullArrival()
	case evForwardArrive:
		e.req.req.Forwarded = true
		r.core.Submit(r.now(), e.req.req)
		r.scheduleExpire()
	case evForwardFailed:
		w.forwardFailed(e.req, r, e.payload.(*apierr.Error))
	case evForwardDone:
		r.core.ForwardDone(e.payload.(string))
	case evRefused:
		r.failedBeforeFirstByte(e.req)
	case evStepEnd:
		r.stepEnd(int(e.replica), e.epoch)
	case evScrape:
		r.scrape()
		w.every(evScrape, e.region, cp.ScrapeInterval)
	case evHealth:
		r.healthCheck()
		w.every(evHealth, e.region, cp.HealthInterval)
	case evPump:
		r.pump()
		w.every(evPump, e.region, cp.PumpInterval)
	case evLoadCheck:
		r.checkLoad()
		w.every(evLoadCheck, e.region, cp.LoadCheck)
	case evLoadArrive:
		msg := e.payload.(loadMsg)
		r.table.ObserveLoad(w.regions[e.replica].spec.Name, msg.seq, msg.load, r.now())
	case evDigestPublish:
		r.publishDigest()
		w.every(evDigestPublish, e.region, cp.DigestInterval)
	case evDigestArrive:
		r.table.ObserveDigest(w.regions[e.replica].spec.Name, e.payload.(*digest.Digest), r.now())
	case evProbe:
		r.probe()
		w.every(evProbe, e.region, cp.ProbeInterval)
	case evProbeResult:
		p := e.payload.(probeResult)
		r.table.ObserveProbe(p.peer, p.rtt, p.ok, r.now())
	case evExpire:
		if r.expireAt == w.now {
			r.expireAt = -1
		}
		r.core.Expire(r.now())
		r.scheduleExpire()
	case evFaultStart:
		w.fault(e.payload.(Fault), true)
	case evFaultEnd:
		w.fault(e.payload.(Fault), false)
	}
	return nil
}

func (w *world) arrive(sr *simRequest, r *simRegion) {
	w.live[sr.req] = sr
	w.outstanding++
	sr.req.Arrival = w.clock(w.now)
	w.series.arrival(r.idx, w.now)
	r.core.Submit(r.now(), sr.req)
	r.scheduleExpire()
}

// forward sends a request across the WAN; it arrives one link delay later.
func (w *world) forward(sr *simRequest, from, to int) {
	w.series.forward(from, w.now)
	w.push(event{at: w.now + w.oneWay(from, to), kind: evForwardArrive, region: int32(to), req: sr})
}

// rejected ends a request the balancer of region at refused. A request
// forwarded in goes back to its ingress, which retries a 5xx locally (as
// the proxy retries a failed forward) or passes the error on.
func (w *world) rejected(sr *simRequest, at int, err *apierr.Error) {
	if at != sr.ingress && sr.forwardedTo == at {
		w.push(event{at: w.now + w.oneWay(at, sr.ingress), kind: evForwardFailed, region: int32(sr.ingress), req: sr, payload: err})
		return
	}
	w.drop(sr, string(err.Code))
}

// forwardFailed handles a peer's refusal at the ingress r.
func (w *world) forwardFailed(sr *simRequest, r *simRegion, err *apierr.Error) {
	r.core.ForwardDone(w.regions[sr.forwardedTo].spec.Name)
	sr.forwardedTo = -1
	if err.Status() < 500 || sr.retries >= w.cfg.Retries {
		w.drop(sr, string(err.Code))
		return
	}
	sr.retries++
	sr.req.Forwarded = true // the peer failed: serve it here
	r.core.Submit(r.now(), sr.req)
	r.scheduleExpire()
}

// finish records a completed request. The client sees the first token and
// the end one link delay later if another region served it, and the
// ingress's forward ends then.
func (w *world) finish(sr *simRequest, s *engine.Sequence) {
	back := time.Duration(0)
	if sr.served != sr.ingress {
		back = w.oneWay(sr.served, sr.ingress)
	}
	if sr.forwardedTo >= 0 {
		w.push(event{at: w.now + back, kind: evForwardDone, region: int32(sr.ingress), payload: w.regions[sr.forwardedTo].spec.Name})
	}
	smp := w.sample(sr, "")
	smp.TTFT = sr.firstToken + back - sr.arrival
	smp.End = w.now + back
	smp.OutputTokens, smp.CachedTokens = s.Generated, s.CachedTokens
	w.collect.Add(smp)
	w.settle(sr)
}

// sample is what the client of sr saw, for a request that ended with
// reason (or completed, when reason is empty).
func (w *world) sample(sr *simRequest, reason string) results.Sample {
	s := results.Sample{Ingress: w.regions[sr.ingress].spec.Name, Start: sr.arrival, PromptTokens: sr.req.PromptTokens,
		Retried: sr.retries > 0, Dropped: reason}
	if reason == "" {
		s.Served = w.regions[sr.served].spec.Name
		s.Held = sr.dispatched - sr.arrival
	}
	return s
}

// settle forgets a request that completed or was dropped.
func (w *world) settle(sr *simRequest) {
	delete(w.live, sr.req)
	w.outstanding--
}

func (w *world) drop(sr *simRequest, reason string) {
	if sr.forwardedTo >= 0 {
		// Whatever ends a forwarded request ends the ingress's forward.
		w.push(event{at: w.now, kind: evForwardDone, region: int32(sr.ingress), payload: w.regions[sr.forwardedTo].spec.Name})
	}
	w.collect.Add(w.sample(sr, reason))
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
	case RTTSpike, LinkLoss:
		_, okA := w.byName[f.A]
		_, okB := w.byName[f.B]
		if !okA || !okB || f.A == f.B {
			return fmt.Errorf("%s needs two different known regions", f.Kind)
		}
		if f.Kind == RTTSpike && f.RTT <= 0 {
			return fmt.Errorf("rtt-spike needs a positive RTT")
		}
		if f.Kind == LinkLoss && (f.Loss <= 0 || f.Loss > 1) {
			return fmt.Errorf("link-loss needs a loss in (0, 1]")
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
	case LinkLoss:
		a, b := w.byName[f.A], w.byName[f.B]
		loss := 0.0
		if start {
			loss = f.Loss
		}
		w.loss[a][b], w.loss[b][a] = loss, loss
	}
}
