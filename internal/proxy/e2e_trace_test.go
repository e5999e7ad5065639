package proxy_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"skywalker/internal/node/nodetest"
	"skywalker/internal/proxy"
	"skywalker/internal/testwait"
	"skywalker/internal/tracing"
)

// receivedSpan is one span an OTLP receiver decoded.
type receivedSpan struct {
	traceID, instance, name string
	attrs                   map[string]string
}

// otlpReceiver is an OTLP/HTTP trace receiver: it decodes the protobuf
// export requests it is sent.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []receivedSpan
	bad   error
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var req coltrace.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &req)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if err != nil || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		o.bad = fmt.Errorf("%s %s (%s): %v", r.Method, r.URL.Path, r.Header.Get("Content-Type"), err)
		w.WriteHeader(400)
		return
	}
	for _, rs := range req.ResourceSpans {
		instance := ""
		for _, kv := range rs.Resource.GetAttributes() {
			if kv.Key == "service.instance.id" {
				instance = kv.Value.GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				attrs := map[string]string{}
				for _, kv := range sp.Attributes {
					v := kv.Value.GetStringValue()
					if v == "" {
						v = fmt.Sprint(kv.Value.GetIntValue())
					}
					attrs[kv.Key] = v
				}
				o.spans = append(o.spans, receivedSpan{traceID: fmt.Sprintf("%x", sp.TraceId), instance: instance, name: sp.Name, attrs: attrs})
			}
		}
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
}

func (o *otlpReceiver) trace(id string) []receivedSpan {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []receivedSpan
	for _, s := range o.spans {
		if s.traceID == id {
			out = append(out, s)
		}
	}
	return out
}

// TestOneTraceAcrossRegions: a request that carries the client's
// traceparent, sent to ap-east and forwarded to eu-west (its residency),
// is one trace: ap-east's server span and forward span (with the routing
// decision), eu-west's server and dispatch spans, and the engine's span,
// all exported over OTLP/HTTP. A parent that is not sampled gets no spans.
func TestOneTraceAcrossRegions(t *testing.T) {
	recv := &otlpReceiver{}
	collector := httptest.NewServer(recv)
	t.Cleanup(collector.Close)
	env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": collector.URL}
	var tracers []*tracing.Tracer
	var mu sync.Mutex
	c := nodetest.Start(t, nodetest.Options{Engine: nodetest.EngineConfig(20), EnginesPerRegion: 1,
		Proxy: func(cfg *proxy.Config) { cfg.Profile = "llama3-8b-a100" },
		Tracer: func(instance string) *tracing.Tracer {
			tr, err := tracing.New(context.Background(), "skywalker", instance, func(k string) string { return env[k] })
			if err != nil || tr == nil {
				t.Errorf("tracer for %s: %v %v", instance, tr, err)
			}
			mu.Lock()
			tracers = append(tracers, tr)
			mu.Unlock()
			return tr
		}})
	flush := func() {
		for _, tr := range tracers {
			if err := tr.Flush(context.Background()); err != nil {
				t.Errorf("flush: %v", err)
			}
		}
	}
	const sampled, unsampled = "4bf92f3577b34da6a3ce929d0e0e4736", "0af7651916cd43dd8448eb211c80319c"
	for _, tc := range []struct{ id, flags string }{{sampled, "01"}, {unsampled, "00"}} {
		r := call(t, c.Region("ap-east").URL, `{"model":"m","messages":[{"role":"user","content":"trace me"}],"max_tokens":4,"stream":true}`,
			map[string]string{"traceparent": "00-" + tc.id + "-00f067aa0ba902b7-" + tc.flags, "X-Data-Residency": "eu"})
		if r.status != 200 || r.region != "eu-west" {
			t.Fatalf("status %d served by %q", r.status, r.region)
		}
	}
	type want struct{ instance, name string }
	wants := []want{{"ap-east-proxy", "POST /v1/chat/completions"}, {"ap-east-proxy", "skywalker.admit"}, {"ap-east-proxy", "skywalker.forward"},
		{"eu-west-proxy", "POST /v1/chat/completions"}, {"eu-west-proxy", "skywalker.dispatch"}, {"eu-west-engine-0", "POST /v1/chat/completions"}}
	testwait.Eventually(t, 30*time.Second, "the forwarded request's spans from both proxies and the engine reach the collector", func() (bool, string) {
		flush()
		got := recv.trace(sampled)
		var missing []string
		for _, w := range wants {
			if !slices.ContainsFunc(got, func(s receivedSpan) bool { return s.instance == w.instance && s.name == w.name }) {
				missing = append(missing, w.instance+" "+w.name)
			}
		}
		return len(missing) == 0, "missing " + strings.Join(missing, ", ")
	})
	for _, s := range recv.trace(sampled) {
		switch {
		case s.name == "skywalker.forward":
			if s.attrs["skywalker.route.region"] != "eu-west" || s.attrs["skywalker.route.reason"] == "" || s.attrs["skywalker.route.replica"] != "eu-west" {
				t.Errorf("the forward span lacks the decision: %v", s.attrs)
			}
		case s.name == "skywalker.dispatch":
			if !strings.HasPrefix(s.attrs["skywalker.route.replica"], "127.0.0.1:") || s.attrs["skywalker.route.estimate_ms"] == "" {
				t.Errorf("the dispatch span lacks the decision: %v", s.attrs)
			}
		case s.name == "POST /v1/chat/completions" && s.instance == "ap-east-proxy":
			if s.attrs["gen_ai.operation.name"] != "chat" || s.attrs["gen_ai.request.model"] != "m" || s.attrs["gen_ai.usage.output_tokens"] != "4" ||
				s.attrs["skywalker.served_region"] != "eu-west" {
				t.Errorf("the ingress server span: %v", s.attrs)
			}
		}
	}
	flush()
	if got := recv.trace(unsampled); len(got) > 0 {
		t.Errorf("a request whose parent is not sampled left %d spans: %v", len(got), got)
	}
	recv.mu.Lock()
	defer recv.mu.Unlock()
	if recv.bad != nil {
		t.Errorf("an export the receiver could not read: %v", recv.bad)
	}
}
