package sim

import (
	"strconv"
	"time"

	"skywalker/internal/apierr"
	"skywalker/internal/engine"
	"skywalker/internal/mesh"
	"skywalker/internal/policy"
	"skywalker/internal/region"
	"skywalker/internal/request"
)

// simRequest tracks one request through the simulation.
type simRequest struct {
	req         *request.Request
	client      int // the site its client is in
	ingress     int // the router its client sends to
	at          int // the router holding or serving it; -1 while it crosses the WAN
	forwardedTo int // the router the ingress forwarded it to, or -1
	arrival     time.Duration
	dispatched  time.Duration
	firstToken  time.Duration   // engine time of the first token; -1 until then
	queuedAt    time.Duration   // when a balancer last took it in (submitted, or routed again)
	held        time.Duration   // time spent in balancer queues so far, every router's
	retries     int             // times routed again after failing before its first byte
	replica     *replica        // where it runs (or is being sent) while dispatched
	attempt     *region.Attempt // its dispatch, while it has one
	via         *router         // the router that dispatched it (attempt's)
	forward     *region.Attempt // the ingress's forward of it, while it has one
	forwardSent time.Duration   // when forward was sent
	// forwardSawFirst: the forward's first token reached the ingress (its
	// first-token timeout stops).
	forwardSawFirst bool
	// routerSawFirst: its dispatch's first token reached its router (its
	// first-token timeout stops).
	routerSawFirst bool
	seq            *engine.Sequence
	gone           bool // ended: completed, dropped, or its client gave up
}

// replica is one engine at a site, known by its name to its router's
// core.
type replica struct {
	name   string
	model  string // the base model its engine serves
	site   int    // where the engine runs
	index  int    // in its router's replica table
	router *router
	eng    *engine.Engine
	cfg    engine.Config
	down   int    // overlapping faults holding it down
	hung   int    // overlapping faults holding its engine still (it takes requests, runs none)
	epoch  uint32 // incarnation; bumped by a crash
}

// router drives one region core with events and engine models: what the
// proxy does with HTTP, it does on the virtual clock. It observes its
// engines the way the proxy scrapes and health-checks vLLM (over the WAN
// for a single global router's remote replicas), hears its peer routers
// through a mesh.Table fed by simulated links, and hands dispatched
// requests to engines.
type router struct {
	w        *world
	idx      int
	site     int
	name     string    // the node's: its region's name, or region-N for its N-th other proxy
	region   string    // its region's name
	siblings []*router // the other proxies of its region
	front    []*router // every router in front of its replicas: itself and its siblings
	core     *region.Node
	replicas []*replica
	byName   map[string]*replica
	table    *mesh.Table // what this router knows of its peers
	loads    region.LoadPublisher
	sentGen  uint64 // digest generation last published
	expireAt time.Duration
	peerBuf  []region.Peer // the core's peers' snapshot, rewritten in place
}

// newRouter builds the router named name at site, in front of the
// replicas of sites (its own only, for a router per region; every site's,
// for one global router). shared, if set, are the engines another proxy of
// the region built: this router fronts the same ones.
func newRouter(w *world, idx, site int, name string, sites []int, shared []*replica) (*router, error) {
	spec := w.cfg.Regions[site]
	r := &router{w: w, idx: idx, site: site, name: name, region: spec.Name, expireAt: -1, table: mesh.NewTable(spec.Name, w.cfg.Control),
		loads: region.LoadPublisher{Interval: w.cfg.Control.LoadInterval}, byName: map[string]*replica{}}
	r.front = []*router{r}
	first := w.cfg.Regions[0].PoolSpecs()[0].Profile
	specs := map[string][]region.ReplicaSpec{}
	models := map[string]PoolSpec{} // each model's first pool: its profile and adapters
	for _, s := range sites {
		sp := w.cfg.Regions[s]
		n := 0
		for _, ps := range sp.PoolSpecs() {
			if _, ok := models[ps.Model]; !ok {
				models[ps.Model] = ps
			}
			for range ps.Replicas {
				cfg := engine.Config{Profile: ps.Profile.Slowed(sp.EngineSlowdown), MaxNumSeqs: ps.MaxNumSeqs, KVBlocks: ps.KVBlocks, MaxLoRAs: ps.MaxLoRAs, LoRALoad: ps.LoRALoad,
					KVEvents: w.cfg.KVEvents}
				var rp *replica
				if shared != nil {
					rp = shared[len(r.replicas)]
				} else {
					rp = &replica{name: sp.Name + "-" + strconv.Itoa(n), model: ps.Model, site: s, index: len(r.replicas), router: r, eng: engine.New(cfg), cfg: cfg}
				}
				n++
				r.replicas = append(r.replicas, rp)
				rs := region.ReplicaSpec{Name: rp.name}
				if s != site {
					rs.Jurisdiction, rs.RTT = sp.Jurisdiction, w.cfg.RTT[site][s]
				}
				specs[ps.Model] = append(specs[ps.Model], rs)
			}
		}
	}
	r.core = region.NewNode(func(model string) region.Config {
		c := w.cfg.regionConfig(spec, name, models[model].Profile, w.blockTokens)
		c.AdapterLoad = models[model].LoRALoad
		return c
	}, func(model string) (policy.Policy, error) {
		return policy.New(w.cfg.Policy, w.cfg.policyConfig(models[model].Profile, first))
	}, r.delivered)
	if err := r.core.SetReplicas(specs); err != nil {
		return nil, err
	}
	for _, rp := range r.replicas {
		r.byName[rp.name] = rp
	}
	return r, nil
}

func (r *router) now() time.Time { return r.w.clock(r.w.now) }

// EngineMetrics is what scraping an engine's /metrics reports, read
// straight from the model: the simulator's side of the scrape that the
// proxy does over HTTP (the parity test checks the two agree).
func EngineMetrics(e *engine.Engine) region.Metrics {
	cfg := e.Config()
	m := region.Metrics{Known: true, Waiting: e.Waiting(), Running: e.Running(), KVUsage: e.KVUsage(),
		KVBlocks: cfg.KVBlocks, BlockSize: cfg.BlockSize}
	if cfg.MaxLoRAs > 0 { // vLLM exports vllm:lora_requests_info when LoRA is enabled
		m.MaxLoRAs = cfg.MaxLoRAs
		m.RunningAdapters, _, _ = e.LoRAs()
	}
	return m
}

// scrape observes every replica's metrics as the proxy's scraper does (a
// dead replica's scrape fails: zero metrics; a remote replica's answer
// crosses the WAN back), then refreshes the peers and pumps, as the proxy
// does after each scrape round.
func (r *router) scrape() {
	for _, rp := range r.replicas {
		m := region.Metrics{}
		if rp.down == 0 {
			m = EngineMetrics(rp.eng)
			if r.w.cfg.Regions[rp.site].BelievedCacheTokens > 0 {
				m.KVBlocks, m.BlockSize = 0, 0 // the engine does not say
			}
		}
		if rp.site == r.site {
			r.core.Scraped(rp.name, m, nil)
			continue
		}
		r.w.push(event{at: r.w.now + r.w.oneWay(rp.site, r.site), kind: evScrapeResult, router: int32(r.idx), replica: int32(rp.index), payload: m})
	}
	r.pump()
}

// healthCheck probes every replica's /health: a dead one fails.
func (r *router) healthCheck() {
	for _, rp := range r.replicas {
		r.core.HealthChecked(rp.name, rp.down == 0)
	}
}

// pump refreshes the peers' snapshot from the table and re-routes held
// requests: the proxy's periodic pump.
func (r *router) pump() {
	r.peerBuf = r.table.AppendPeers(r.peerBuf, r.now())
	r.core.SetPeers(r.peerBuf)
	r.core.Pump(r.now())
	r.scheduleExpire()
}

// submit hands a request to the router's balancer.
func (r *router) submit(sr *simRequest) {
	sr.at, sr.queuedAt = r.idx, r.w.now
	r.core.Submit(r.now(), sr.req)
	r.scheduleExpire()
}

// delivered receives the region core's attempts.
func (r *router) delivered(a *region.Attempt) {
	sr := r.w.live[a.Request]
	if sr == nil || sr.gone {
		a.End(r.now(), region.Released) // its client gave up as it was routed
		return
	}
	if a.Err != nil {
		r.w.rejected(sr, r.idx, a.Err)
		return
	}
	sr.held += r.w.now - sr.queuedAt
	switch {
	case a.Dispatched():
		rp := r.byName[a.Replica]
		sr.dispatched, sr.replica, sr.attempt, sr.via, sr.routerSawFirst = r.w.now, rp, a, r, false
		r.watchFirstToken(sr, a)
		switch {
		case rp.site != r.site:
			r.w.push(event{at: r.w.now + r.w.oneWay(r.site, rp.site), kind: evDispatchArrive, router: int32(r.idx), req: sr, payload: a})
		case r.w.stepping:
			r.w.deferred = append(r.w.deferred, sr)
		default:
			r.reachEngine(sr)
		}
	case a.Forwarded():
		to := r.w.proxyOf(a.Peer.Region)
		sr.forwardedTo, sr.at, sr.forward, sr.forwardSent, sr.forwardSawFirst = to.idx, -1, a, r.w.now, false
		r.w.forward(sr, r, to)
		r.w.push(event{at: r.w.now + a.FirstTokenTimeout(), kind: evForwardCheck, router: int32(r.idx), req: sr, payload: a})
	}
}

// refusedAfter is how long a dispatch to a dead replica takes to fail: a
// refused connection on the replica's own network.
const refusedAfter = time.Millisecond

// watchFirstToken starts the first-token timeout of a dispatch, as the
// proxy's does: read from the core now, and again when it is reached
// (the region keeps learning). While nothing is learned yet (the
// initial timeout, a minute) it is read every firstTokenRecheck, as the
// proxy reads it, so that a hung engine's first attempts time out as soon
// as other replicas' first tokens say how long is too long; a learned
// timeout moves slowly, and reading it only when it is reached spares an
// event per waiting request per second.
func (r *router) watchFirstToken(sr *simRequest, a *region.Attempt) {
	r.w.push(event{at: r.w.now + firstTokenWait(a.FirstTokenTimeout()), kind: evFirstTokenCheck, router: int32(r.idx), req: sr, payload: a})
}

// firstTokenWait is when a dispatch whose timeout is left is checked
// next (see watchFirstToken).
func firstTokenWait(left time.Duration) time.Duration {
	if left >= region.InitialFirstTokenTimeout {
		return min(left, firstTokenRecheck)
	}
	return left
}

// firstTokenRecheck is how often a waiting dispatch's learned timeout is
// read again (the proxy's firstByteRecheck).
const firstTokenRecheck = time.Second

// checkFirstToken ends the dispatch a of sr TimedOut if its first token
// has not reached the router within the attempt's timeout: its engine
// drops the sequence (the proxy closes the connection) and the core
// routes it again, never back to that replica.
func (r *router) checkFirstToken(sr *simRequest, a *region.Attempt) {
	if sr.attempt != a || sr.routerSawFirst || sr.gone {
		return // answered, ended, or its client left
	}
	waited := r.w.now - sr.dispatched
	limit := a.FirstTokenTimeout()
	if waited < limit {
		r.w.push(event{at: r.w.now + firstTokenWait(limit-waited), kind: evFirstTokenCheck, router: int32(r.idx), req: sr, payload: a})
		return
	}
	r.w.timeouts++
	if sr.seq != nil {
		sr.replica.eng.Abort(sr.seq)
	}
	r.failed(sr, region.TimedOut)
}

// checkForward ends the forward a of sr TimedOut if its first token has
// not reached this router, its ingress, within the forward's timeout
// (region.Attempt.FirstTokenTimeout, read again when it is reached), as
// the proxy cuts a forward whose first byte is overdue: the peer withdraws
// the request at once (world.withdraw: the proxy's cut closes the
// connection, and the peer proxy cancels its engine's request), and the
// core routes it again here.
func (r *router) checkForward(sr *simRequest, a *region.Attempt) {
	if sr.forward != a || sr.forwardSawFirst || sr.gone {
		return // answered, ended, or its client left
	}
	waited := r.w.now - sr.forwardSent
	if limit := a.FirstTokenTimeout(); waited < limit {
		r.w.push(event{at: r.w.now + limit - waited, kind: evForwardCheck, router: int32(r.idx), req: sr, payload: a})
		return
	}
	r.w.forwardTimeouts++
	r.w.withdraw(sr)
	sr.forward, sr.forwardedTo = nil, -1
	sr.req.Forwarded = false // the peer's mark: at its ingress the request is its own
	sr.at = r.idx
	next := a.End(r.now(), region.TimedOut)
	r.scheduleExpire()
	r.follow(sr, next)
}

// reachEngine is a dispatched request arriving at its replica.
func (r *router) reachEngine(sr *simRequest) {
	rp := sr.replica
	if sr.gone { // its client gave up on the way
		r.end(sr, region.Released)
		return
	}
	if rp.down > 0 {
		r.w.push(event{at: r.w.now + refusedAfter + r.w.oneWay(rp.site, r.site), kind: evRefused, router: int32(r.idx), req: sr, payload: sr.attempt})
		return
	}
	req := sr.req
	if r.w.chains.lostAt(req, rp) {
		// The engine answers 404: the core says whether the chain starts
		// over here (region.Attempt.Answered) or the client gets the 404.
		if next := sr.attempt.Answered(r.now(), 404, true); !next.StartOver {
			r.end(sr, region.Released)
			r.w.drop(sr, string(apierr.PreviousResponseNotFound))
			return
		}
	}
	seq := &engine.Sequence{ID: req.ID, PromptTokens: req.PromptTokens, MaxTokens: max(req.MaxTokens, 1), Units: req.Blocks,
		UnitTokens: req.BlockTokens, Adapter: req.Adapter, Arrival: r.now(), Data: sr}
	if err := rp.eng.Add(seq); err != nil {
		// The engine answers 400 (the prompt can never fit): the client
		// gets it, and the replica is not to blame.
		r.end(sr, region.Released)
		r.w.drop(sr, string(apierr.InvalidRequest))
		return
	}
	sr.seq = seq
	r.w.chains.served(req, rp) // its response exists from here (response.created)
	r.kick(rp)
}

// end ends sr's dispatch now with how; the core frees the slot, pumps,
// and says what comes next.
func (r *router) end(sr *simRequest, how region.Outcome) region.Next {
	a := sr.attempt
	sr.attempt, sr.replica, sr.seq = nil, nil, nil
	if a == nil {
		return region.Next{}
	}
	next := a.End(r.now(), how)
	r.scheduleExpire()
	return next
}

// failedBeforeFirstByte handles a request whose replica failed before it
// streamed anything: the failure counts against the replica, and the core
// routes the request again within its retry bound, as the proxy retries.
// Once its client has left, nothing is retried and the replica is not
// blamed (the proxy cannot tell the two apart either).
func (r *router) failedBeforeFirstByte(sr *simRequest) {
	if sr.gone {
		r.end(sr, region.Released)
		return
	}
	r.failed(sr, region.ReplicaFailed)
}

// failed ends sr's dispatch, which failed before its first token (how:
// ReplicaFailed or TimedOut), and follows what the core says: routed
// again, or the client's error.
func (r *router) failed(sr *simRequest, how region.Outcome) {
	sr.at = r.idx
	r.follow(sr, r.end(sr, how))
}

// follow does what the core said comes next for sr, whose attempt here
// failed before its first token: it is routed again (the core holds it),
// or its client gets the error.
func (r *router) follow(sr *simRequest, next region.Next) {
	switch {
	case next.Retry:
		sr.retries++
		sr.queuedAt = r.w.now
	case next.Err != nil:
		r.w.rejected(sr, r.idx, next.Err)
	}
}

// kick starts replica rp's next engine step if it is idle and has work.
func (r *router) kick(rp *replica) {
	if rp.down > 0 || rp.hung > 0 || rp.eng.Busy() {
		return
	}
	d, ok := rp.eng.BeginStep(r.now())
	if !ok {
		return
	}
	if r.w.cfg.KVEvents {
		r.publishKVEvents(rp) // what scheduling the step evicted, as vLLM publishes it
	}
	r.w.siteBusy[rp.site] += d
	r.w.series.busy(rp.site, r.w.now, d, rp.eng.BudgetShare())
	r.w.push(event{at: r.w.now + d, kind: evStepEnd, router: int32(r.idx), replica: int32(rp.index), epoch: rp.epoch})
}

// stepEnd applies a finished engine step and starts the next; a freed slot
// pumps the head of the queue, as the proxy does when a request ends.
func (r *router) stepEnd(i int, epoch uint32) {
	rp := r.replicas[i]
	if epoch != rp.epoch {
		return // the engine crashed during the step
	}
	w := r.w
	w.stepping = true
	rp.eng.EndStep(r.now(), sink{rp: rp})
	w.stepping = false
	if w.cfg.KVEvents {
		r.publishKVEvents(rp)
	}
	for i, sr := range w.deferred {
		w.deferred[i] = nil
		if sr.attempt != nil && sr.replica != nil {
			sr.via.reachEngine(sr)
		}
	}
	w.deferred = w.deferred[:0]
	r.kick(rp)
}

// publishKVEvents hands the KV events rp's engine recorded since it last
// published (engine.TakeKVEvents: after each step begins and ends) to
// every router in front of it (each proxy of a region subscribes to every
// engine): at once in its own region, a WAN crossing later for a remote
// replica.
func (r *router) publishKVEvents(rp *replica) {
	ev := rp.eng.TakeKVEvents()
	if len(ev) == 0 {
		return
	}
	for _, to := range r.front {
		if rp.site == to.site {
			to.core.EngineEvents(to.now(), rp.name, 0, ev)
			continue
		}
		to.w.push(event{at: to.w.now + to.w.oneWay(rp.site, to.site), kind: evKVEvents, router: int32(to.idx), replica: int32(rp.index), payload: ev})
	}
}

// sink receives a replica's engine events; each request's go to the
// router that dispatched it (simRequest.via).
type sink struct {
	rp *replica
}

// FirstToken tells the router at once, or after the WAN crossing back for
// a remote replica; and the ingress that forwarded the request, once the
// first token has crossed back to it (as the proxy's first byte does).
func (k sink) FirstToken(s *engine.Sequence, _ time.Time) {
	sr := s.Data.(*simRequest)
	r := sr.via
	sr.firstToken = r.w.now
	if sr.forward != nil {
		in := r.w.routers[sr.ingress]
		r.w.push(event{at: r.w.now + r.w.oneWay(k.rp.site, in.site), kind: evFirstNotice, router: int32(in.idx), req: sr, payload: sr.forward})
	}
	if k.rp.site == r.site {
		sr.routerSawFirst = true
		sr.attempt.FirstToken(r.now())
		return
	}
	r.w.push(event{at: r.w.now + r.w.oneWay(k.rp.site, r.site), kind: evFirstNotice, router: int32(r.idx), req: sr, payload: sr.attempt})
}

func (k sink) Token(*engine.Sequence, time.Time) {}

// Finished books the request's end at its router — at once for a replica
// in the router's own region, after the WAN crossing back for a remote one
// — and tells the client.
func (k sink) Finished(s *engine.Sequence, _ time.Time) {
	sr := s.Data.(*simRequest)
	r, rp, w := sr.via, k.rp, sr.via.w
	sr.seq = nil
	sr.attempt.CacheReported(s.CachedTokens) // as the engine's usage reports it
	if rp.site == r.site {
		r.end(sr, region.Served)
	} else {
		w.push(event{at: w.now + w.oneWay(rp.site, r.site), kind: evEndNotice, router: int32(r.idx), req: sr, payload: sr.attempt})
		sr.attempt, sr.replica = nil, nil
	}
	w.finish(sr, rp, s)
}

// checkLoad publishes the load summary to every peer router when it is
// due; each copy arrives one link delay later, unless the link loses it.
func (r *router) checkLoad() {
	l := r.core.Load()
	seq, due := r.loads.Due(r.now(), l)
	if !due {
		return
	}
	r.w.series.queue(r.site, r.w.now, l.Queued)
	for _, p := range r.w.routers {
		if p.region != r.region && !r.w.lost(r.site, p.site) {
			r.w.push(event{at: r.w.now + r.w.oneWay(r.site, p.site), kind: evLoadArrive, router: int32(p.idx), replica: int32(r.idx),
				payload: loadMsg{seq: seq, load: l}})
		}
	}
}

// shareDispatches tells the other proxies of the region what this one
// dispatched (and what ended) since the last round, as the mesh does
// every LoadCheck: they hear it a LAN crossing later.
func (r *router) shareDispatches() {
	if len(r.siblings) == 0 || r.w.cfg.NoDispatchSharing {
		return
	}
	told := r.core.TakeDispatches()
	if len(told) == 0 {
		return
	}
	for _, s := range r.siblings {
		r.w.push(event{at: r.w.now + siblingLatency, kind: evSiblingDispatches, router: int32(s.idx), payload: siblingMsg{from: r.name, dispatches: told}})
	}
}

// siblingLatency is a message's way between two proxies of one region.
const siblingLatency = 500 * time.Microsecond

// siblingMsg is what a proxy tells the others of its region.
type siblingMsg struct {
	from       string
	dispatches []region.SiblingDispatch
}

// loadMsg is a load summary in flight.
type loadMsg struct {
	seq  uint64
	load region.Load
}

// publishDigest sends a new digest generation to every peer router over
// the mesh's reliable channel: a fresh TCP connection (one RTT) and the
// message (half of one).
func (r *router) publishDigest() {
	d := r.core.Digest()
	if d.Generation == r.sentGen {
		return
	}
	r.sentGen = d.Generation
	for _, p := range r.w.routers {
		if p.region != r.region {
			r.w.push(event{at: r.w.now + 3*r.w.oneWay(r.site, p.site), kind: evDigestArrive, router: int32(p.idx), replica: int32(r.idx), payload: d})
		}
	}
}

// probeResult is a probe's outcome arriving back at the prober.
type probeResult struct {
	peer string
	rtt  time.Duration
	ok   bool
}

// probe pings one node of every peer region once: the answer comes back
// after the link's RTT (with jitter each way), or the probe times out if
// the link lost it.
func (r *router) probe() {
	for _, proxies := range r.w.byRegion {
		p := proxies[0]
		if p.region == r.region || p == r {
			continue
		}
		res := probeResult{peer: p.region}
		if r.w.lost(r.site, p.site) || r.w.lost(p.site, r.site) {
			r.w.push(event{at: r.w.now + probeTimeout, kind: evProbeResult, router: int32(r.idx), payload: res})
			continue
		}
		res.rtt, res.ok = r.w.oneWay(r.site, p.site)+r.w.oneWay(p.site, r.site), true
		r.w.push(event{at: r.w.now + res.rtt, kind: evProbeResult, router: int32(r.idx), payload: res})
	}
}

// probeTimeout is how long a lost probe takes to count as a failure
// (memberlist's WAN probe timeout).
const probeTimeout = 3 * time.Second

// scheduleExpire makes sure an evExpire is queued for the balancer's
// earliest deadline.
func (r *router) scheduleExpire() {
	d, ok := r.core.NextDeadline()
	if !ok {
		return
	}
	at := d.Sub(r.w.clock(0))
	if r.expireAt >= 0 && r.expireAt <= at {
		return
	}
	r.expireAt = at
	r.w.push(event{at: at, kind: evExpire, router: int32(r.idx)})
}

// crash takes rp down: its engine and cache are lost. The router learns it
// the way the proxy would: the requests it had there fail (those that had
// not streamed are routed again), dispatches to it are refused, and its
// scrapes and health checks fail until it is ejected.
func (r *router) crash(rp *replica) {
	rp.down++
	if rp.down > 1 {
		return
	}
	rp.epoch++
	var lost []*simRequest
	rp.eng.ForEach(func(s *engine.Sequence) { lost = append(lost, s.Data.(*simRequest)) })
	r.w.sitePreemptions[rp.site] += rp.eng.Stats().Preemptions
	rp.eng = engine.New(rp.cfg)
	if r.w.cfg.KVEvents {
		for _, to := range r.front {
			to.core.EngineStreamChanged(rp.name, region.StreamRestarted) // its events begin again, from an empty cache
		}
	}
	for _, sr := range lost {
		if sr.firstToken >= 0 {
			sr.via.end(sr, region.BrokeMidStream)
			r.w.drop(sr, "failed_midstream")
			continue
		}
		sr.via.failedBeforeFirstByte(sr)
	}
}

// recover brings rp back with an empty cache; health checks re-admit it.
func (r *router) recover(rp *replica) {
	if rp.down > 0 {
		rp.down--
	}
}
