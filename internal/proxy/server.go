package proxy

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"skywalker/internal/apierr"
	"skywalker/internal/httpserve"
	"skywalker/internal/lograte"
	"skywalker/internal/policy"
	"skywalker/internal/region"
	"skywalker/internal/request"
	"skywalker/internal/responses"
	"skywalker/internal/tracing"
)

// Options are the proxy's collaborators, set by the command or a test.
type Options struct {
	Logger *slog.Logger
	// Peers is the mesh (nil for a single region); SetPeers sets it later.
	Peers PeerSource
	// PeerDelay, if set, delays traffic to a peer region's proxy by that
	// much each way: WAN emulation for tests and the one-machine demo.
	PeerDelay func(region string) time.Duration
	// GossipAddr is reported at /v1/skywalker/gossip so peers configured
	// with this proxy's URL can learn where to join the mesh.
	GossipAddr string
	// Transport overrides the upstream HTTP transport.
	Transport http.RoundTripper
	// Tracer traces requests (see trace.go); nil is off.
	Tracer *tracing.Tracer
}

// Server is one regional proxy.
type Server struct {
	cfg      Config
	opts     Options
	log      *slog.Logger
	router   *Router
	upstream http.RoundTripper
	loops    *poolLoops
	markers  *markers
	// responseIDs writes a Responses chain's home into the ids clients
	// see, and reads it back (responses.go).
	responseIDs responses.Codec
	noisy       *lograte.Limiter // lines that can come once per request, per kind
	demand      *demand
	metrics     *metrics
	handler     http.Handler
	draining    atomic.Bool
	bodies      *bodyLedger // bytes received in request bodies held now
	// readAheadHeld is the bytes responses hold read ahead of their
	// clients (see readAhead).
	readAheadHeld atomic.Int64
	active        sync.WaitGroup
	ids           atomic.Uint64
	started       time.Time
	gossipAddr    atomic.Pointer[string]
	maxClass      request.Class             // the most urgent class a client may ask for
	endpointsOf   map[string][]request.Kind // Config.ModelEndpoints, parsed
	// expiring ends when the drain deadline is near: what is still in
	// flight is then ended with a status or an error event.
	expiring context.Context
	expire   context.CancelFunc
}

// New builds a proxy from a validated configuration.
func New(cfg Config, opts Options) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.NodeID == "" {
		cfg.NodeID = cfg.Region + "@" + cfg.Listen
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	pol, err := policy.New(cfg.Policy, cfg.PolicyConfig())
	if err != nil {
		return nil, err
	}
	markers, err := newMarkers(cfg.GossipKeys, cfg.ClusterLabel)
	if err != nil {
		return nil, fmt.Errorf("gossip key: %w", err)
	}
	responseIDs, err := newResponseIDs(cfg.GossipKeys)
	if err != nil {
		return nil, fmt.Errorf("gossip key: %w", err)
	}
	transport := opts.Transport
	if transport == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConns, t.MaxIdleConnsPerHost = 1024, 256
		// Bodies are sent whole (they were read to be parsed): large write
		// buffers send a 400 KB prompt in a few syscalls, not a hundred.
		t.WriteBufferSize, t.ReadBufferSize = 256<<10, 64<<10
		t.ResponseHeaderTimeout = 0 // long prefills are normal
		if t.TLSClientConfig, err = cfg.ClientTLS(); err != nil {
			return nil, err
		}
		transport = t
	}
	s := &Server{cfg: cfg, opts: opts, log: opts.Logger.With("component", "proxy", "region", cfg.Region), markers: markers, responseIDs: responseIDs, bodies: newBodyLedger(cfg.BodyBudget, cfg.ClientBodyBudget), noisy: lograte.New(NoisyLogEvery, time.Now),
		demand: newDemand(cfg.Region), upstream: transport, started: time.Now()}
	s.router, err = NewRouter(cfg, RouterOptions{Policy: pol, Peers: opts.Peers, Observe: s.observe,
		PolicyFor: func(model string) (policy.Policy, error) { return policy.New(cfg.Policy, cfg.PolicyConfigFor(model)) },
		OnDistrust: func(peer, reason string) {
			s.log.Warn("peer region distrusted: its forwards fail or it does not deliver what it claims", "peer", peer, "why", reason)
		}})
	if err != nil {
		return nil, err
	}
	markers.clockOffset = s.router.clockOffset
	s.maxClass, _ = request.ParseClass(cfg.PriorityClassMax) // validated above
	s.endpointsOf = map[string][]request.Kind{}
	for model, list := range cfg.ModelEndpoints {
		s.endpointsOf[model], _ = request.ParseKinds(list) // validated above
	}
	s.expiring, s.expire = context.WithCancel(context.Background())
	s.loops = &poolLoops{r: s.router, cfg: cfg, cp: cfg.ControlPlane(), client: &http.Client{Transport: transport}, log: s.log, logEvery: s.logEvery}
	s.metrics = newMetrics(cfg.Region, s.router)
	s.loops.kvCount = s.metrics.kvEvents
	s.handler = s.routes()
	return s, nil
}

// NoisyLogEvery is how often a line that could come once per request is
// written per kind: a security refusal per source, a failing target, a
// refusal or shed per class and tenant.
const NoisyLogEvery = 30 * time.Second

// Router is the proxy's router; it is also the mesh's Source.
func (s *Server) Router() *Router { return s.router }

// SetPeers attaches the mesh once it exists (it needs the router first).
func (s *Server) SetPeers(p PeerSource) { s.router.setPeerSource(p) }

// QueueLength is the number of requests held in the balancer queue.
func (s *Server) QueueLength() int { return s.router.queued() }

// Peers is the peers' snapshot the router last routed with.
func (s *Server) Peers() []region.Peer { return s.router.snapshot().Peers }

// Replicas is the number of replicas in the pool.
func (s *Server) Replicas() int { return len(s.router.replicaSides()) }

// HealthyReplicas is the number of replicas in service.
func (s *Server) HealthyReplicas() int { return s.router.healthyReplicas() }

// SetGossipAddr sets the mesh address reported at /v1/skywalker/gossip.
func (s *Server) SetGossipAddr(addr string) { s.gossipAddr.Store(&addr) }

// Handler is the proxy's HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// Start resolves the worker pool, reads every replica's models and
// metrics once (so the first requests go to the right model's pool and
// are routed on what the engines report, not on guesses: at most a few
// seconds when an engine does not answer), and runs the
// background loops (scrapes, health checks, queue pumping) until ctx ends.
func (s *Server) Start(ctx context.Context) error {
	urls, err := initialReplicas(ctx, s.cfg)
	if err != nil {
		return err
	}
	if err := s.router.SetReplicas(urls); err != nil {
		s.log.Warn("replica pool", "err", err)
	}
	s.loops.modelsAll(ctx)
	s.loops.scrapeAll(ctx)
	s.loops.syncKVFollowers(ctx)
	go s.loops.run(ctx)
	// Pump held requests even when nothing else happens: deadlines, fresh peer data.
	go every(ctx, s.loops.cp.PumpInterval, func(context.Context) { s.router.Pump() })
	return nil
}

// Serve serves HTTP on l until ctx ends, then drains: it reports
// not-ready and tells its peers (they stop forwarding to it at once), stops
// accepting, and serves or forwards what it holds and has in flight within
// DrainTimeout. Shortly before the deadline what is still held is answered
// 503 with a Retry-After, and what is still in flight is ended — 503 if
// nothing was sent yet, an error event if a stream had begun — never cut
// off. The background loops (Start) must
// run until Serve returns: they pump the queue. peers, if any, are more
// listeners for the same handler (the TLS listener other regions forward
// to).
func (s *Server) Serve(ctx context.Context, l net.Listener, peers ...net.Listener) error {
	return httpserve.Run(ctx, l, s.handler, httpserve.Options{IdleTimeout: s.cfg.IdleTimeout, Drain: s.cfg.DrainTimeout,
		Begin: func() {
			s.draining.Store(true)
			s.router.drain()
			s.log.Info("draining", "timeout", s.cfg.DrainTimeout, "held", s.router.queued())
		},
		Expire: func() {
			n := s.router.flushHeld(&apierr.Error{Code: apierr.Unavailable, RetryAfter: time.Second,
				Message: "this proxy is shutting down and could not serve the request in time; retry"})
			s.expire()
			s.log.Info("drain deadline near: answered the requests still held and ended those in flight", "held", n)
		}}, peers...)
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	for _, e := range request.Endpoints {
		mux.Handle("POST "+e.Path, s.traced(s.completion(e.Kind)))
	}
	mux.HandleFunc("GET /v1/responses/{id}", s.responseOp(false))
	mux.HandleFunc("POST /v1/responses/{id}/cancel", s.responseOp(true))
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, 200, map[string]string{"status": "ok"}) })
	mux.HandleFunc("GET /ready", s.ready)
	mux.HandleFunc("GET /v1/skywalker/demand", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, 200, s.demand.report()) })
	mux.HandleFunc("GET /v1/skywalker/gossip", func(w http.ResponseWriter, _ *http.Request) {
		addr := s.opts.GossipAddr
		if p := s.gossipAddr.Load(); p != nil {
			addr = *p
		}
		writeJSON(w, 200, map[string]string{"region": s.cfg.Region, "gossip_addr": addr})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		apierr.Write(w, apierr.New(apierr.NotFound, "no route for %s %s", r.Method, r.URL.Path))
	})
	return mux
}

// AdminHandler serves what is for operators, never on the client port:
// /metrics, /debug/skywalker and net/http/pprof's /debug/pprof/.
func (s *Server) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /debug/skywalker", s.debug)
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	return mux
}

func (s *Server) ready(w http.ResponseWriter, _ *http.Request) {
	switch {
	case s.draining.Load():
		apierr.Write(w, apierr.New(apierr.Unavailable, "draining"))
	case s.router.healthyReplicas() == 0:
		apierr.Write(w, apierr.New(apierr.Unavailable, "no healthy replica"))
	default:
		writeJSON(w, 200, map[string]string{"status": "ready"})
	}
}

// observe counts every outcome of the balancer by priority, tenant and
// decision, and logs each request refused or shed, once (the router calls
// it once per attempt, with its lock held; a retry is not admitted again).
func (s *Server) observe(d *region.Attempt) {
	if d.Err == nil && d.Number > 1 {
		return
	}
	decision := "admitted"
	if d.Err != nil {
		switch d.Err.Code {
		case apierr.Overloaded, apierr.QueueFull:
			decision = "refused"
		case apierr.Shed:
			decision = "shed"
		case apierr.QueueTimeout:
			decision = "timed_out"
		default:
			decision = "unavailable"
		}
	}
	req := d.Request
	s.metrics.admission.WithLabelValues(req.Class.String(), s.metrics.tenants.label(req.Tenant), decision).Inc()
	if decision == "refused" || decision == "shed" {
		// Limited per decision and class, not per tenant: a client may
		// invent tenants (the line still names the tenant).
		s.logEvery(decision+"\x00"+req.Class.String(), slog.LevelInfo, "request "+decision, "id", req.ID, "priority", req.Class.String(), "tenant", req.Tenant,
			"waited", d.Waited.String(), "retry_after_s", d.Err.RetryAfterSeconds(), "reason", d.Err.Message)
	}
}
