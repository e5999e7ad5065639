package sim

import (
	"context"
	"fmt"
	"net/http/httptest"
	"net/url"
	"reflect"
	"testing"
	"time"

	"skywalker/internal/balancer"
	"skywalker/internal/digest"
	"skywalker/internal/engine"
	"skywalker/internal/engine/server"
	"skywalker/internal/mesh"
	"skywalker/internal/policy"
	"skywalker/internal/profile"
	"skywalker/internal/proxy"
	"skywalker/internal/region"
	"skywalker/internal/request"
	"skywalker/internal/workload"
)

// The drivers' parity test, as internal/engine/server's agree test is the
// engine's: one world — three replicas in the same engine states, the same
// peers' summaries, digests and probes — fed through the proxy's driver
// (its /metrics scraping and parsing, its health checks, its mesh table,
// Route, Done) and through the simulator's (its scrape of the engine model,
// its simulated mesh arrivals, its arrival and completion events) must give
// identical views, load summaries, digests and decisions. If either driver
// starts building its view its own way, this fails.

// tablePeers is the proxy's mesh reduced to its peer table, read at the
// world's current time.
type tablePeers struct {
	table *mesh.Table
	now   func() time.Time
}

func (p tablePeers) Peers() []region.Peer { return p.table.Peers(p.now()) }

// prepare puts an engine in a busy, deterministic state: i+2 sequences of
// different lengths, and i+1 steps taken.
func prepare(e *engine.Engine, i int, at time.Time) {
	for j := range i + 2 {
		blocks := make([]uint64, 4+3*j)
		for k := range blocks {
			blocks[k] = uint64(1000*i + 10*j + k + 1)
		}
		_ = e.Add(&engine.Sequence{ID: fmt.Sprint(i, "/", j), PromptTokens: 128*len(blocks) + 5, MaxTokens: 64, Units: blocks, UnitTokens: 128, Arrival: at})
	}
	for range i + 1 {
		if d, ok := e.BeginStep(at); ok {
			at = at.Add(d)
			e.EndStep(at, nopSink{})
		}
	}
}

type nopSink struct{}

func (nopSink) FirstToken(*engine.Sequence, time.Time) {}
func (nopSink) Token(*engine.Sequence, time.Time)      {}
func (nopSink) Finished(*engine.Sequence, time.Time)   {}

// parity is one world driven both ways: region us-east of a three-region
// simulated world (us), and a proxy Router (router) in front of HTTP
// engines (engines) in the same states, with the same peers' summaries,
// digests and probes, after one scrape and one health round each.
type parity struct {
	w        *world
	us       *router
	router   *proxy.Router
	engines  []*server.Server
	now      func() time.Time
	shared   []uint64 // the blocks eu-west's digest holds
	replicas int
}

// step advances the shared clock.
func (p *parity) step(d time.Duration) { p.w.now += d }

// scrape runs a scrape round on each side its own way: the proxy's over
// HTTP (then its pump), the simulator's scrape event.
func (p *parity) scrape(t *testing.T) {
	t.Helper()
	for i, e := range p.engines {
		name := fmt.Sprintf("us-east-%d", i)
		mark := p.router.MarkScrape(name)
		rec := httptest.NewRecorder()
		e.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		p.router.ObserveScrape(name, mark, rec.Code, rec.Body)
	}
	p.router.Pump()
	mustHandle(t, p.w, event{kind: evScrape, router: 0})
}

func newParity(t *testing.T) *parity {
	t.Helper()
	prof, _ := profile.Lookup("llama3-8b-a100")
	const replicas = 3

	// The simulator's driver: region us-east of a three-region world.
	pcfg := proxy.DefaultConfig()
	pcfg.Region, pcfg.Jurisdiction, pcfg.NodeID, pcfg.Profile, pcfg.MaxWANRTT = "us-east", "us", "us-east", prof.Name, 200*time.Millisecond
	pcfg.PeerJurisdictions = map[string]string{"eu-west": "eu", "ap-east": "ap"} // the operator's grant, as the simulator's topology has it
	scfg := Config{Regions: []RegionSpec{{Name: "us-east", Replicas: replicas, Profile: prof, Jurisdiction: "us"},
		{Name: "eu-west", Replicas: 4, Profile: prof, Jurisdiction: "eu"}, {Name: "ap-east", Replicas: 4, Profile: prof, Jurisdiction: "ap"}},
		RTT:    [][]time.Duration{{0, 72 * time.Millisecond, 160 * time.Millisecond}, {72 * time.Millisecond, 0, 180 * time.Millisecond}, {160 * time.Millisecond, 180 * time.Millisecond, 0}},
		Policy: "skywalker", PolicyConfig: ptr(pcfg.PolicyConfig()), MaxInFlight: pcfg.MaxInFlight, Control: pcfg.ControlPlane(),
		Balancer: balancer.Config{MaxQueue: pcfg.MaxQueue, MaxWait: pcfg.MaxWait, Objectives: pcfg.Objectives()}}
	w, err := newWorld(scfg, workload.NewSliceSource(nil), time.Hour, 128)
	if err != nil {
		t.Fatal(err)
	}
	us := w.routers[0]
	now := func() time.Time { return w.clock(w.now) }

	// The proxy's driver, with the same replicas (named as the simulator
	// names them), engines behind HTTP handlers, and a mesh table.
	var urls []*url.URL
	engines := make([]*server.Server, replicas)
	for i := range replicas {
		u, _ := url.Parse(fmt.Sprintf("http://us-east-%d", i))
		urls = append(urls, u)
		pcfg.WorkerPool = append(pcfg.WorkerPool, u.String())
		if engines[i], err = server.New(server.Config{Model: "m", Engine: engine.Config{Profile: prof}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := pcfg.Validate(); err != nil {
		t.Fatal(err)
	}
	pol, _ := policy.New("skywalker", pcfg.PolicyConfig())
	table := mesh.NewTable("us-east", pcfg.ControlPlane())
	router, err := proxy.NewRouter(pcfg, proxy.RouterOptions{Policy: pol, Peers: tablePeers{table, now}, Clock: now})
	if err != nil {
		t.Fatal(err)
	}
	if err := router.SetReplicas(urls); err != nil {
		t.Fatal(err)
	}

	// Same engine states on both sides.
	for i := range replicas {
		prepare(us.replicas[i].eng, i, now())
		engines[i].Engine(func(e *engine.Engine) { prepare(e, i, now()) })
	}

	// The peers: what memberlist would deliver to the proxy, and what the
	// simulated links deliver to the simulator's region.
	for _, p := range []mesh.Meta{{Region: "eu-west", Jurisdiction: "eu"}, {Region: "ap-east", Jurisdiction: "ap"}} {
		table.Join(p.Region, p)
	}
	peerDigest := digest.New("eu-west", "eu-west", 3, 10_000, 0.01)
	shared := make([]uint64, 160) // a 20k-token document: worth the trip to eu-west
	for i := range shared {
		shared[i] = uint64(501 + i)
	}
	for _, b := range shared {
		peerDigest.Add(b)
	}
	peerDigest = peerDigest.Clone()
	euLoad := region.Load{QueueWait: 40 * time.Millisecond, Queued: 1, Replicas: 4, Slots: 256, Outstanding: 30, Prefill: policy.PrefillOf(prof)}
	apLoad := region.Load{Queued: 0, Replicas: 4, Slots: 256, Outstanding: 3, Prefill: policy.PrefillOf(prof)}
	step := func(d time.Duration) { w.now += d }
	step(10 * time.Millisecond)
	table.ObserveLoad("eu-west", 0, 7, euLoad, now())
	table.ObserveLoad("ap-east", 0, 2, apLoad, now())
	table.ObserveDigest("eu-west", peerDigest, now())
	mustHandle(t, w, event{kind: evLoadArrive, router: 0, replica: 1, payload: loadMsg{seq: 7, load: euLoad}})
	mustHandle(t, w, event{kind: evLoadArrive, router: 0, replica: 2, payload: loadMsg{seq: 2, load: apLoad}})
	mustHandle(t, w, event{kind: evDigestArrive, router: 0, replica: 1, payload: peerDigest})
	for i := range 5 {
		step(20 * time.Millisecond)
		table.ObserveProbe("eu-west", 72*time.Millisecond+time.Duration(i)*time.Millisecond, true, now())
		mustHandle(t, w, event{kind: evProbeResult, router: 0, payload: probeResult{peer: "eu-west", rtt: 72*time.Millisecond + time.Duration(i)*time.Millisecond, ok: true}})
		if i < 2 {
			table.ObserveProbe("ap-east", 160*time.Millisecond, true, now())
			mustHandle(t, w, event{kind: evProbeResult, router: 0, payload: probeResult{peer: "ap-east", rtt: 160 * time.Millisecond, ok: true}})
		}
	}

	// A scrape round and a health round, each side its own way, then the
	// pump that follows a scrape round.
	step(30 * time.Millisecond)
	p := &parity{w: w, us: us, router: router, engines: engines, now: now, shared: shared, replicas: replicas}
	p.scrape(t)
	for i := range replicas {
		router.ObserveHealth(fmt.Sprintf("us-east-%d", i), true)
	}
	mustHandle(t, w, event{kind: evHealth, router: 0})
	return p
}

func TestProxyAndSimulatorDriveTheRegionAlike(t *testing.T) {
	p := newParity(t)
	w, us, router, engines, now, shared := p.w, p.us, p.router, p.engines, p.now, p.shared
	step := p.step
	scrapeProxy := func() { p.scrape(t) }
	probes := []*request.Request{
		probe("short, nothing cached", 2, ""),
		probe("long, cached at eu-west", 24, "", shared...),
		probe("resident in eu", 8, "eu"),
		probe("resident in ap, whose gate is still closed", 8, "ap"),
		probe("cached on a local replica", 10, "", 1, 2, 3, 4),
	}
	compare := func(when string) {
		t.Helper()
		for _, req := range probes {
			sv, sd := us.core.Explain(req)
			if pv := router.View(req); !reflect.DeepEqual(pv, sv) {
				t.Errorf("%s, %s: views differ\nproxy %+v\nsim   %+v", when, req.ID, pv, sv)
			}
			if pd := router.Decide(req); pd != sd {
				t.Errorf("%s, %s: decisions differ: proxy %+v, sim %+v", when, req.ID, pd, sd)
			}
		}
		if pl, sl := router.Load(), us.core.Load(); !reflect.DeepEqual(pl, sl) {
			t.Errorf("%s: load summaries differ: proxy %+v, sim %+v", when, pl, sl)
		}
		if pd, sd := router.Digest(), us.core.Digest(); !reflect.DeepEqual(pd.Words(), sd.Words()) || pd.Generation != sd.Generation {
			t.Errorf("%s: digests differ (generations %d and %d)", when, pd.Generation, sd.Generation)
		}
	}
	compare("after the first scrape")
	if v := router.View(probes[0]); !v.Local.Replicas[2].HasRoom() && !v.Local.Replicas[0].HasRoom() || !v.Peers[1].GateOpen || v.Peers[0].GateOpen {
		t.Fatalf("the world is not what the test means to build: %+v", v)
	}

	// Arrivals: each side routes the same requests its own way; what the
	// proxy dispatches reaches its engine as the HTTP request would.
	var dispatched []*simRequest
	proxyAttempts := map[string]*region.Attempt{}
	for i, req := range probes {
		if req.Residency == "ap" {
			continue // would be held: nothing to deliver
		}
		step(time.Millisecond)
		preq, sreq := *req, *req
		preq.ID, sreq.ID = fmt.Sprint("r", i), fmt.Sprint("r", i)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		pd, err := router.Route(ctx, &preq)
		cancel()
		if err != nil {
			t.Fatalf("proxy: %s was not routed: %v", req.ID, err)
		}
		sr := &simRequest{req: &sreq, client: 0, ingress: 0, at: -1, forwardedTo: -1, arrival: w.now, firstToken: -1}
		mustHandle(t, w, event{kind: evArrival, router: 0, req: sr})
		proxyTarget, simTarget := "forward to "+peerName(pd.Peer), "forward to "+regionName(w, sr.forwardedTo)
		if pd.Replica != "" {
			proxyTarget = "dispatch to " + pd.Replica
			proxyAttempts[preq.ID] = pd.Attempt
			i := replicaIndex(pd.Replica)
			engines[i].Engine(func(e *engine.Engine) {
				_ = e.Add(&engine.Sequence{ID: preq.ID, PromptTokens: preq.PromptTokens, MaxTokens: preq.MaxTokens, Units: preq.Blocks,
					UnitTokens: preq.BlockTokens, Arrival: now()})
				if !e.Busy() {
					e.BeginStep(now()) // as the engine's loop does when a request arrives
				}
			})
		}
		if sr.replica != nil {
			simTarget = "dispatch to " + sr.replica.name
			dispatched = append(dispatched, sr)
		}
		if proxyTarget != simTarget {
			t.Errorf("arrival %s: the proxy routed it %s, the simulator %s", req.ID, proxyTarget, simTarget)
		}
	}
	compare("after the arrivals")
	scrapeProxy()
	compare("after the arrivals were scraped")

	// Completions: the proxy measures service from send to last byte, the
	// simulator from dispatch to the engine's finish.
	step(1200 * time.Millisecond)
	for _, sr := range dispatched {
		if _, _, err := router.End(context.Background(), proxyAttempts[sr.req.ID], region.Served); err != nil {
			t.Fatal(err)
		}
		sr.firstToken = w.now
		sink{rp: sr.replica}.Finished(&engine.Sequence{ID: sr.req.ID, PromptTokens: sr.req.PromptTokens, Generated: 2, Data: sr}, now())
	}
	if len(dispatched) == 0 {
		t.Fatal("nothing was dispatched: the test exercises no completion")
	}
	compare("after the completions")
}

func peerName(p *region.Peer) string {
	if p == nil {
		return "nowhere"
	}
	return p.Region
}

func regionName(w *world, i int) string {
	if i < 0 {
		return "nowhere"
	}
	return w.routers[i].name
}

func replicaIndex(name string) int {
	var i int
	_, _ = fmt.Sscanf(name, "us-east-%d", &i)
	return i
}

func mustHandle(t *testing.T, w *world, e event) {
	t.Helper()
	e.at = w.now
	if err := w.handle(e); err != nil {
		t.Fatal(err)
	}
}

func probe(id string, blocks int, residency string, prefix ...uint64) *request.Request {
	b := append([]uint64(nil), prefix...)
	for len(b) < blocks {
		b = append(b, uint64(9_000_000+len(b))+uint64(len(id)))
	}
	return &request.Request{ID: id, Region: "us-east", PromptTokens: 128*len(b) + 17, MaxTokens: 32, Blocks: b, BlockTokens: 128, Residency: residency}
}

func ptr[T any](v T) *T { return &v }

// TestProxyAndSimulatorScrapeEnginesAlike: engines in every kind of state —
// idle, running, with an engine queue, with a nearly full KV cache — are
// observed by the proxy's scrape of /metrics and by the simulator's read
// of the model; the replicas the policy then sees must be identical. (The
// whole-region test above has no engine queue.)
func TestProxyAndSimulatorScrapeEnginesAlike(t *testing.T) {
	prof, _ := profile.Lookup("llama3-8b-l4")
	states := []struct {
		name       string
		cfg        engine.Config
		seqs, toks int
	}{
		{"idle", engine.Config{Profile: prof}, 0, 0},
		{"running", engine.Config{Profile: prof}, 3, 900},
		{"with an engine queue", engine.Config{Profile: prof, MaxNumSeqs: 2}, 5, 500},
		{"a nearly full KV cache", engine.Config{Profile: prof, KVBlocks: 300}, 4, 1100},
	}
	for _, st := range states {
		t.Run(st.name, func(t *testing.T) {
			at := epoch
			fill := func(e *engine.Engine) {
				for j := range st.seqs {
					_ = e.Add(&engine.Sequence{ID: fmt.Sprint(j), PromptTokens: st.toks, MaxTokens: 64, Arrival: at})
				}
				if d, ok := e.BeginStep(at); ok {
					e.EndStep(at.Add(d), nopSink{})
				}
			}
			model := engine.New(st.cfg)
			fill(model)
			srv, err := server.New(server.Config{Model: "m", Engine: st.cfg})
			if err != nil {
				t.Fatal(err)
			}
			srv.Engine(fill)

			pcfg := proxy.DefaultConfig()
			pcfg.Region, pcfg.NodeID, pcfg.WorkerPool = "us-east", "us-east", []string{"http://r0"}
			pol, _ := policy.New("skywalker", pcfg.PolicyConfig())
			router, err := proxy.NewRouter(pcfg, proxy.RouterOptions{Policy: pol, Clock: func() time.Time { return at }})
			if err != nil {
				t.Fatal(err)
			}
			u, _ := url.Parse("http://r0")
			if err := router.SetReplicas([]*url.URL{u}); err != nil {
				t.Fatal(err)
			}
			rec := httptest.NewRecorder()
			srv.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
			router.ObserveScrape("r0", router.MarkScrape("r0"), rec.Code, rec.Body)

			core := region.NewNode(func(string) region.Config { return pcfg.RegionConfig() },
				func(string) (policy.Policy, error) { return pol, nil }, func(*region.Attempt) {})
			if err := core.SetReplicas(map[string][]region.ReplicaSpec{"": region.Specs("r0")}); err != nil {
				t.Fatal(err)
			}
			core.Scraped("r0", EngineMetrics(model), nil)

			req := probe("a request", 4, "")
			sv, _ := core.Explain(req)
			pv := router.View(req)
			if !reflect.DeepEqual(pv.Local.Replicas, sv.Local.Replicas) {
				t.Errorf("replica views differ\nproxy %+v\nsim   %+v", pv.Local.Replicas, sv.Local.Replicas)
			}
			if st.name == "with an engine queue" && pv.Local.Replicas[0].Waiting == 0 {
				t.Error("the engine queue is not in the view: the test checks nothing")
			}
		})
	}
}
