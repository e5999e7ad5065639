// Package tracing is SkyWalker's OpenTelemetry tracing: spans for a
// request's admission, routing decision, forwards and first token, with
// W3C trace context carried from the client through a peer region's proxy
// to the engine. It is off unless the standard OTEL_* variables name an
// OTLP endpoint; then spans go over OTLP/HTTP (protobuf) to it, sampled
// as OTEL_TRACES_SAMPLER says (default: parentbased_always_on, so a
// caller's sampled flag is honoured).
//
// A nil *Tracer is tracing off: every method is a no-op that costs a nil
// check, so the hot path pays nothing when no one collects traces.
package tracing

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// Tracer makes one process's spans and carries trace context in and out
// of HTTP headers. Nil is off.
type Tracer struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
	prop     propagation.TextMapPropagator
}

// Enabled reports whether getenv asks for traces: an OTLP endpoint is
// set (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT),
// OTEL_TRACES_EXPORTER is unset or "otlp", and OTEL_SDK_DISABLED is not
// "true".
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	if e := getenv("OTEL_TRACES_EXPORTER"); e != "" && e != "otlp" {
		return false
	}
	return getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
}

// New returns the tracer getenv configures (nil, nil when tracing is
// off; see Enabled). service is the default service.name
// (OTEL_SERVICE_NAME overrides it); instance names this process among
// its service's (service.instance.id: a region's proxy, an engine).
// Exporter settings (endpoint, headers, timeout, compression) are the
// exporter's own OTEL_EXPORTER_OTLP_* variables; the sampler is
// OTEL_TRACES_SAMPLER's.
func New(ctx context.Context, service, instance string, getenv func(string) string) (*Tracer, error) {
	if !Enabled(getenv) {
		return nil, nil
	}
	var opts []otlptracehttp.Option
	// The exporter reads the process's environment; getenv may be a
	// test's, so the endpoint it names is passed on explicitly.
	if u := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); u != "" {
		opts = append(opts, otlptracehttp.WithEndpointURL(u))
	} else if u := getenv("OTEL_EXPORTER_OTLP_ENDPOINT"); u != "" {
		opts = append(opts, otlptracehttp.WithEndpointURL(strings.TrimSuffix(u, "/")+"/v1/traces"))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	if s := getenv("OTEL_SERVICE_NAME"); s != "" {
		service = s
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		semconv.ServiceName(service), semconv.ServiceInstanceID(instance)))
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Tracer{provider: tp, tracer: tp.Tracer("skywalker"),
		prop: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})}, nil
}

// Shutdown flushes the spans not yet exported and stops the exporter.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// Flush exports every span ended so far.
func (t *Tracer) Flush(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.ForceFlush(ctx)
}

// Extract returns ctx carrying the trace context of h (traceparent,
// tracestate, baggage), if any.
func (t *Tracer) Extract(ctx context.Context, h http.Header) context.Context {
	if t == nil {
		return ctx
	}
	return t.prop.Extract(ctx, propagation.HeaderCarrier(h))
}

// Inject writes ctx's trace context into h, for the next hop.
func (t *Tracer) Inject(ctx context.Context, h http.Header) {
	if t == nil {
		return
	}
	t.prop.Inject(ctx, propagation.HeaderCarrier(h))
}

// Span is one span, or nothing when tracing is off (the zero Span).
type Span struct{ span trace.Span }

// Start begins a span named name under ctx's, of kind (server for a
// request taken, client for one sent, internal otherwise).
func (t *Tracer) Start(ctx context.Context, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, Span) {
	if t == nil {
		return ctx, Span{}
	}
	ctx, s := t.tracer.Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
	return ctx, Span{s}
}

// Set adds attributes to the span.
func (s Span) Set(attrs ...attribute.KeyValue) {
	if s.span != nil {
		s.span.SetAttributes(attrs...)
	}
}

// Event records a named moment on the span (the first token).
func (s Span) Event(name string, attrs ...attribute.KeyValue) {
	if s.span != nil {
		s.span.AddEvent(name, trace.WithAttributes(attrs...))
	}
}

// Fail marks the span failed with err.
func (s Span) Fail(err error) {
	if s.span != nil && err != nil {
		s.span.RecordError(err)
		s.span.SetStatus(codes.Error, err.Error())
	}
}

// End ends the span.
func (s Span) End() {
	if s.span != nil {
		s.span.End()
	}
}

// On reports whether the span records (tracing is on and it is sampled):
// attributes that cost something to compute are computed only then.
func (s Span) On() bool { return s.span != nil && s.span.IsRecording() }

// FromContext is the span ctx carries (the zero Span when none records).
func FromContext(ctx context.Context) Span {
	if s := trace.SpanFromContext(ctx); s.IsRecording() {
		return Span{s}
	}
	return Span{}
}

// Handler wraps next in a server span per request, named by its method
// and path, under the trace context the request carries; handlers add
// their attributes to it (FromContext). A nil Tracer returns next as it is.
func (t *Tracer) Handler(next http.Handler) http.Handler {
	if t == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := t.Extract(r.Context(), r.Header)
		ctx, span := t.Start(ctx, r.Method+" "+r.URL.Path, trace.SpanKindServer,
			semconv.HTTPRequestMethodKey.String(r.Method), semconv.URLPath(r.URL.Path))
		defer span.End()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}
