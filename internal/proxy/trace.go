package proxy

import (
	"context"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"skywalker/internal/request"
	"skywalker/internal/tracing"
)

// A request's trace (Options.Tracer; off, every span is the zero Span and
// costs a nil check): the server span of its endpoint (tracing.Handler),
// under the client's traceparent; skywalker.admit for its parse,
// admission and hold; one client span per attempt — skywalker.dispatch to
// a replica or skywalker.forward to a peer region, carrying the routing
// decision and passing the trace context on, so that the peer's proxy and
// the engine continue the same trace — and the first token as an event.
// The GenAI semantic conventions name the model and the tokens.

// Attribute keys of the routing decision.
const (
	attrReason   = attribute.Key("skywalker.route.reason")
	attrRegion   = attribute.Key("skywalker.route.region")
	attrReplica  = attribute.Key("skywalker.route.replica")
	attrEstimate = attribute.Key("skywalker.route.estimate_ms")
	attrCached   = attribute.Key("skywalker.route.cached_tokens")
	attrAttempt  = attribute.Key("skywalker.attempt")
	attrHeld     = attribute.Key("skywalker.held_ms")
	attrIngress  = attribute.Key("skywalker.ingress_region")
)

// exchangeTrace is an exchange's spans.
type exchangeTrace struct {
	root       tracing.Span // the endpoint's server span
	admit      tracing.Span
	attempt    tracing.Span
	attemptCtx context.Context // the attempt span's context, injected into the attempt's headers
}

// operation is the GenAI operation name of an endpoint.
func operation(kind request.Kind) string {
	switch kind {
	case request.Chat, request.Responses, request.Messages:
		return "chat"
	case request.Completion:
		return "text_completion"
	}
	return kind.String()
}

// traced wraps an endpoint's handler in its server span.
func (s *Server) traced(h http.HandlerFunc) http.Handler { return s.opts.Tracer.Handler(h) }

// startTrace begins the admission span of a request that arrived at
// arrival, under the endpoint's server span in r's context.
func (s *Server) startTrace(r *http.Request) exchangeTrace {
	if s.opts.Tracer == nil {
		return exchangeTrace{} // off: not even a context lookup
	}
	root := tracing.FromContext(r.Context())
	if !root.On() {
		return exchangeTrace{}
	}
	_, admit := s.opts.Tracer.Start(r.Context(), "skywalker.admit", trace.SpanKindInternal)
	return exchangeTrace{root: root, admit: admit}
}

// admitted ends the admission span once the request is parsed and routed
// (or refused).
func (t *exchangeTrace) admitted(kind request.Kind, req *request.Request, waited time.Duration, err error) {
	if !t.root.On() {
		return
	}
	t.root.Set(semconv.GenAIOperationNameKey.String(operation(kind)), semconv.GenAIRequestModelKey.String(req.Model), semconv.GenAIUsageInputTokensKey.Int(req.PromptTokens),
		attrIngress.String(req.Region))
	if req.MaxTokens > 0 {
		t.root.Set(semconv.GenAIRequestMaxTokensKey.Int(req.MaxTokens))
	}
	t.admit.Set(attrHeld.Int64(waited.Milliseconds()))
	t.admit.Fail(err)
	t.admit.End()
}

// startAttempt begins o's client span, with the decision that chose it.
func (x *exchange) startAttempt(o routed) {
	t := &x.trace
	if !t.root.On() {
		return
	}
	name, target := "skywalker.dispatch", o.Replica
	if o.Peer != nil {
		name, target = "skywalker.forward", o.Peer.Region
	}
	t.attemptCtx, t.attempt = x.s.opts.Tracer.Start(x.ctx, name, trace.SpanKindClient,
		attrReason.String(string(o.Decision.Reason)), attrRegion.String(o.Decision.Region), attrReplica.String(target),
		attrEstimate.Int64(o.Decision.Estimate.Milliseconds()), attrCached.Int(x.req.CachedTokens(o.PrefixBlocks)),
		attrAttempt.Int(o.Number))
}

// inject passes the current attempt's trace context on in h.
func (x *exchange) inject(h http.Header) {
	if x.trace.attemptCtx != nil {
		x.s.opts.Tracer.Inject(x.trace.attemptCtx, h)
	}
}

// endAttemptSpan ends the current attempt's span, failed by err if any.
func (x *exchange) endAttemptSpan(err error) {
	t := &x.trace
	t.attempt.Fail(err)
	t.attempt.End()
	t.attempt, t.attemptCtx = tracing.Span{}, nil
}

// firstTokenEvent marks the first token on the request's spans.
func (x *exchange) firstTokenEvent() {
	x.trace.root.Event("first_token")
	x.trace.attempt.Event("first_token")
}

// endTrace records how the exchange ended on its server span (the
// handler's wrapper ends it).
func (x *exchange) endTrace() {
	t := &x.trace
	if !t.root.On() {
		return
	}
	t.root.Set(semconv.GenAIUsageOutputTokensKey.Int(x.counter.outputTokens()), semconv.HTTPResponseStatusCodeKey.Int(x.status))
	if x.counter.cachedSeen {
		t.root.Set(semconv.GenAIUsageCacheReadInputTokens(x.counter.cached))
	}
	if x.servedBy != "" {
		t.root.Set(attribute.String("skywalker.served_region", x.servedBy))
	}
	if x.rejected != nil {
		t.root.Fail(x.rejected)
	} else if x.broken != nil {
		t.root.Fail(x.broken)
	}
}
