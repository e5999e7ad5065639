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
	ingress     int
	served      int // region that dispatched it last, or -1
	forwardedTo int // region the ingress forwarded it to, or -1
	arrival     time.Duration
	dispatched  time.Duration
	firstToken  time.Duration // -1 until the first token
	retries     int           // times routed again after failing before its first byte
	replica     *replica      // where it runs while dispatched
}

// replica is one engine of a region, and its handle in the region core.
type replica struct {
	name   string
	handle *region.Replica
	eng    *engine.Engine
	cfg    engine.Config
	down   int    // overlapping faults holding it down
	epoch  uint32 // incarnation; bumped by a crash
}

// simRegion drives one region core with events and engine models: what
// the proxy does with HTTP, it does on the virtual clock. It observes its
// engines the way the proxy scrapes and health-checks vLLM, hears its peers
// through a mesh.Table fed by simulated links, and hands dispatched
// requests to engines.
type simRegion struct {
	w        *world
	idx      int
	spec     RegionSpec
	core     *region.Region
	replicas []*replica
	table    *mesh.Table // what this region knows of its peers
	loads    region.LoadPublisher
	sentGen  uint64 // digest generation last published
	expireAt time.Duration
	needPump bool
	busy     time.Duration // engine busy time, for utilization
	// preemptions of engines lost to crashes
	preemptions int64
}

func newSimRegion(w *world, idx int, spec RegionSpec) (*simRegion, error) {
	r := &simRegion{w: w, idx: idx, spec: spec, expireAt: -1, table: mesh.NewTable(spec.Name, w.cfg.Control),
		loads: region.LoadPublisher{Interval: w.cfg.Control.LoadInterval}}
	pol, err := policy.New(w.cfg.Policy, *w.cfg.PolicyConfig)
	if err != nil {
		return nil, err
	}
	r.core, err = region.New(w.cfg.regionConfig(spec, w.blockTokens), pol, r.delivered)
	if err != nil {
		return nil, err
	}
	names := make([]string, spec.Replicas)
	for i := range spec.Replicas {
		cfg := engine.Config{Profile: spec.Profile, MaxNumSeqs: spec.MaxNumSeqs, KVBlocks: spec.KVBlocks}
		names[i] = spec.Name + "-" + strconv.Itoa(i)
		r.replicas = append(r.replicas, &replica{name: names[i], eng: engine.New(cfg), cfg: cfg})
	}
	if err := r.core.SetReplicas(names); err != nil {
		return nil, err
	}
	for _, rp := range r.replicas {
		rp.handle = r.core.Replica(rp.name)
	}
	return r, nil
}

func (r *simRegion) now() time.Time { return r.w.clock(r.w.now) }

// EngineMetrics is what scraping an engine's /metrics reports, read
// straight from the model: the simulator's side of the scrape that the
// proxy does over HTTP (the parity test checks the two agree).
func EngineMetrics(e *engine.Engine) region.Metrics {
	cfg := e.Config()
	return region.Metrics{Known: true, Waiting: e.Waiting(), Running: e.Running(), KVUsage: e.KVUsage(),
		KVBlocks: cfg.KVBlocks, BlockSize: cfg.BlockSize}
}

// scrape observes every replica's metrics as the proxy's scraper does (a
// dead replica's scrape fails: zero metrics), then refreshes the peers and
// pumps, as the proxy does after each scrape round.
func (r *simRegion) scrape() {
	for _, rp := range r.replicas {
		m := region.Metrics{}
		if rp.down == 0 {
			m = EngineMetrics(rp.eng)
		}
		r.core.Scraped(rp.handle, m)
	}
	r.pump()
}

// healthCheck probes every replica's /health: a dead one fails.
func (r *simRegion) healthCheck() {
	for _, rp := range r.replicas {
		r.core.HealthChecked(rp.handle, rp.down == 0)
	}
}

// pump refreshes the peers' snapshot from the table and re-routes held
// requests: the proxy's periodic pump.
func (r *simRegion) pump() {
	r.core.SetPeers(r.table.Peers(r.now()))
	r.core.Pump(r.now())
	r.scheduleExpire()
}

// delivered receives the region core's outcomes.
func (r *simRegion) delivered(d region.Delivery) {
	sr := r.w.live[d.Request]
	if d.Err != nil {
		r.w.rejected(sr, r.idx, d.Err)
		return
	}
	switch d.Decision.Action {
	case policy.Dispatch:
		r.dispatch(sr, r.replicas[d.Decision.Replica])
	case policy.Forward:
		to := r.w.byName[d.Peer.Region]
		sr.forwardedTo = to
		r.w.forward(sr, r.idx, to)
	}
}

// refusedAfter is how long a dispatch to a dead replica takes to fail: a
// refused connection on the region's own network.
const refusedAfter = time.Millisecond

func (r *simRegion) dispatch(sr *simRequest, rp *replica) {
	sr.served, sr.dispatched, sr.replica = r.idx, r.w.now, rp
	if rp.down > 0 {
		r.w.push(event{at: r.w.now + refusedAfter, kind: evRefused, region: int32(r.idx), req: sr})
		return
	}
	req := sr.req
	seq := &engine.Sequence{ID: req.ID, PromptTokens: req.PromptTokens, MaxTokens: max(req.MaxTokens, 1), Units: req.Blocks,
		UnitTokens: req.BlockTokens, Arrival: r.now(), Data: sr}
	if err := rp.eng.Add(seq); err != nil {
		// The engine answers 400 (the prompt can never fit): the client
		// gets it, and the replica is not to blame.
		r.core.Released(rp.handle)
		sr.replica = nil
		r.w.drop(sr, string(apierr.InvalidRequest))
		return
	}
	r.kick(rp)
}

// failedBeforeFirstByte handles a request whose replica failed before it
// streamed anything: the failure counts against the replica, and the
// request is routed again (at most Retries times), as the proxy retries.
func (r *simRegion) failedBeforeFirstByte(sr *simRequest) {
	if rp := sr.replica; rp != nil {
		r.core.Failed(rp.handle)
		sr.replica = nil
	}
	if sr.retries >= r.w.cfg.Retries {
		r.w.rejected(sr, r.idx, apierr.New(apierr.Upstream, "no replica could serve the request"))
		return
	}
	sr.retries++
	r.core.Submit(r.now(), sr.req)
	r.scheduleExpire()
}

// kick starts replica rp's next engine step if it is idle and has work.
func (r *simRegion) kick(rp *replica) {
	if rp.down > 0 || rp.eng.Busy() {
		return
	}
	d, ok := rp.eng.BeginStep(r.now())
	if !ok {
		return
	}
	r.busy += d
	r.w.series.busy(r.idx, r.w.now, d)
	r.w.push(event{at: r.w.now + d, kind: evStepEnd, region: int32(r.idx), replica: r.replicaIndex(rp), epoch: rp.epoch})
}

func (r *simRegion) replicaIndex(rp *replica) int32 {
	for i, x := range r.replicas {
		if x == rp {
			return int32(i)
		}
	}
	return -1
}

// stepEnd applies a finished engine step and starts the next; a freed slot
// pumps the head of the queue, as the proxy does when a request ends.
func (r *simRegion) stepEnd(i int, epoch uint32) {
	rp := r.replicas[i]
	if epoch != rp.epoch {
		return // the engine crashed during the step
	}
	rp.eng.EndStep(r.now(), sink{r: r, rp: rp})
	if r.needPump {
		r.needPump = false
		r.core.PumpDepth(r.now(), 1)
		r.scheduleExpire()
	}
	r.kick(rp)
}

// sink receives a replica's engine events.
type sink struct {
	r  *simRegion
	rp *replica
}

func (k sink) FirstToken(s *engine.Sequence, _ time.Time) {
	s.Data.(*simRequest).firstToken = k.r.w.now
}

func (k sink) Token(*engine.Sequence, time.Time) {}

func (k sink) Finished(s *engine.Sequence, _ time.Time) {
	sr := s.Data.(*simRequest)
	k.r.core.Finished(k.rp.handle, k.r.w.now-sr.dispatched)
	sr.replica = nil
	k.r.needPump = true
	k.r.w.finish(sr, s)
}

// checkLoad publishes the load summary to every peer when it is due; each
// copy arrives one link delay later, unless the link loses it.
func (r *simRegion) checkLoad() {
	l := r.core.Load()
	seq, due := r.loads.Due(r.now(), l)
	if !due {
		return
	}
	r.w.series.queue(r.idx, r.w.now, l.Queued)
	for j := range r.w.regions {
		if j != r.idx && !r.w.lost(r.idx, j) {
			r.w.push(event{at: r.w.now + r.w.oneWay(r.idx, j), kind: evLoadArrive, region: int32(j), replica: int32(r.idx),
				payload: loadMsg{seq: seq, load: l}})
		}
	}
}

// loadMsg is a load summary in flight.
type loadMsg struct {
	seq  uint64
	load region.Load
}

// publishDigest sends a new digest generation to every peer over the
// mesh's reliable channel: a fresh TCP connection (one RTT) and the
// message (half of one).
func (r *simRegion) publishDigest() {
	d := r.core.Digest()
	if d.Generation == r.sentGen {
		return
	}
	r.sentGen = d.Generation
	for j := range r.w.regions {
		if j != r.idx {
			r.w.push(event{at: r.w.now + r.w.oneWay(r.idx, j)*3, kind: evDigestArrive, region: int32(j), replica: int32(r.idx), payload: d})
		}
	}
}

// probeResult is a probe's outcome arriving back at the prober.
type probeResult struct {
	peer string
	rtt  time.Duration
	ok   bool
}

// probe pings every peer region once: the answer comes back after the
// link's RTT (with jitter each way), or the probe times out if the link
// lost it.
func (r *simRegion) probe() {
	for j := range r.w.regions {
		if j == r.idx {
			continue
		}
		res := probeResult{peer: r.w.regions[j].spec.Name}
		if r.w.lost(r.idx, j) || r.w.lost(j, r.idx) {
			r.w.push(event{at: r.w.now + probeTimeout, kind: evProbeResult, region: int32(r.idx), payload: res})
			continue
		}
		res.rtt, res.ok = r.w.oneWay(r.idx, j)+r.w.oneWay(j, r.idx), true
		r.w.push(event{at: r.w.now + res.rtt, kind: evProbeResult, region: int32(r.idx), payload: res})
	}
}

// probeTimeout is how long a lost probe takes to count as a failure
// (memberlist's WAN probe timeout).
const probeTimeout = 3 * time.Second

// scheduleExpire makes sure an evExpire is queued for the balancer's
// earliest deadline.
func (r *simRegion) scheduleExpire() {
	d, ok := r.core.NextDeadline()
	if !ok {
		return
	}
	at := d.Sub(r.w.clock(0))
	if r.expireAt >= 0 && r.expireAt <= at {
		return
	}
	r.expireAt = at
	r.w.push(event{at: at, kind: evExpire, region: int32(r.idx)})
}

// crash takes replica i down: its engine and cache are lost. The proxy
// learns it the way it would: the requests it had there fail (those that
// had not streamed are routed again), dispatches to it are refused, and
// its scrapes and health checks fail until it is ejected.
func (r *simRegion) crash(i int) {
	rp := r.replicas[i]
	rp.down++
	if rp.down > 1 {
		return
	}
	rp.epoch++
	var lost []*simRequest
	rp.eng.ForEach(func(s *engine.Sequence) { lost = append(lost, s.Data.(*simRequest)) })
	r.preemptions += rp.eng.Stats().Preemptions
	rp.eng = engine.New(rp.cfg)
	for _, sr := range lost {
		if sr.firstToken >= 0 {
			r.core.Failed(rp.handle)
			sr.replica = nil
			r.w.drop(sr, "failed_midstream")
			continue
		}
		r.failedBeforeFirstByte(sr)
	}
}

// recover brings replica i back with an empty cache; health checks
// re-admit it.
func (r *simRegion) recover(i int) {
	rp := r.replicas[i]
	if rp.down > 0 {
		rp.down--
	}
}
