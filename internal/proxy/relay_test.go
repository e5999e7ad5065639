package proxy

import (
	"bufio"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestTheReplicaIsFreeOnceTheClientHasItsAnswer: the replica's slot frees
// when the engine is done — the body's end, or [DONE] in a stream — before
// the last bytes reach the client, so a client that sends its next turn
// the moment it has this answer finds the replica free. An engine that
// keeps a stream's connection open after [DONE] must not keep the slot.
func TestTheReplicaIsFreeOnceTheClientHasItsAnswer(t *testing.T) {
	whole, _ := countingBackend(t)
	lingering := stallingBackend(t, "data: {\"choices\":[{\"delta\":{\"content\":\"ok\"}}]}\n\ndata: [DONE]\n\n")
	tests := []struct {
		name   string
		engine string
		stream bool
		until  string // the client stops reading here and checks
	}{
		{"whole body with a Content-Length", whole.URL, false, `"completion_tokens":1}}`},
		{"stream held open after [DONE]", lingering.URL, true, "data: [DONE]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := startSolo(t, []string{tc.engine}, nil)
			body := fmt.Sprintf(`{"messages":[{"role":"user","content":"hi"}],"max_tokens":1,"stream":%v}`, tc.stream)
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
			if n := p.replica(0).InFlight; n != 0 {
				t.Errorf("the client has its whole answer, but the replica still counts %d in flight", n)
			}
		})
	}
}
