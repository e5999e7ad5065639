package proxy

import (
	"bytes"
	"net/textproto"

	"context"
	"errors"
	"fmt"
	"golang.org/x/net/http/httpguts"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"skywalker/internal/apierr"
	"skywalker/internal/region"
	"skywalker/internal/request"
)

// The relay: the handler owns a request's attempt loop — route, send,
// hear the answer, and while nothing has reached the client end the
// attempt as the core says (region.Attempt.Answered, End) and take the
// next one it routes — as Caddy's reverse proxy does; copyResponse copies
// the answer that won: it drops hop-by-hop headers, including those named
// in Connection, flushes every SSE chunk at once and aborts a body that
// fails midway. (It was httputil.ReverseProxy, whose per-request clone of
// the request, its headers and URL — for a round trip already made — cost
// 26 of 147 allocations and, measured by removing it, about 45 % of the
// proxy's CPU per 1 KB request: README "Measurements: the proxy".) An
// answer that could not be served is the client's error in its API's
// shape. watch.go watches the body that reaches the client.

// exchange is one client request on its way through the relay.
type exchange struct {
	s    *Server
	kind request.Kind
	req  *request.Request
	body []byte
	// chain is a Responses chain's bodies beside the client's (the core
	// marks a chain sent as a new one: request.Request.StartedOver).
	chain chainBodies
	// ctx is the client's request's context, ended also when the proxy
	// gives up on the client (abandon): every attempt's context derives
	// from it.
	ctx     context.Context
	abandon context.CancelCauseFunc
	// outbound is the client's request as every attempt sends it
	// (hop-by-hop headers dropped); each attempt clones it.
	outbound *http.Request

	target routed
	start  time.Time // when the current attempt was sent
	// What the client saw.
	servedBy  string // the region whose answer reached the client
	firstByte time.Time
	status    int
	complete  bool          // the upstream body reached its end
	broken    error         // the upstream broke after the status was sent
	rejected  *apierr.Error // answered with this error before any byte
	counter   relayCounter
	pending   []*bodyReader // request bodies handed to the transport
	// The attempt that reached the client: cancelling its context ends
	// the upstream exchange; stall fires when no chunk came for
	// StallTimeout.
	attemptCtx context.Context
	cancel     context.CancelCauseFunc
	stopExpire func() bool // unhooks the attempt from the drain deadline
	stall      *time.Timer
	trace      exchangeTrace // trace.go
}

// Why an attempt's context ended, when the proxy ended it.
var (
	errNoFirstByte = errors.New("no first byte in time")
	errStalled     = errors.New("the upstream stream stalled")
	// errDrained ends what is still in flight when the drain deadline is
	// near: the proxy is about to exit, and a client told so can retry.
	errDrained = errors.New("this proxy is shutting down and could not finish the request before its drain deadline; retry")
)

// firstByteTimeout is how long an attempt may wait for its first byte:
// FirstByteTimeout when configured, else what the core learned the
// target takes (region.Attempt.FirstTokenTimeout, learned). A response
// that is not streamed comes whole at the end, so it is also allowed its
// output at a slow 10 tokens per second (max_tokens, or 2,048 if the
// client set none).
func (x *exchange) firstByteTimeout(learned time.Duration) time.Duration {
	d := x.s.cfg.FirstByteTimeout
	if d <= 0 {
		d = learned
	}
	if !x.req.Stream {
		tokens := x.req.MaxTokens
		if tokens <= 0 {
			tokens = 2048
		}
		d += time.Duration(tokens) * 100 * time.Millisecond
	}
	return d
}

// firstByteRecheck is how often a waiting attempt's learned timeout is
// read again: it shrinks when the region learns, while the attempt
// waits, how long its replicas really take.
const firstByteRecheck = time.Second

// firstByteTimer cancels an attempt whose first byte is overdue.
type firstByteTimer struct {
	mu      sync.Mutex
	t       *time.Timer
	stopped bool
	limit   time.Duration // the timeout as last read
}

// watchFirstByte starts the timer of attempt o, sent now: it cancels the
// attempt with errNoFirstByte once its timeout has passed, reading the
// timeout again every firstByteRecheck.
func (x *exchange) watchFirstByte(o routed) *firstByteTimer {
	ft := &firstByteTimer{}
	sent := time.Now()
	cancel := o.cancel
	learned := o.timeout // as the attempt was delivered; read again while it waits
	var check func()
	check = func() {
		if learned == 0 {
			learned = x.s.router.firstTokenTimeout(o.Attempt)
		}
		limit := x.firstByteTimeout(learned)
		learned = 0
		ft.mu.Lock()
		defer ft.mu.Unlock()
		if ft.stopped {
			return
		}
		ft.limit = limit
		left := limit - time.Since(sent)
		if left <= 0 {
			cancel(errNoFirstByte)
			return
		}
		ft.t = time.AfterFunc(min(left, firstByteRecheck), check)
	}
	check()
	return ft
}

// stop stops the timer; once it returns the attempt is cancelled by it
// only if it already was. It returns the timeout as last read.
func (ft *firstByteTimer) stop() time.Duration {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	ft.stopped = true
	if ft.t != nil {
		ft.t.Stop()
	}
	return ft.limit
}

// noFirstByte says that an attempt had no first byte within timeout, how
// the timeout was set, and which setting to change for an engine slower
// than that.
func (x *exchange) noFirstByte(o routed, timeout time.Duration) error {
	how := "first_byte_timeout (SKYWALKER_FIRST_BYTE_TIMEOUT)"
	if x.s.cfg.FirstByteTimeout <= 0 {
		how = fmt.Sprintf("learned: %d× the slowest first tokens this target has given for work like this, at least %v, %v before it had given any; SKYWALKER_FIRST_BYTE_TIMEOUT sets it by hand",
			region.FirstTokenFactor, region.MinFirstTokenTimeout, region.InitialFirstTokenTimeout)
	}
	return fmt.Errorf("no first byte within %v (%s)", timeout.Round(time.Millisecond), how)
}

// relay runs the request's attempts (o, err: its routing) and copies the
// answer that won to w, or answers the client's error.
func (x *exchange) relay(w http.ResponseWriter, r *http.Request, o routed, err error) {
	resp, err := x.attempt(x.body, o, err)
	if err != nil {
		x.s.relayError(w, r, x, err)
		return
	}
	if x.kind == request.Responses && x.target.replica != nil {
		resp = x.fromReplica(resp, x.target.replica.name())
	}
	x.watch(resp)
	x.s.copyResponse(w, r.WithContext(x.ctx), resp, x.label, x.kind.Shape())
}

// outboundRequest is r as the proxy sends it upstream, under ctx: its
// headers less the hop-by-hop ones (RFC 9110 §7.6.1, and those named in
// Connection), the forwarding marker and the X-Forwarded-* and Forwarded
// headers, which a client may not set; no body (each attempt sets its
// own), as httputil.ReverseProxy makes it before its Rewrite hook.
func outboundRequest(ctx context.Context, r *http.Request) *http.Request {
	out := r.Clone(ctx)
	out.RequestURI, out.Close = "", false
	out.Body, out.ContentLength, out.GetBody = nil, 0, nil
	h := out.Header
	for _, f := range h["Connection"] {
		for name := range strings.SplitSeq(f, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	keepTE := httpguts.HeaderValuesContainsToken(h["Te"], "trailers")
	for _, name := range hopHeaders {
		h.Del(name)
	}
	if keepTE {
		h.Set("Te", "trailers")
	}
	h.Del(forwardKey)
	for _, name := range []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
		h.Del(name) // as ReverseProxy's Rewrite drops them: a client may not claim where it came from
	}
	if _, ok := h["User-Agent"]; !ok {
		h.Set("User-Agent", "") // not Go's default: the client sent none
	}
	return out
}

// hopHeaders are the hop-by-hop headers a proxy drops.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// attempt sends body to the routed target o (err: routing failed) and,
// while it fails before its first byte, ends it as the core says and
// takes the next attempt the core routes (region.Attempt.Answered and End
// apply the retry bound, and serve a failed forward here), until one
// answers with its first byte; the response returned is the current
// attempt's (x.target).
func (x *exchange) attempt(body []byte, o routed, err error) (*http.Response, error) {
	ctx := x.ctx
	for {
		if err != nil {
			return nil, err // a rejection (*apierr.Error) or the client left
		}
		x.target = o
		x.startAttempt(o)
		x.s.metrics.queueWait.Observe(o.Waited.Seconds())
		if o.replica != nil && x.req.PromptTokens > 0 {
			x.s.metrics.match.Observe(float64(x.req.CachedTokens(o.PrefixBlocks)) / float64(x.req.PromptTokens))
		}
		// The attempt's own context (o.ctx) is cancelled if no first byte
		// comes in time (the target hung), if its replica is ejected
		// meanwhile, later if the stream stalls, and when the drain
		// deadline is near (see Server.Serve).
		stopExpire := context.AfterFunc(x.s.expiring, func() { o.cancel(errDrained) })
		timer := x.watchFirstByte(o)
		// What the answer's status means is the core's to say
		// (region.Attempt.Answered): it goes to the client, the chain
		// starts over at its home (the engine no longer holds the previous
		// response), or the attempt failed and the core says what follows.
		resp, sendErr := x.sendAndAwait(o, x.bodyFor(o, body))
		var verdict region.Next
		var next routed
		var routeErr error
		if sendErr == nil {
			next, verdict, routeErr = x.s.router.Answered(ctx, o.Attempt, resp.StatusCode, answeredByEngine(o, resp), true)
			if verdict.StartOver && x.chain.fresh != nil {
				drain(resp)
				if resp, sendErr = x.sendAndAwait(o, x.chain.fresh); sendErr == nil {
					next, verdict, routeErr = x.s.router.Answered(ctx, o.Attempt, resp.StatusCode, answeredByEngine(o, resp), true)
				}
			}
		}
		ended := verdict.Retry || verdict.Err != nil // the core ended the attempt as failed
		if sendErr == nil && !ended && !verdict.StartOver {
			timer.stop()
			x.attemptCtx, x.cancel, x.stopExpire = o.ctx, o.cancel, stopExpire
			return resp, nil
		}
		timeout := timer.stop()
		if resp != nil {
			drain(resp)
			if sendErr == nil {
				sendErr = errors.New("upstream answered " + resp.Status)
			}
		}
		stopExpire()
		cause := context.Cause(o.ctx)
		o.cancel(nil)
		x.endAttemptSpan(sendErr)
		how := region.ReplicaFailed
		switch {
		case cause == errNoFirstByte:
			how = region.TimedOut
			sendErr = x.noFirstByte(o, timeout)
			x.s.metrics.upstreamTimeouts.WithLabelValues("first_byte").Inc()
		case cause == errReplicaEjected:
			sendErr = cause
		case cause == errDrained, ctx.Err() != nil:
			how = region.Released // not the target's fault, and nowhere to retry
		}
		if o.Peer != nil {
			x.s.forwardWasted(o.Peer.Region, how, cause)
		}
		x.target = routed{}
		n := verdict
		if !ended {
			next, n, routeErr = x.s.router.End(ctx, o.Attempt, how)
		}
		switch {
		case cause == errDrained:
			return nil, &apierr.Error{Code: apierr.Unavailable, Message: errDrained.Error(), RetryAfter: time.Second}
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case n.Err != nil:
			return nil, &apierr.Error{Code: n.Err.Code, Message: n.Err.Message + ": " + sendErr.Error(), RetryAfter: n.Err.RetryAfter}
		}
		x.s.logEvery("retry\x00"+o.Decision.Region, slog.LevelInfo, "retrying elsewhere", "id", x.req.ID, "attempt", o.Number, "err", sendErr)
		o, err = next, routeErr
	}
}

// forwardWasted counts a forward to peer that ended how (cause: why its
// context ended) before its first byte, when the peer may have worked on
// it for nobody: cut at its deadline, its client gone, the proxy
// draining. A forward the peer failed or refused is not counted: its
// work ended there.
func (s *Server) forwardWasted(peer string, how region.Outcome, cause error) {
	why := ""
	switch {
	case how == region.TimedOut:
		why = "first_byte_timeout"
	case how == region.Released && cause == errDrained:
		why = "drained"
	case how == region.Released:
		why = "client_left"
	}
	if why != "" {
		s.metrics.forwardWasted.WithLabelValues(peer, why).Inc()
	}
}

// answeredByEngine reports whether resp, o's answer, is an engine's: a
// replica's here, or one the peer relayed from the engine that served the
// forward (it names the replica); a peer proxy's own refusal names none.
func answeredByEngine(o routed, resp *http.Response) bool {
	return o.replica != nil || resp.Header.Get(replicaKey) != ""
}

// sendAndAwait sends body to o and reads its answer up to its first body
// byte (a Responses stream's first token; or its clean end): nothing
// reaches the client before it, so until then a failure can go
// elsewhere. An engine that fails during prefill has streamed nothing the
// client saw; vLLM, like most engines, sends its response headers at once
// but its first chunk only with the first token.
func (x *exchange) sendAndAwait(o routed, body []byte) (*http.Response, error) {
	resp, err := x.send(o.ctx, o, body)
	if err != nil {
		return nil, err
	}
	if events := firstTokenEvents[x.kind]; events != nil && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		err = awaitFirstToken(resp, events)
	} else {
		err = awaitFirstByte(resp)
	}
	if err == nil && o.ctx.Err() != nil {
		err = context.Cause(o.ctx)
	}
	if err != nil {
		resp.Body.Close()
		return nil, err
	}
	return resp, nil
}

// CredentialHeaders are stripped from a request forwarded to a peer
// region unless ForwardAuthorization: every header an OpenAI-compatible
// client or gateway carries a credential in.
var CredentialHeaders = []string{"Authorization", "Proxy-Authorization", "Api-Key", "X-Api-Key", "Cookie",
	"OpenAI-Organization", "OpenAI-Project"}

// send makes one attempt at the routed target with body, under ctx.
func (x *exchange) send(ctx context.Context, o routed, body []byte) (*http.Response, error) {
	up := x.outbound.Clone(ctx)
	up.Host = ""
	var delay time.Duration
	if o.replica != nil {
		up.URL.Scheme, up.URL.Host = o.replica.url.Scheme, o.replica.url.Host
	} else {
		p := o.Peer
		if len(p.APIAddrs) == 0 {
			return nil, errors.New("peer region " + p.Region + " has no proxy address")
		}
		addr := p.APIAddrs[int(x.s.ids.Load())%len(p.APIAddrs)]
		base, err := parseBase(addr)
		if err != nil {
			return nil, err
		}
		up.URL.Scheme, up.URL.Host = base.Scheme, base.Host
		up.Header.Set(forwardKey, x.s.markers.sign(forward{Origin: x.s.cfg.Region, Dest: p.Region, DestProxy: addr, ID: x.req.ID, Tenant: x.req.Tenant, Owner: x.req.Owner}, body, time.Now()))
		if !x.s.cfg.ForwardAuthorization {
			for _, h := range CredentialHeaders { // the client's credentials stay in its region
				up.Header.Del(h)
			}
		}
		if x.req.Residency != "" {
			up.Header.Set("X-Data-Residency", x.req.Residency)
		}
		if x.s.opts.PeerDelay != nil {
			delay = x.s.opts.PeerDelay(p.Region)
		}
		x.s.metrics.forwarded.WithLabelValues(p.Region).Inc()
	}
	x.inject(up.Header)
	up.ContentLength, up.GetBody = int64(len(body)), nil
	if len(body) <= smallBody {
		// A copy the transport owns, of a type it knows is in memory: it
		// writes the headers and the body in one go (an unknown reader
		// costs a write of the headers alone first), and nothing waits
		// for it to let go of the pooled buffer.
		up.Body = io.NopCloser(bytes.NewReader(bytes.Clone(body)))
	} else {
		br := &bodyReader{Reader: bytes.NewReader(body), done: make(chan struct{})}
		up.Body = br
		x.pending = append(x.pending, br)
	}
	if delay > 0 && !sleep(ctx, delay) {
		return nil, ctx.Err()
	}
	x.start = time.Now()
	resp, err := x.s.upstream.RoundTrip(up)
	if err != nil {
		return nil, err
	}
	if delay > 0 && !sleep(ctx, delay) { // the response's first byte crosses back
		resp.Body.Close()
		return nil, ctx.Err()
	}
	return resp, nil
}

// awaitFirstByte reads until the response's first body byte (or its clean
// end) and puts what it read back in front of the body. An engine that
// fails during prefill has then streamed nothing the client saw, and the
// request can go elsewhere; vLLM, like most engines, sends its response
// headers at once but its first chunk only with the first token.
func awaitFirstByte(resp *http.Response) error {
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 || err == io.EOF {
			resp.Body = &prefixedBody{head: buf[:n], ReadCloser: resp.Body, eof: err == io.EOF}
			return nil
		}
		if err != nil {
			return fmt.Errorf("upstream failed before its first byte: %w", err)
		}
	}
}

// prefixedBody replays the bytes read ahead, then the rest of the body.
type prefixedBody struct {
	io.ReadCloser
	head []byte
	eof  bool
}

func (b *prefixedBody) Read(p []byte) (int, error) {
	if len(b.head) > 0 {
		n := copy(p, b.head)
		b.head = b.head[n:]
		return n, nil
	}
	if b.eof {
		return 0, io.EOF
	}
	return b.ReadCloser.Read(p)
}

// The header keys of every request, as net/http stores them (canonical):
// set or read with these, a key is not canonicalised, and allocated,
// again on every request.
var (
	regionKey   = http.CanonicalHeaderKey("X-SkyWalker-Region")
	replicaKey  = http.CanonicalHeaderKey("X-SkyWalker-Replica")
	ingressKey  = http.CanonicalHeaderKey("X-SkyWalker-Ingress-Region")
	reasonKey   = http.CanonicalHeaderKey("X-SkyWalker-Route-Reason")
	chainKey    = http.CanonicalHeaderKey("X-SkyWalker-Chain")
	forwardKey  = http.CanonicalHeaderKey(ForwardHeader)
	priorityKey = http.CanonicalHeaderKey(PriorityHeader)
	waitKey     = http.CanonicalHeaderKey(WaitHeader)
)

// label labels the answer that reaches the client with where it was
// served and why.
func (x *exchange) label(resp *http.Response) error {
	h := resp.Header
	o := x.target
	if o.replica != nil {
		h.Set(regionKey, x.s.cfg.Region)
		h.Set(replicaKey, o.replica.name())
	} else {
		h.Set(ingressKey, x.s.cfg.Region)
	}
	h.Set(reasonKey, string(o.Decision.Reason))
	if x.req.StartedOver {
		h.Set(chainKey, "started-over")
	}
	x.s.closeWhenDraining(h)
	return nil
}

// copyResponse copies resp, which answers r, to w: the one copier of
// every answer the proxy relays (a request's, and a stored response's).
// modify, if set, sees the response first. The hop-by-hop headers go
// (RFC 9110 §7.6.1, and those named in Connection); an event stream, or
// a body of unknown length, is flushed as each chunk comes; trailers the
// upstream announced follow the body. A body that fails midway aborts
// the response (http.ErrAbortHandler), so the client never mistakes it
// for a whole one. resp's body is closed.
func (s *Server) copyResponse(w http.ResponseWriter, r *http.Request, resp *http.Response, modify func(*http.Response) error, shape apierr.Shape) {
	defer resp.Body.Close()
	dropHopHeaders(resp.Header) // before modify: what it sets (Connection: close while draining) is this hop's
	if modify != nil {
		if err := modify(resp); err != nil {
			apierr.WriteAs(w, &apierr.Error{Code: apierr.Upstream, Message: "the upstream answer could not be relayed: " + err.Error()}, shape)
			return
		}
	}
	h := w.Header()
	for k, vv := range resp.Header {
		if len(h[k]) == 0 {
			h[k] = vv // resp is spent after this: its values need no copy
		} else {
			h[k] = append(h[k], vv...)
		}
	}
	if len(resp.Trailer) > 0 {
		names := make([]string, 0, len(resp.Trailer))
		for k := range resp.Trailer {
			names = append(names, k)
		}
		h.Set("Trailer", strings.Join(names, ", "))
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	flush := resp.ContentLength < 0 || strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	if flush || len(resp.Trailer) > 0 {
		_ = rc.Flush() // the headers go now: a stream's first event may be a while
	}
	bufp := relayBufferPool.Get().(*[]byte)
	defer relayBufferPool.Put(bufp)
	buf := *bufp
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				abort(r) // the client is gone or was cut
				return
			}
			if flush {
				if ferr := rc.Flush(); ferr != nil {
					abort(r)
					return
				}
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			abort(r)
			return
		}
	}
	for k, vv := range resp.Trailer {
		h[http.TrailerPrefix+k] = vv
	}
}

// abort ends a response that failed midway: an http.Server closes the
// connection without ending the body (http.ErrAbortHandler), so the
// client cannot mistake it for a whole one; a handler called directly
// (a test) just returns.
func abort(r *http.Request) {
	if r.Context().Value(http.ServerContextKey) != nil {
		panic(http.ErrAbortHandler)
	}
}

// dropHopHeaders removes the hop-by-hop headers of h: those RFC 9110
// §7.6.1 names and those listed in Connection.
func dropHopHeaders(h http.Header) {
	for _, f := range h["Connection"] {
		for name := range strings.SplitSeq(f, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}

// relayError answers a request the relay could not serve. Nothing has
// reached the client yet.
func (s *Server) relayError(w http.ResponseWriter, r *http.Request, x *exchange, err error) {
	var e *apierr.Error
	switch {
	case errors.As(err, &e):
	case r.Context().Err() != nil:
		return // the client left; nobody to answer
	default:
		e = &apierr.Error{Code: apierr.Upstream, Message: "no replica or region could serve the request: " + err.Error(), RetryAfter: time.Second}
	}
	x.rejected = e
	s.closeWhenDraining(w.Header())
	apierr.WriteAs(w, e, x.kind.Shape())
}

// smallBody is the largest request body sent upstream as a copy (see
// send): copying 16 KB costs less than the system call it saves.
const smallBody = 16 << 10

// bodyReader is an upstream request body that reports when the transport
// is done with it: the handler's pooled buffer is recycled only then.
type bodyReader struct {
	*bytes.Reader
	once sync.Once
	done chan struct{}
}

func (b *bodyReader) Close() error {
	b.once.Do(func() { close(b.done) })
	return nil
}

func (b *bodyReader) wait() {
	select {
	case <-b.done:
	case <-time.After(10 * time.Second): // never expected; do not hang the handler
	}
}

// parseBase reads a peer proxy's advertised base URL.
func parseBase(addr string) (*url.URL, error) {
	u, err := url.Parse(addr)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("peer address %q is not a URL", addr)
	}
	return u, nil
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// relayBufferPool pools the 32 KB buffers responses are copied with.
var relayBufferPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}
