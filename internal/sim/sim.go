package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"skywalker/internal/apierr"
	"skywalker/internal/digest"
	"skywalker/internal/engine"
	"skywalker/internal/kvevents"
	"skywalker/internal/mesh"
	"skywalker/internal/region"
	"skywalker/internal/request"
	"skywalker/internal/results"
	"skywalker/internal/workload"
)

// epoch is virtual time zero.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// world is one run's state. Sites are the regions, where engines run and
// clients are; routers are the balancers, one per site or one for all.
type world struct {
	cfg             Config
	now             time.Duration
	q               eventQueue
	rng             *rand.Rand
	src             workload.Source
	srcDone         bool
	siteAt          map[string]int // site name → index in cfg.Regions
	routers         []*router
	byRegion        [][]*router    // site → the routers its clients send to (its proxies, or the one global router)
	sent            []int          // site → requests its clients sent (they go to its proxies in turn)
	forwarded       map[string]int // region → forwards sent to it (they go to its proxies in turn)
	stepping        bool           // an engine step's events are being applied (see router.stepEnd)
	deferred        []*simRequest  // dispatched while stepping: they reach their engines after the step
	baseRTT         [][]time.Duration
	rtt             [][]time.Duration
	loss            [][]float64
	blockTokens     int
	live            map[*request.Request]*simRequest
	outstanding     int
	lastArrival     time.Duration
	events          int64
	collect         *results.Collector
	series          *series
	siteBusy        []time.Duration
	sitePreemptions []int64 // of engines lost to crashes
	timeouts        int64   // dispatches ended TimedOut
	forwardTimeouts int64   // forwards ended TimedOut at their ingress
	// forwardsWasted is the forwards withdrawn (timed out at the ingress,
	// or their client left) after the peer's engine had begun them, and
	// wastedEngineTime the engine time they had run there: work peers
	// computed for nobody.
	forwardsWasted   int64
	wastedEngineTime time.Duration
	stopped          bool        // ended early: StopAfterMisses
	chains           chains      // Responses chains and follow-up turns (chains.go)
	observe          func(event) // tests: called after each event is handled
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

// newWorld builds the routers and schedules the periodic work and faults.
func newWorld(cfg Config, src workload.Source, span time.Duration, blockTokens int) (*world, error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	n := len(cfg.Regions)
	w := &world{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x51a)), src: src, siteAt: map[string]int{},
		byRegion: make([][]*router, n), sent: make([]int, n), forwarded: map[string]int{}, blockTokens: blockTokens, live: map[*request.Request]*simRequest{},
		collect: results.NewCollector(cfg.SLO), siteBusy: make([]time.Duration, n), sitePreemptions: make([]int64, n)}
	bucket := cfg.Bucket
	if bucket <= 0 {
		bucket = max(span/96, time.Second)
	}
	w.series = newSeries(n, bucket)
	if cfg.RecordOutcomes {
		w.collect.RecordOutcomes()
	}
	w.baseRTT = cfg.RTT
	w.rtt = make([][]time.Duration, n)
	w.loss = make([][]float64, n)
	for i := range cfg.RTT {
		w.rtt[i] = append([]time.Duration(nil), cfg.RTT[i]...)
		w.loss[i] = make([]float64, n)
	}
	for i, spec := range cfg.Regions {
		if _, dup := w.siteAt[spec.Name]; dup {
			return nil, fmt.Errorf("sim: region %s listed twice", spec.Name)
		}
		w.siteAt[spec.Name] = i
	}
	if err := w.buildRouters(); err != nil {
		return nil, err
	}
	cp := cfg.Control
	for i := range w.routers {
		// Stagger the periodic work so routers do not move in lockstep.
		offset := time.Duration(i) * cp.ScrapeInterval / time.Duration(len(w.routers))
		kinds := []eventKind{evScrape, evHealth, evPump}
		if len(w.routers) > 1 {
			kinds = append(kinds, evLoadCheck, evDigestPublish, evProbe)
		}
		for _, kind := range kinds {
			w.push(event{at: offset, kind: kind, router: int32(i)})
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

// buildRouters places the balancers: one per region, each in front of its
// own replicas and meeting the others in the mesh; or, with Config.Router,
// one router in that region in front of every region's replicas, which
// every client reaches across the WAN.
func (w *world) buildRouters() error {
	var all []int
	for i := range w.cfg.Regions {
		all = append(all, i)
	}
	if w.cfg.Router != "" {
		site, ok := w.siteAt[w.cfg.Router]
		if !ok {
			return fmt.Errorf("sim: the router's region %q is not a listed region", w.cfg.Router)
		}
		r, err := newRouter(w, 0, site, w.cfg.Router, all, nil)
		if err != nil {
			return fmt.Errorf("sim: router in %s: %w", w.cfg.Router, err)
		}
		w.routers = []*router{r}
		for i := range w.byRegion {
			w.byRegion[i] = []*router{r} // every client sends to it
		}
		return nil
	}
	for site := range all {
		spec := w.cfg.Regions[site]
		var shared []*replica
		for k := range spec.proxies() {
			name := spec.Name
			if k > 0 {
				name = fmt.Sprintf("%s-%d", spec.Name, k)
			}
			r, err := newRouter(w, len(w.routers), site, name, []int{site}, shared)
			if err != nil {
				return fmt.Errorf("sim: region %s: %w", spec.Name, err)
			}
			shared = r.replicas
			w.routers = append(w.routers, r)
			w.byRegion[site] = append(w.byRegion[site], r)
		}
		proxies := w.byRegion[site]
		for _, r := range proxies {
			for _, s := range proxies {
				if s != r {
					r.siblings = append(r.siblings, s)
				}
			}
			r.front = append([]*router{r}, r.siblings...)
			if len(r.siblings) > 0 && !w.cfg.NoDispatchSharing {
				r.core.ShareDispatches(true)
			}
		}
	}
	// Every router has joined the mesh: the other regions' nodes are
	// members from the start, with no load data and no RTT samples yet.
	for _, r := range w.routers {
		for _, p := range w.routers {
			if p.region != r.region {
				spec := w.cfg.Regions[p.site]
				r.table.Join(p.name, mesh.Meta{Region: spec.Name, Jurisdiction: spec.Jurisdiction})
			}
		}
	}
	return nil
}

func (w *world) clock(d time.Duration) time.Time { return epoch.Add(d) }

func (w *world) push(e event) { w.q.push(e) }

// oneWay is the delay of one crossing from site a to b, with jitter; zero
// inside a site.
func (w *world) oneWay(a, b int) time.Duration {
	if a == b {
		return 0
	}
	d := w.rtt[a][b] / 2
	if w.cfg.Jitter > 0 {
		d += time.Duration(w.rng.Int64N(int64(w.cfg.Jitter) + 1))
	}
	return d
}

// clientWay is one crossing between a client at site c and a router at
// site r: the WAN between regions, ClientRTT/2 inside one.
func (w *world) clientWay(c, r int) time.Duration {
	if c == r {
		return w.cfg.ClientRTT / 2
	}
	return w.oneWay(c, r)
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
	site, ok := w.siteAt[a.Region]
	if !ok {
		return fmt.Errorf("sim: arrival %s at unknown region %q", a.Request.ID, a.Region)
	}
	proxies := w.byRegion[site]
	in := proxies[w.sent[site]%len(proxies)].idx
	w.sent[site]++
	sr := &simRequest{req: a.Request, client: site, ingress: in, at: -1, forwardedTo: -1, arrival: a.At, firstToken: -1}
	w.push(event{at: a.At, kind: evArrival, router: int32(in), req: sr})
	return nil
}

// every reschedules a periodic event of router r.
func (w *world) every(kind eventKind, r int32, interval time.Duration) {
	w.push(event{at: w.now + interval, kind: kind, router: r})
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
		if w.observe != nil {
			w.observe(e)
		}
		if limit := w.cfg.StopAfterMisses; limit > 0 && w.collect.Misses() > limit {
			w.stopped = true
			return nil
		}
	}
	// Whatever is still outstanding when the run stops is counted, not hidden.
	for _, sr := range w.live {
		w.record(sr, w.sample(sr, "unfinished"))
	}
	return nil
}

// handle runs one event at w.now.
func (w *world) handle(e event) error {
	cp := w.cfg.Control
	var r *router
	if int(e.router) < len(w.routers) {
		r = w.routers[e.router]
	}
	switch e.kind {
	case evArrival:
		w.lastArrival = w.now
		w.arrive(e.req)
		return w.pullArrival()
	case evReachRouter:
		if !e.req.gone {
			r.submit(e.req)
		}
	case evForwardArrive:
		if !e.req.gone && e.req.forward == e.payload.(*region.Attempt) { // not cut on the way
			e.req.req.Forwarded = true // a peer routed it here
			r.submit(e.req)
		}
	case evForwardFailed:
		if f := e.payload.(forwardRefusal); f.forward == e.req.forward { // not cut meanwhile
			w.forwardFailed(e.req, r, f.err)
		}
	case evForwardDone:
		done := e.payload.(forwardDone)
		done.attempt.CacheReported(done.cachedTokens) // as the usage that crossed back reports it
		done.attempt.End(r.now(), region.Served)
		r.scheduleExpire()
	case evDispatchArrive:
		if e.req.attempt == e.payload.(*region.Attempt) { // not withdrawn on the way
			r.reachEngine(e.req)
		}
	case evRefused:
		if e.req.attempt == e.payload.(*region.Attempt) {
			r.failedBeforeFirstByte(e.req)
		}
	case evForwardCheck:
		r.checkForward(e.req, e.payload.(*region.Attempt))
	case evFirstTokenCheck:
		r.checkFirstToken(e.req, e.payload.(*region.Attempt))
	case evStepEnd:
		r.stepEnd(int(e.replica), e.epoch)
	case evEndNotice:
		e.payload.(*region.Attempt).End(r.now(), region.Served)
		r.scheduleExpire()
	case evFirstNotice:
		a := e.payload.(*region.Attempt)
		if a == e.req.attempt {
			e.req.routerSawFirst = true
		}
		if a == e.req.forward {
			e.req.forwardSawFirst = true
		}
		a.FirstToken(r.now())
	case evClientTimeout:
		w.giveUp(e.req)
	case evScrape:
		r.scrape()
		w.every(evScrape, e.router, cp.ScrapeInterval)
	case evKVEvents:
		rp := r.replicas[e.replica]
		r.core.EngineEvents(r.now(), rp.name, 0, e.payload.([]kvevents.Event))
	case evScrapeResult:
		rp := r.replicas[e.replica]
		r.core.Scraped(rp.name, e.payload.(region.Metrics), nil)
	case evHealth:
		r.healthCheck()
		w.every(evHealth, e.router, cp.HealthInterval)
	case evPump:
		r.pump()
		w.every(evPump, e.router, cp.PumpInterval)
	case evLoadCheck:
		r.checkLoad()
		r.shareDispatches()
		w.every(evLoadCheck, e.router, cp.LoadCheck)
	case evSiblingDispatches:
		told := e.payload.(siblingMsg)
		r.core.SiblingDispatched(told.from, told.dispatches)
	case evLoadArrive:
		msg := e.payload.(loadMsg)
		r.table.ObserveLoad(w.routers[e.replica].name, 0, msg.seq, msg.load, r.now())
	case evDigestPublish:
		r.publishDigest()
		w.every(evDigestPublish, e.router, cp.DigestInterval)
	case evDigestArrive:
		r.table.ObserveDigest(w.routers[e.replica].name, e.payload.(*digest.Digest), r.now())
	case evProbe:
		r.probe()
		w.every(evProbe, e.router, cp.ProbeInterval)
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

// arrive is a client sending a request: it reaches its router one link
// delay later (at once for a router in its own region), and its client
// gives up after ClientTimeout without a first token.
func (w *world) arrive(sr *simRequest) {
	w.chains.arrive(sr.req, w.cfg.ResponsesStartOver)
	w.live[sr.req] = sr
	w.outstanding++
	sr.req.Arrival = w.clock(w.now)
	w.series.arrival(sr.client, w.now)
	w.push(event{at: w.now + w.cfg.ClientTimeout, kind: evClientTimeout, req: sr})
	r := w.routers[sr.ingress]
	if d := w.clientWay(sr.client, r.site); d > 0 {
		w.push(event{at: w.now + d, kind: evReachRouter, router: int32(r.idx), req: sr})
		return
	}
	r.submit(sr)
}

// proxyOf is the proxy of region a forward to it goes to: its proxies in
// turn (a peer proxy's address is picked per request, see the proxy's
// send).
func (w *world) proxyOf(region string) *router {
	proxies := w.byRegion[w.siteAt[region]]
	r := proxies[w.forwarded[region]%len(proxies)]
	w.forwarded[region]++
	return r
}

// forward sends a request across the WAN to a peer router.
func (w *world) forward(sr *simRequest, from, to *router) {
	w.series.forward(from.site, w.now)
	w.push(event{at: w.now + w.oneWay(from.site, to.site), kind: evForwardArrive, router: int32(to.idx), req: sr, payload: sr.forward})
}

// rejected ends a request the balancer of router at refused. A request
// forwarded in goes back to its ingress, which retries a 5xx locally (as
// the proxy retries a failed forward) or passes the error on.
func (w *world) rejected(sr *simRequest, at int, err *apierr.Error) {
	if at != sr.ingress && sr.forwardedTo == at {
		sr.at = -1
		w.push(event{at: w.now + w.oneWay(w.routers[at].site, w.routers[sr.ingress].site), kind: evForwardFailed,
			router: int32(sr.ingress), req: sr, payload: forwardRefusal{sr.forward, err}})
		return
	}
	w.drop(sr, string(err.Code))
}

// forwardRefusal is a peer's refusal of the forward on its way back to
// the ingress.
type forwardRefusal struct {
	forward *region.Attempt
	err     *apierr.Error
}

// withdraw stops a forwarded request wherever it is at the peer, as the
// peer proxy does when its client (the ingress) closes the connection: an
// engine's sequence is aborted (its work so far was for nobody: counted
// in forwardsWasted and wastedEngineTime), a dispatch on its way is
// released, a held request cancelled. Its peer attempt ends Released.
func (w *world) withdraw(sr *simRequest) {
	switch {
	case sr.seq != nil:
		w.wasted(sr)
		sr.replica.eng.Abort(sr.seq)
		sr.via.end(sr, region.Released)
	case sr.replica != nil:
		sr.via.end(sr, region.Released)
	case sr.at >= 0:
		w.routers[sr.at].core.Cancel(sr.req)
		w.routers[sr.at].scheduleExpire()
	}
	sr.firstToken = -1
}

// wasted books the work sr's engine did for nobody, if sr is a forward
// whose engine had begun it.
func (w *world) wasted(sr *simRequest) {
	if started := sr.seq.StartedAt; sr.forward != nil && !started.IsZero() {
		w.forwardsWasted++
		w.wastedEngineTime += w.clock(w.now).Sub(started)
	}
}

// forwardFailed handles a peer's refusal at the ingress r as the proxy
// does: the core says what its status means (region.Attempt.Answered) —
// passed to the client (a chain's home region's 4xx), or the forward
// failed and the request is routed again (and served here) within the
// retry bound.
func (w *world) forwardFailed(sr *simRequest, r *router, err *apierr.Error) {
	if sr.gone {
		return // its client gave up; the forward was closed then
	}
	a := sr.forward
	sr.forward, sr.forwardedTo = nil, -1
	sr.req.Forwarded = false // the peer's mark: at its ingress the request is its own (the proxy's copy never had it)
	sr.at = r.idx
	next := a.Answered(r.now(), err.Status(), false) // the peer proxy's own refusal
	r.scheduleExpire()
	if next == (region.Next{}) { // the answer goes to the client: the attempt ends with it
		a.End(r.now(), region.Released)
		w.drop(sr, string(err.Code))
		return
	}
	if !next.Retry {
		w.drop(sr, string(err.Code))
		return
	}
	sr.retries++
	sr.queuedAt = w.now
}

// giveUp is a client that waited ClientTimeout without a first token: it
// closes the connection, and the request is withdrawn wherever it is, as
// the proxy withdraws a request whose client left.
func (w *world) giveUp(sr *simRequest) {
	if sr.gone || sr.firstToken >= 0 {
		return
	}
	switch {
	case sr.seq != nil:
		w.wasted(sr)
		rp := sr.replica
		rp.eng.Abort(sr.seq)
		sr.via.end(sr, region.Released)
	case sr.replica != nil:
		// On its way to a replica: released when it gets there (gone).
	case sr.at >= 0:
		w.routers[sr.at].core.Cancel(sr.req)
	}
	w.drop(sr, "client_timeout")
}

// finish records a completed request on rp. The client sees the first
// token and the end after the crossings back: replica to its router, that
// router to the ingress (a forwarded request), the ingress to the client.
func (w *world) finish(sr *simRequest, rp *replica, s *engine.Sequence) {
	r := sr.via
	back := w.oneWay(rp.site, r.site)
	if sr.forwardedTo >= 0 {
		in := w.routers[sr.ingress]
		back += w.oneWay(r.site, in.site)
		w.push(event{at: w.now + back, kind: evForwardDone, router: int32(sr.ingress), payload: forwardDone{sr.forward, s.CachedTokens}})
		sr.forward, sr.forwardedTo = nil, -1
	}
	back += w.clientWay(w.routers[sr.ingress].site, sr.client)
	smp := w.sample(sr, "")
	smp.Served = w.cfg.Regions[rp.site].Name
	smp.TTFT = sr.firstToken + back - sr.arrival
	smp.Parts = ttftParts(sr, s, smp.TTFT)
	smp.End = w.now + back
	smp.OutputTokens, smp.CachedTokens = s.Generated, s.CachedTokens
	w.record(sr, smp)
	w.settle(sr)
}

// forwardDone is a forward's end reaching its ingress, with the cached
// tokens its engine's usage reported.
type forwardDone struct {
	attempt      *region.Attempt
	cachedTokens int
}

// record counts a request as its client saw it: every request, or only
// those of Config.Model. A request no region of the fleet may serve (its
// data must stay in a jurisdiction where no region serves its model) is
// counted apart: no router could serve it.
func (w *world) record(sr *simRequest, s results.Sample) {
	if w.cfg.Model != "" && s.Model != w.cfg.Model {
		return
	}
	if !w.servable(sr.req) {
		w.collect.AddUnservable()
		return
	}
	w.collect.Add(s)
}

// servable reports whether some region of the fleet may serve req: one
// in its jurisdiction with replicas of its model.
func (w *world) servable(req *request.Request) bool {
	if req.Residency == "" {
		return true
	}
	for _, spec := range w.cfg.Regions {
		if !req.AllowedIn(spec.Jurisdiction) {
			continue
		}
		for _, ps := range spec.PoolSpecs() {
			if ps.Replicas > 0 && (ps.Model == req.Base || req.Base == "" || ps.Model == "") {
				return true
			}
		}
	}
	return false
}

// sample is what the client of sr saw, for a request that ended with
// reason (or completed, when reason is empty).
func (w *world) sample(sr *simRequest, reason string) results.Sample {
	s := results.Sample{ID: sr.req.ID, Ingress: w.cfg.Regions[sr.client].Name, Start: sr.arrival, PromptTokens: sr.req.PromptTokens,
		Retried: sr.retries > 0, Dropped: reason, Tenant: sr.req.Tenant, Class: sr.req.Class.String(), Model: sr.req.Base}
	if reason == "" {
		s.Held = sr.held
	}
	return s
}

// ttftParts splits a completed request's time to first token: its time
// held in balancer queues, in its engine's queue and in prefill, and the
// rest, on the network.
func ttftParts(sr *simRequest, s *engine.Sequence, ttft time.Duration) *results.TTFTParts {
	p := &results.TTFTParts{Hold: sr.held}
	if !s.StartedAt.IsZero() {
		p.EngineQueue = s.StartedAt.Sub(s.Arrival)
		p.Prefill = s.FirstTokenAt.Sub(s.StartedAt)
	}
	p.Network = max(ttft-p.Hold-p.EngineQueue-p.Prefill, 0)
	return p
}

// settle forgets a request that completed or was dropped.
func (w *world) settle(sr *simRequest) {
	sr.gone = true
	delete(w.live, sr.req)
	w.outstanding--
}

func (w *world) drop(sr *simRequest, reason string) {
	if sr.gone {
		return
	}
	if sr.forward != nil {
		// Whatever ends a forwarded request ends the ingress's forward.
		in := w.routers[sr.ingress]
		sr.forward.End(in.now(), region.Released)
		in.scheduleExpire()
	}
	sr.forward, sr.forwardedTo = nil, -1
	w.record(sr, w.sample(sr, reason))
	w.settle(sr)
}

func (w *world) checkFault(f Fault) error {
	if f.Duration <= 0 || f.At < 0 {
		return fmt.Errorf("%s needs a non-negative start and a positive duration", f.Kind)
	}
	switch f.Kind {
	case ReplicaCrash, RegionOutage, ReplicaHang:
		i, ok := w.siteAt[f.Region]
		if !ok {
			return fmt.Errorf("%s: unknown region %q", f.Kind, f.Region)
		}
		if f.Kind != RegionOutage && (f.Replica < 0 || f.Replica >= w.cfg.Regions[i].TotalReplicas()) {
			return fmt.Errorf("%s: region %s has no replica %d", f.Kind, f.Region, f.Replica)
		}
	case RTTSpike, LinkLoss:
		_, okA := w.siteAt[f.A]
		_, okB := w.siteAt[f.B]
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

// replicasOf lists the engines at the fault's region (one, for a crash).
func (w *world) replicasOf(f Fault) []*replica {
	site := w.siteAt[f.Region]
	var out []*replica
	for _, r := range w.routers {
		for _, rp := range r.replicas {
			if rp.router == r && rp.site == site && (f.Kind == RegionOutage || rp.name == f.Region+"-"+fmt.Sprint(f.Replica)) { // each engine once
				out = append(out, rp)
			}
		}
	}
	return out
}

func (w *world) fault(f Fault, start bool) {
	switch f.Kind {
	case ReplicaCrash, RegionOutage:
		for _, rp := range w.replicasOf(f) {
			if start {
				rp.router.crash(rp)
			} else {
				rp.router.recover(rp)
			}
		}
	case ReplicaHang:
		for _, rp := range w.replicasOf(f) {
			if start {
				rp.hung++
				continue
			}
			rp.hung--
			rp.router.kick(rp)
		}
	case RTTSpike:
		a, b := w.siteAt[f.A], w.siteAt[f.B]
		rtt := w.baseRTT[a][b]
		if start {
			rtt = f.RTT
		}
		w.rtt[a][b], w.rtt[b][a] = rtt, rtt
	case LinkLoss:
		a, b := w.siteAt[f.A], w.siteAt[f.B]
		loss := 0.0
		if start {
			loss = f.Loss
		}
		w.loss[a][b], w.loss[b][a] = loss, loss
	}
}
