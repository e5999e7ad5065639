package overhead

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// Upstream is an OpenAI-compatible server that answers at once: a small
// chat completion, or — for a body asking for a stream — three SSE
// chunks and [DONE]. It answers /health and /v1/models as an engine does,
// so a SkyWalker proxy takes it in.
type Upstream struct {
	URL string
	srv *http.Server
}

var (
	streamFlag = []byte(`"stream":true`)
	completion = []byte(`{"id":"chatcmpl-1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	chunks     = []string{`{"choices":[{"index":0,"delta":{"role":"assistant","content":"a"}}]}`, `{"choices":[{"index":0,"delta":{"content":"b"}}]}`, "[DONE]"}
)

// StartUpstream serves on a free loopback port until Close.
func StartUpstream() (*Upstream, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"m","object":"model","owned_by":"bench","root":"m","parent":null}]}`)
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if bytes.Contains(body, streamFlag) {
			w.Header().Set("Content-Type", "text/event-stream")
			for _, c := range chunks {
				_, _ = fmt.Fprintf(w, "data: %s\n\n", c)
				w.(http.Flusher).Flush()
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(completion)
	})
	u := &Upstream{URL: "http://" + l.Addr().String(), srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	go func() { _ = u.srv.Serve(l) }()
	return u, nil
}

// Close stops the server.
func (u *Upstream) Close() { _ = u.srv.Close() }
