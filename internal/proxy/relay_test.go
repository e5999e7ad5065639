package proxy

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"skywalker/internal/request"
)

// TestTheReplicaIsFreeOnceTheClientHasItsAnswer: the replica's slot frees
// when the engine is done — the body's end, or [DONE] in a stream — before
// the last bytes reach the client, so a client that sends its next turn
// the moment it has this answer finds the replica free. An engine that
// keeps a stream's connection open after [DONE] must not keep the slot.
func TestTheReplicaIsFreeOnceTheClientHasItsAnswer(t *testing.T) {
	tests := []struct {
		name   string
		stream bool
		until  string // the client stops reading here and checks
	}{
		{"whole body with a Content-Length", false, `"completion_tokens":1}}`},
		{"stream held open after [DONE]", true, "data: [DONE]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/v1/chat/completions" {
					http.NotFound(w, r)
					return
				}
				_, _ = io.Copy(io.Discard, r.Body)
				if !tc.stream {
					w.Header().Set("Content-Type", "application/json")
					_, _ = w.Write([]byte(`{"choices":[{"message":{"content":"ok"}}],"usage":{"prompt_tokens":1,"completion_tokens":1}}`))
					return
				}
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"ok\"}}]}\n\ndata: [DONE]\n\n")
				w.(http.Flusher).Flush()
				select { // a slow close: the stream's end comes later
				case <-release:
				case <-r.Context().Done():
				}
			}))
			t.Cleanup(engine.Close)
			t.Cleanup(func() { close(release) })
			p := startSolo(t, []string{engine.URL}, nil)

			body := `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":1}`
			if tc.stream {
				body = `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":1,"stream":true}`
			}
			resp, err := http.Post("http://"+p.addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var got strings.Builder
			rd := bufio.NewReader(resp.Body)
			deadline := time.Now().Add(30 * time.Second)
			for !strings.Contains(got.String(), tc.until) {
				if time.Now().After(deadline) {
					t.Fatalf("no %q from the proxy within 30 s; read %q", tc.until, got.String())
				}
				b, err := rd.ReadByte()
				if err != nil {
					t.Fatalf("the answer ended before %q: %v; read %q", tc.until, err, got.String())
				}
				got.WriteByte(b)
			}
			if n := p.srv.router.View(&request.Request{}).Local.Replicas[0].InFlight; n != 0 {
				t.Errorf("the client has its whole answer, but the replica still counts %d in flight", n)
			}
		})
	}
}
