package proxy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"skywalker/internal/apierr"
	"skywalker/internal/region"
	"skywalker/internal/request"
	"skywalker/internal/results"
)

// completion handles every inference endpoint (see request.Kind): parse,
// route, then stream from a local replica or a peer region, retrying
// before the first byte on another target. Errors the proxy makes are in
// the endpoint's API's shape (request.Kind.Shape).
func (s *Server) completion(kind request.Kind) http.HandlerFunc {
	shape := kind.Shape()
	return func(w http.ResponseWriter, r *http.Request) {
		if s.draining.Load() {
			s.closeWhenDraining(w.Header())
			apierr.WriteAs(w, &apierr.Error{Code: apierr.Unavailable, Message: "this proxy is shutting down", RetryAfter: time.Second}, shape)
			return
		}
		s.active.Add(1)
		defer s.active.Done()
		arrival := time.Now()
		tr := s.startTrace(r)
		defer tr.admit.End() // ended earlier (admitted) unless refused before routing
		rc := http.NewResponseController(w)
		client := clientOf(r)
		paced := &pacedBody{body: r.Body, rc: rc, start: arrival, grace: s.cfg.BodyTimeout, rate: float64(s.cfg.MinBodyRate),
			ledger: s.bodies, client: client}
		defer s.bodies.release(paced)
		if declared := r.ContentLength; declared > 0 {
			// A declared length is reserved before a byte of it is read:
			// uploads that arrive at once cannot all pass the check and
			// then overrun the budget together.
			if refusal := s.bodies.cover(paced, BodyMemoryFactor*declared); refusal != nil {
				abandonBody(rc, r)
				s.reject(w, shape, refusal, "overloaded")
				return
			}
		}
		bufp := bodyBuffers.get(r.ContentLength)
		req, body, err := request.ParseFrom(kind, paced, r.ContentLength, *bufp,
			request.Options{MaxBodyBytes: s.cfg.MaxBodyBytes, BytesPerToken: s.cfg.BytesPerToken})
		paced.whole.Store(true) // arrived or failed: no longer cut to make room
		defer func() {
			*bufp = body[:0]
			bodyBuffers.put(bufp)
		}()
		if err != nil {
			abandonBody(rc, r)
			outcome := "bad_request"
			if e, ok := apierr.As(err); ok && e.Code == apierr.Overloaded {
				outcome = "overloaded"
			}
			s.reject(w, shape, err, outcome)
			return
		}
		_ = rc.SetReadDeadline(time.Time{}) // the body is in; the connection may idle again
		if err := s.applyHeaders(req, r); err != nil {
			s.reject(w, shape, err, "bad_request")
			return
		}
		req.ID, req.Region, req.Arrival = s.cfg.NodeID+"-"+strconv.FormatUint(s.ids.Add(1), 36), s.cfg.Region, arrival
		req.Deadline = arrival.Add(s.cfg.MaxWait) // retries do not extend it
		if marker := r.Header.Get(forwardKey); marker != "" {
			fwd, err := s.acceptForward(r, marker, body, arrival)
			if err != nil {
				s.refused(r, "forwarding marker refused", err)
				s.reject(w, shape, &apierr.Error{Code: apierr.Forbidden, Message: err.Error()}, "forbidden")
				return
			}
			req.ID, req.Region, req.Tenant, req.Owner, req.Forwarded = fwd.ID, fwd.Origin, fwd.Tenant, fwd.Owner, true
			if !req.AllowedIn(s.cfg.Jurisdiction) {
				s.reject(w, shape, &apierr.Error{Code: apierr.Forbidden, Param: "metadata.data_residency",
					Message: "a request resident in " + req.Residency + " may not be served in " + s.cfg.Region}, "forbidden")
				return
			}
		} else if err := s.clientLimits(req); err != nil {
			// A forward keeps the class and priority its origin admitted
			// (the verified marker vouches for them): these limits are on
			// what this region's own clients may ask for, and a region
			// with other limits must not refuse its peers' requests.
			s.reject(w, shape, err, "bad_request")
			return
		}
		if target, ok := s.cfg.ModelAliases[req.Model]; ok {
			body = req.RewriteModel(body, target)
		}
		base, adapter, refused := s.router.resolve(req.Model)
		if refused != nil {
			outcome := "not_found"
			if refused.Code == apierr.InvalidRequest {
				outcome = "bad_request"
			}
			s.reject(w, shape, refused, outcome)
			return
		}
		req.SetPool(base, adapter)
		if refused := s.servesEndpoint(req, kind); refused != nil {
			s.reject(w, shape, refused, "bad_request")
			return
		}
		if h := s.cfg.SessionHeader; h != "" {
			req.SetAffinityHeader(r.Header.Get(h))
		}
		var chain chainBodies
		if req.PreviousResponse != "" {
			if s.cfg.ResponsesStartOver && req.Resent {
				req.StartOver, chain.fresh = true, req.WithoutPrevious(body)
			}
			var refused *apierr.Error
			if chain.home, refused = s.goHome(req, body); refused != nil {
				s.reject(w, shape, refused, "bad_request")
				return
			}
		}
		s.serve(w, r, kind, req, body, chain, tr)
	}
}

// acceptForward checks a forwarded request: it came over TLS when the
// proxy has a peer listener, and its marker verifies (see markers.verify).
func (s *Server) acceptForward(r *http.Request, marker string, body []byte, now time.Time) (forward, error) {
	if s.cfg.TLSCert != "" && r.TLS == nil {
		return forward{}, errors.New("forwarded requests are taken over TLS only, on the peer listener")
	}
	return s.markers.verify(marker, s.cfg.Region, s.cfg.AdvertiseURL, body, now)
}

// clientLimits refuses a client's request for a priority class or an
// engine priority this deployment does not let its clients ask for.
func (s *Server) clientLimits(req *request.Request) error {
	if req.Class.Rank() < s.maxClass.Rank() {
		return apierr.Invalid("priority", "priority class %s is above %s, the most urgent this deployment lets clients ask for (SKYWALKER_PRIORITY_CLASS_MAX)",
			req.Class, s.maxClass)
	}
	if p := req.Priority; p < s.cfg.PriorityMin || p > s.cfg.PriorityMax {
		return apierr.Invalid("priority", "priority %d is outside [%d, %d], the range this deployment allows (SKYWALKER_PRIORITY_MIN, SKYWALKER_PRIORITY_MAX)",
			p, s.cfg.PriorityMin, s.cfg.PriorityMax)
	}
	return nil
}

// The headers a client steers its request with, besides the body's
// metadata (see README "Talking to SkyWalker").
const (
	PriorityHeader = "X-SkyWalker-Priority" // critical, standard (default), sheddable
	WaitHeader     = "X-SkyWalker-Wait"     // true: hold rather than refuse under overload
)

// applyHeaders merges what the client's headers say into req: residency,
// priority class, the wait flag, and its tenant: what the client cannot
// choose freely by default — a hash of its API key, else of its address —
// or the configured tenant header, which only an operator who trusts
// whoever sets it (a gateway in front) configures.
func (s *Server) applyHeaders(req *request.Request, r *http.Request) error {
	h := r.Header
	if err := req.ApplyResidencyHeader(h.Get("X-Data-Residency")); err != nil {
		return err
	}
	if err := req.ApplyPriorityHeader(h.Get(priorityKey)); err != nil {
		return err
	}
	if err := req.ApplyWaitHeader(h.Get(waitKey)); err != nil {
		return err
	}
	// The tenant is what the operator says it is: a header its gateway
	// sets, else an API key it lists (SKYWALKER_TENANT_KEYS), else the
	// client's address — a key the proxy cannot verify never names a
	// tenant, or a client rotating keys would be many tenants. The owner
	// of what the request stores is the header's tenant, else the key's
	// hash: a chain stays its key's, listed or not.
	if name := s.cfg.TenantHeader; name != "" {
		if v := h.Get(name); v != "" {
			if err := req.SetTenant(name, v); err != nil {
				return err
			}
			req.Owner = req.Tenant
			return nil
		}
	}
	key := bearer(h.Get("Authorization"))
	if key == "" {
		key = strings.TrimSpace(h.Get("X-Api-Key")) // Anthropic's clients send theirs here
	}
	if key != "" {
		sum := sha256.Sum256([]byte(key))
		req.Owner = "key-" + hex.EncodeToString(sum[:6])
		if s.tenantKey(sum) {
			req.Tenant = req.Owner
			return nil
		}
	}
	sum := sha256.Sum256([]byte(clientOf(r)))
	req.Tenant = "addr-" + hex.EncodeToString(sum[:6])
	return nil
}

// bearer is the credential of an Authorization value, without its
// scheme.
func bearer(v string) string {
	if scheme, cred, ok := strings.Cut(strings.TrimSpace(v), " "); ok && strings.EqualFold(scheme, "Bearer") {
		return strings.TrimSpace(cred)
	}
	return strings.TrimSpace(v)
}

// tenantKey reports whether the API key whose SHA-256 is sum names a
// tenant of its own: every key when TenantKeys is "*" (a gateway in front
// verifies them), else the keys listed by their digest.
func (s *Server) tenantKey(sum [32]byte) bool {
	digest := hex.EncodeToString(sum[:])
	for _, k := range s.cfg.TenantKeys {
		if k == "*" || strings.EqualFold(k, digest) {
			return true
		}
	}
	return false
}

// bodyBuffers recycles request body buffers in size classes, so that a
// long-context body (400 KB, ~100k tokens) reads into a reused buffer of
// its size instead of growing one by copies.
var bodyBuffers = newSizedPool(4<<20, 64<<10, 256<<10, 512<<10)

// sizedPool is a sync.Pool per buffer size class.
type sizedPool struct {
	sizes   []int // ascending
	pools   []sync.Pool
	maxKept int // a buffer grown beyond this is left to the collector
}

func newSizedPool(maxKept int, sizes ...int) *sizedPool {
	p := &sizedPool{sizes: sizes, pools: make([]sync.Pool, len(sizes)), maxKept: maxKept}
	for i, n := range sizes {
		p.pools[i].New = func() any { b := make([]byte, 0, n); return &b }
	}
	return p
}

// get returns a buffer of the smallest class that holds a body of the
// declared size (-1: unknown). A declaration is trusted up to the largest
// class only (512 KiB: a 100k-token prompt): beyond it the buffer grows
// with what arrives, so bodies that are declared and never sent cost
// little.
func (p *sizedPool) get(declared int64) *[]byte {
	i := 0
	for i < len(p.sizes)-1 && declared > int64(p.sizes[i]) {
		i++
	}
	return p.pools[i].Get().(*[]byte)
}

// put returns a buffer to the largest class it can serve.
func (p *sizedPool) put(b *[]byte) {
	if cap(*b) > p.maxKept {
		return
	}
	for i := len(p.sizes) - 1; i >= 0; i-- {
		if cap(*b) >= p.sizes[i] {
			p.pools[i].Put(b)
			return
		}
	}
}

// serve routes one parsed request, runs its attempts, relays the answer
// and accounts for how it ended. chain is a Responses chain's other bodies, if any.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, kind request.Kind, req *request.Request, body []byte, chain chainBodies, tr exchangeTrace) {
	ctx, abandon := context.WithCancelCause(r.Context())
	defer abandon(nil)
	x := &exchange{s: s, kind: kind, req: req, body: body, chain: chain, ctx: ctx, abandon: abandon, outbound: outboundRequest(ctx, r), trace: tr}
	dw := &deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w), timeout: s.cfg.WriteTimeout}
	defer func() {
		dw.done()
		for _, b := range x.pending {
			b.wait() // the transport is done with the pooled body buffer
		}
		s.account(x)
		x.endTrace()
	}()
	o, err := s.router.Route(ctx, req)
	x.trace.admitted(kind, req, o.Waited, err)
	x.relay(dw, r, o, err)
}

// account records how an exchange ended, once: ok (delivered in full,
// whatever the client did after the end), failed_midstream (the upstream
// broke while the client was there), rejected before any byte (relayError
// counted it), or cancelled (the client left first; the upstream request,
// and a forwarded one at the peer, was closed with it).
func (s *Server) account(x *exchange) {
	if x.target.Attempt != nil {
		x.endAttempt(region.Released) // the response never reached its body
	}
	if !x.firstByte.IsZero() {
		s.metrics.ttft.Observe(x.firstByte.Sub(x.req.Arrival).Seconds())
	}
	req := x.req
	served := x.servedBy
	if x.req.StartedOver && x.complete {
		s.metrics.chainsStartedOver.Inc()
	}
	switch {
	case x.rejected != nil:
		s.metrics.requests.WithLabelValues(req.Region, "", "rejected").Inc()
	case x.broken != nil:
		s.metrics.requests.WithLabelValues(req.Region, served, "failed_midstream").Inc()
		s.logEvery("midway\x00"+served, slog.LevelWarn, "stream failed midway", "id", req.ID, "served", served, "err", x.broken)
	case x.complete:
		s.metrics.requests.WithLabelValues(req.Region, served, "ok").Inc()
		if !req.Forwarded {
			s.demand.add(req.Arrival, req.PromptTokens, x.counter.outputTokens())
		}
	default:
		s.metrics.requests.WithLabelValues(req.Region, served, "cancelled").Inc()
	}
}

// refused logs a security refusal at most once per source address per
// interval (a replaying client could otherwise write a line per request).
func (s *Server) refused(r *http.Request, what string, err error) {
	source, _, _ := net.SplitHostPort(r.RemoteAddr)
	s.logEvery(what+"\x00"+source, slog.LevelWarn, what, "source", source, "err", err)
}

// logEvery writes a line of a kind that can come once per request (a
// failing replica, a flood of refusals) at most once per key per
// NoisyLogEvery, saying how many it held back.
func (s *Server) logEvery(key string, level slog.Level, msg string, args ...any) {
	if ok, suppressed := s.noisy.Allow(key); ok {
		if suppressed > 0 {
			args = append(args, "suppressed", suppressed)
		}
		s.log.Log(context.Background(), level, msg, args...)
	}
}

// closeWhenDraining asks the client, once the proxy drains, to open its
// next request's connection afresh (to another proxy) after this answer.
func (s *Server) closeWhenDraining(h http.Header) {
	if s.draining.Load() {
		h.Set("Connection", "close")
	}
}

// reject answers a request the proxy refuses before routing it, in shape.
func (s *Server) reject(w http.ResponseWriter, shape apierr.Shape, err error, outcome string) {
	s.closeWhenDraining(w.Header())
	e := apierr.From(err)
	s.metrics.requests.WithLabelValues(s.cfg.Region, "", outcome).Inc()
	apierr.WriteAs(w, e, shape)
}

// models serves /v1/models: the engines' own model cards (union over the
// replicas, one per id), then one card per configured alias, shaped like
// the card of the model it names with its id replaced, then one per model
// only peer regions serve (owned_by "skywalker:REGION,...": requests for
// it are forwarded).
func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	cards, _ := s.router.modelCards()
	remote := s.router.remoteModels()
	list := struct {
		Object string            `json:"object"`
		Data   []json.RawMessage `json:"data"`
	}{Object: "list", Data: []json.RawMessage{}}
	byID := map[string]json.RawMessage{}
	for _, c := range cards {
		raw := s.withEndpoints(c.ID, c.Raw)
		list.Data = append(list.Data, raw)
		byID[c.ID] = raw
	}
	aliases := make([]string, 0, len(s.cfg.ModelAliases))
	for a := range s.cfg.ModelAliases {
		aliases = append(aliases, a)
	}
	slices.Sort(aliases)
	for _, a := range aliases {
		card := map[string]any{}
		if raw, ok := byID[s.cfg.ModelAliases[a]]; ok {
			_ = json.Unmarshal(raw, &card)
		} else {
			card["object"], card["created"] = "model", time.Now().Unix()
		}
		card["id"], card["root"] = a, s.cfg.ModelAliases[a]
		raw, _ := json.Marshal(card) // a decoded JSON object marshals
		list.Data = append(list.Data, raw)
	}
	for _, m := range remote {
		if _, ok := byID[m.id]; !ok {
			raw, _ := json.Marshal(map[string]any{"id": m.id, "object": "model", "created": s.started.Unix(),
				"owned_by": "skywalker:" + strings.Join(m.regions, ","), "root": m.id, "parent": nil})
			list.Data = append(list.Data, s.withEndpoints(m.id, raw))
		}
	}
	writeJSON(w, 200, list)
}

// debug serves /debug/skywalker: the current view, gates, RTTs, queue and
// recent decisions.
func (s *Server) debug(w http.ResponseWriter, _ *http.Request) {
	snap := s.router.snapshot()
	type replicaView struct {
		Model       string  `json:"model"`
		Name        string  `json:"name"`
		URL         string  `json:"url"`
		Healthy     bool    `json:"healthy"`
		InFlight    int     `json:"in_flight"`
		DispatchCap int     `json:"dispatch_cap"`
		Waiting     int     `json:"waiting"`
		Running     int     `json:"running"`
		KVUsage     float64 `json:"kv_usage"`
		Metrics     bool    `json:"engine_metrics"`
		Blocks      int     `json:"indexed_blocks"`
		CacheSource string  `json:"cache_source"` // belief, events or lost: what the index rests on
	}
	type peerView struct {
		Region   string  `json:"region"`
		Healthy  bool    `json:"healthy"`
		Nodes    int     `json:"nodes"`
		RTTMs    float64 `json:"rtt_ms"`
		Loss     float64 `json:"loss"`
		GateOpen bool    `json:"gate_open"`
		Gate     string  `json:"gate"`
		AgeMs    float64 `json:"data_age_ms"`
		Queued   int     `json:"queued"`
		Replicas int     `json:"replicas"`
	}
	out := struct {
		Region string `json:"region"`
		Node   string `json:"node"`
		Policy string `json:"policy"`
		// SharingDispatches: this proxy tells the other proxies of its
		// region what it dispatches (it has siblings in the mesh).
		SharingDispatches bool          `json:"sharing_dispatches"`
		Replicas          []replicaView `json:"replicas"`
		Peers             []peerView    `json:"peers"`
		Queue             any           `json:"queue"`
		Hold              holdSummary   `json:"hold"`
		Decisions         []Decision    `json:"recent_decisions"`
	}{Region: s.cfg.Region, Node: s.cfg.NodeID, Policy: snap.policy, SharingDispatches: snap.sharing, Queue: snap.Held, Hold: summarizeHold(snap.recent), Decisions: snap.recent}
	for _, h := range snap.Replicas {
		m, url := h.Metrics, ""
		for _, rp := range snap.replicas {
			if rp.host == h.Name && rp.url != nil {
				url = rp.url.String()
			}
		}
		out.Replicas = append(out.Replicas, replicaView{Model: h.Model, Name: h.Name, URL: url, Healthy: h.Healthy, InFlight: h.InFlight,
			DispatchCap: h.DispatchCap, Waiting: m.Waiting, Running: m.Running, KVUsage: m.KVUsage, Metrics: m.Known, Blocks: h.IndexedBlocks,
			CacheSource: h.CacheSource.String()})
	}
	for _, p := range snap.Peers {
		out.Peers = append(out.Peers, peerView{Region: p.Region, Healthy: p.Healthy, Nodes: p.Nodes, RTTMs: float64(p.RTT) / 1e6,
			Loss: p.Loss, GateOpen: p.GateOpen, Gate: p.Gate, AgeMs: float64(p.DataAge) / 1e6, Queued: p.Load.Queued, Replicas: p.Load.Replicas})
	}
	writeJSON(w, 200, out)
}

// holdSummary is how long the recent decisions' requests were held in the
// balancer queue before they left it (dispatched, forwarded, refused or
// shed): where a request's time goes before any engine sees it. The
// histogram skywalker_queue_wait_seconds has the whole history.
type holdSummary struct {
	Decisions int     `json:"decisions"` // recent decisions summarised
	Held      int     `json:"held"`      // of which held at all
	P50Ms     float64 `json:"p50_ms"`
	P99Ms     float64 `json:"p99_ms"`
	MaxMs     float64 `json:"max_ms"`
}

// summarizeHold summarises the hold of recent decisions.
func summarizeHold(recent []Decision) holdSummary {
	ms := make([]float64, 0, len(recent))
	out := holdSummary{Decisions: len(recent)}
	for _, d := range recent {
		if d.waited > 0 {
			out.Held++
		}
		ms = append(ms, results.Ms(d.waited))
	}
	slices.Sort(ms)
	out.P50Ms, out.P99Ms = results.Round(results.Percentile(ms, 0.5), 1), results.Round(results.Percentile(ms, 0.99), 1)
	if len(ms) > 0 {
		out.MaxMs = results.Round(ms[len(ms)-1], 1)
	}
	return out
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// endpointsFor is the endpoints model serves (Config.ModelEndpoints: the
// model as named, else its base model); nil when not configured.
func (s *Server) endpointsFor(model, base string) []request.Kind {
	if kinds, ok := s.endpointsOf[model]; ok {
		return kinds
	}
	return s.endpointsOf[base]
}

// servesEndpoint refuses a request for an endpoint its model does not
// serve (Config.ModelEndpoints).
func (s *Server) servesEndpoint(req *request.Request, kind request.Kind) *apierr.Error {
	kinds := s.endpointsFor(req.Model, req.Base)
	if kinds == nil || slices.Contains(kinds, kind) {
		return nil
	}
	return apierr.Invalid("model", "the model %q does not serve %s requests; it serves %s (SKYWALKER_MODEL_ENDPOINTS)", req.Model, kind, endpointNames(kinds))
}

func endpointNames(kinds []request.Kind) string {
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = k.String()
	}
	return strings.Join(names, ", ")
}

// withEndpoints adds to a model card the endpoints its model serves
// (skywalker_endpoints: their paths), when configured.
func (s *Server) withEndpoints(id string, raw json.RawMessage) json.RawMessage {
	kinds := s.endpointsFor(id, "")
	if kinds == nil {
		return raw
	}
	card := map[string]any{}
	if json.Unmarshal(raw, &card) != nil {
		return raw
	}
	var paths []string
	for _, e := range request.Endpoints {
		if slices.Contains(kinds, e.Kind) {
			paths = append(paths, e.Path)
		}
	}
	card["skywalker_endpoints"] = paths
	out, err := json.Marshal(card)
	if err != nil {
		return raw
	}
	return out
}
