package server

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"skywalker/internal/apierr"
	"skywalker/internal/engine"
	"skywalker/internal/httpserve"
	"skywalker/internal/kvevents"
	"skywalker/internal/kvevents/kvzmq"
	"skywalker/internal/request"
	"skywalker/internal/tracing"
)

// Config configures a Server.
type Config struct {
	Model  string        // served model name
	Engine engine.Config // the model's profile and sizes
	// LoRAModules are the LoRA adapters served over Model (vLLM's
	// --lora-modules name=path): a request naming one runs with it
	// (Engine.MaxLoRAs slots, default 1 as vLLM's --max-loras, each load
	// Engine.LoRALoad), /v1/models lists each with Model as its parent,
	// and vllm:lora_requests_info names those running and waiting.
	LoRAModules []string
	// MetricsStyle is "vllm" (default), "sglang", or "none": no /metrics at
	// all (404), as llama.cpp servers and many OpenAI fronts.
	MetricsStyle string
	// TimeScale runs the model faster than real time: 10 means a 100 ms
	// step takes 10 ms. Default 1. Latencies in responses and metrics are
	// reported in model time, as a real engine would see them.
	TimeScale float64
	// Seed drives the filler text and fault injection.
	Seed uint64
	// DefaultMaxTokens is generated when a request sets no limit, as if
	// the model stopped there on its own (finish_reason "stop"). Default 256.
	DefaultMaxTokens int
	// MaxBodyBytes bounds request bodies. Default 16 MiB.
	MaxBodyBytes int
	// Request hashing; must match the router's for prefix reuse to line up.
	Parse  request.Options
	Faults Faults
	Logger *slog.Logger
	// Exit ends the process for Faults.ExitAfter; default os.Exit.
	Exit func(code int)
	// KVEvents publishes the engine's KV events (vLLM's
	// --kv-events-config), in KVEventsShape.
	KVEvents      KVEventsConfig
	KVEventsShape kvevents.Shape
	// ResponsesStore keeps responses in this process's memory for
	// previous_response_id, GET and cancel (vLLM's
	// VLLM_ENABLE_RESPONSES_API_STORE); off, store=true is ignored.
	ResponsesStore bool
	// Tracer traces inference requests; nil is off.
	Tracer *tracing.Tracer
}

// Faults inject failures for tests. All are off at their zero values.
type Faults struct {
	ErrorRate  float64 // fraction of requests answered 500 before any output
	HangRate   float64 // fraction accepted and never answered
	StallRate  float64 // fraction that stop streaming after StallAfter tokens
	StallAfter int
	// ExitAfter: once this many requests were accepted, the next one
	// makes the process exit at once, mid-flight for everyone else.
	ExitAfter int
	// KV events: every KVDropEvery-th batch is lost on the way but kept
	// for replay, every KVForgetEvery-th lost for good; the
	// KVRestartAfter-th starts the sequence over (an engine restart).
	KVDropEvery, KVForgetEvery, KVRestartAfter int
}

// Server is a simulated vLLM-compatible inference server.
type Server struct {
	cfg      Config
	log      *slog.Logger
	mu       sync.Mutex // guards eng, rng and every stream
	eng      *engine.Engine
	rng      *rand.Rand
	wake     chan struct{}
	clock    clock
	metrics  *metrics
	nextID   atomic.Uint64
	accepted atomic.Int64
	handler  http.Handler
	// ctx ends when the server is closed (its KV publisher with it).
	ctx       context.Context
	close     context.CancelFunc
	kv        *kvzmq.Publisher // nil without KV events
	kvBatches int              // batches published, for the faults (engine loop only)
	responses responseStore    // responses.go
}

// New returns a server; call Run to start its engine loop.
func New(cfg Config) (*Server, error) {
	if !validModelName(cfg.Model) {
		return nil, fmt.Errorf("server: model name %q must be 1-128 characters of letters, digits and ._:/-", cfg.Model)
	}
	for _, name := range cfg.LoRAModules {
		if !validModelName(name) || name == cfg.Model {
			return nil, fmt.Errorf("server: LoRA module name %q must be 1-128 characters of letters, digits and ._:/- and not the model's", name)
		}
	}
	if len(cfg.LoRAModules) > 0 && cfg.Engine.MaxLoRAs <= 0 {
		cfg.Engine.MaxLoRAs = 1 // vLLM's default --max-loras
	}
	if cfg.TimeScale <= 0 {
		cfg.TimeScale = 1
	}
	if cfg.DefaultMaxTokens <= 0 {
		cfg.DefaultMaxTokens = 256
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = request.DefaultMaxBodyBytes
	}
	switch cfg.MetricsStyle {
	case "":
		cfg.MetricsStyle = "vllm"
	case "vllm", "sglang", "none":
	default:
		return nil, fmt.Errorf("server: metrics style must be vllm, sglang or none, not %q", cfg.MetricsStyle)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Exit == nil {
		cfg.Exit = os.Exit
	}
	cfg.Parse.MaxBodyBytes = cfg.MaxBodyBytes
	cfg.Engine.KVEvents = cfg.KVEvents.Enable
	s := &Server{
		cfg:   cfg,
		log:   cfg.Logger,
		eng:   engine.New(cfg.Engine),
		rng:   rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5eed)),
		wake:  make(chan struct{}, 1),
		clock: newClock(cfg.TimeScale),
	}
	s.metrics = newMetrics(s)
	s.ctx, s.close = context.WithCancel(context.Background())
	if err := s.startKVEvents(); err != nil {
		s.close()
		return nil, err
	}
	mux := http.NewServeMux()
	// Inference requests are traced (a server span each, under the
	// caller's traceparent); scrapes and health checks are not.
	generate := func(kind request.Kind) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) { s.complete(w, r, kind) }
	}
	handlers := map[request.Kind]http.HandlerFunc{
		request.Chat: generate(request.Chat), request.Completion: generate(request.Completion), request.Messages: generate(request.Messages),
		request.Responses: s.respond, request.CountTokens: s.countTokens, request.Embeddings: s.embeddings,
		request.Rerank: s.rerank, request.Score: s.score, request.Tokenize: s.tokenizeText, request.Detokenize: s.detokenizeText,
	}
	for _, e := range request.Endpoints { // every path the proxy routes
		mux.Handle("POST "+e.Path, cfg.Tracer.Handler(handlers[e.Kind]))
	}
	mux.HandleFunc("GET /v1/responses/{id}", s.retrieve)
	mux.HandleFunc("POST /v1/responses/{id}/cancel", s.cancelResponse)
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /kv_event_sources", s.kvEventSources)
	if cfg.MetricsStyle != "none" {
		mux.Handle("GET /metrics", s.metrics.handler())
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		apierr.Write(w, apierr.New(apierr.NotFound, "no route for %s %s", r.Method, r.URL.Path))
	})
	s.handler = mux
	return s, nil
}

// Handler returns the HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// EngineConfig returns the engine's resolved configuration.
func (s *Server) EngineConfig() engine.Config { return s.eng.Config() }

// Engine runs fn with the engine under the server's lock (for tests and
// metrics).
func (s *Server) Engine(fn func(*engine.Engine)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn(s.eng)
}

// Serve runs the engine loop and serves HTTP on l until ctx is done, then
// shuts down gracefully.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	loopCtx, stop := context.WithCancel(context.Background())
	defer stop()
	go s.Run(loopCtx)
	return httpserve.Run(ctx, l, s.handler, httpserve.Options{})
}

// Run is the engine loop: step the model in (scaled) real time until ctx
// is done.
func (s *Server) Run(ctx context.Context) {
	defer s.closeKV()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var lastEnd time.Time
	for {
		s.mu.Lock()
		now := s.clock.model(time.Now())
		if now.Before(lastEnd) {
			now = lastEnd
		}
		d, ok := s.eng.BeginStep(now)
		var kv []kvevents.Event
		if s.kv != nil {
			kv = s.eng.TakeKVEvents() // what scheduling the step evicted
		}
		s.mu.Unlock()
		s.publishKVEvents(kv)
		if !ok {
			select {
			case <-s.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		end := now.Add(d)
		timer.Reset(time.Until(s.clock.real(end)))
		select {
		case <-timer.C:
		case <-ctx.Done():
			return
		}
		s.mu.Lock()
		s.eng.EndStep(end, sink{s})
		kv = nil
		if s.kv != nil {
			kv = s.eng.TakeKVEvents()
		}
		s.mu.Unlock()
		s.publishKVEvents(kv)
		lastEnd = end
	}
}

// closeKV closes the KV-event publisher, if any.
func (s *Server) closeKV() {
	s.close()
	if s.kv != nil {
		_ = s.kv.Close()
	}
}

func validModelName(name string) bool {
	if name == "" || len(name) > 128 {
		return false
	}
	for _, c := range name {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '/' || c == '-'
		if !ok {
			return false
		}
	}
	return true
}

func (s *Server) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// clock maps real time to model time: model = base + (real − start)·scale.
type clock struct {
	start time.Time
	base  time.Time
	scale float64
}

func newClock(scale float64) clock {
	now := time.Now()
	return clock{start: now, base: now, scale: scale}
}

func (c clock) model(real time.Time) time.Time {
	return c.base.Add(time.Duration(float64(real.Sub(c.start)) * c.scale))
}

func (c clock) real(model time.Time) time.Time {
	return c.start.Add(time.Duration(float64(model.Sub(c.base)) / c.scale))
}

// stream is one request's view of its sequence, updated by the engine
// loop and read by the request's handler, both under Server.mu.
type stream struct {
	seq    *engine.Sequence
	notify chan struct{} // capacity 1: "something changed"
	done   bool
	last   time.Time // model time of the latest token, for inter-token latency
}

// sink feeds engine events to streams and metrics (called under Server.mu).
type sink struct{ s *Server }

func (k sink) FirstToken(seq *engine.Sequence, now time.Time) {
	st := seq.Data.(*stream)
	k.s.metrics.observeTTFT(now.Sub(seq.Arrival))
	st.last = now
	st.signal()
}

func (k sink) Token(seq *engine.Sequence, now time.Time) {
	st := seq.Data.(*stream)
	k.s.metrics.observeITL(now.Sub(st.last))
	st.last = now
	st.signal()
}

func (k sink) Finished(seq *engine.Sequence, now time.Time) {
	st := seq.Data.(*stream)
	st.done = true
	k.s.metrics.observeE2E(now.Sub(seq.Arrival))
	st.signal()
}

func (st *stream) signal() {
	select {
	case st.notify <- struct{}{}:
	default:
	}
}

func (s *Server) chance(p float64) bool {
	if p <= 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rng.Float64() < p
}

// models serves /v1/models as vLLM does: the model, with parent null,
// then each LoRA module with the model as its parent.
func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	type card struct {
		ID          string  `json:"id"`
		Object      string  `json:"object"`
		Created     int64   `json:"created"`
		OwnedBy     string  `json:"owned_by"`
		Root        string  `json:"root"`
		Parent      *string `json:"parent"`
		MaxModelLen int     `json:"max_model_len"`
	}
	created, maxLen := s.clock.start.Unix(), s.eng.Config().MaxModelLen
	list := struct {
		Object string `json:"object"`
		Data   []card `json:"data"`
	}{Object: "list", Data: []card{{ID: s.cfg.Model, Object: "model", Created: created, OwnedBy: "skywalker", Root: s.cfg.Model, MaxModelLen: maxLen}}}
	for _, name := range s.cfg.LoRAModules {
		list.Data = append(list.Data, card{ID: name, Object: "model", Created: created, OwnedBy: "skywalker", Root: "/adapters/" + name,
			Parent: &s.cfg.Model, MaxModelLen: maxLen})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(list)
}
