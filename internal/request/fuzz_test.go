package request

import (
	"os"
	"testing"

	"skywalker/internal/apierr"
)

// FuzzParse proves no body makes the parser panic, and that every failure
// is a client-visible *apierr.Error.
func FuzzParse(f *testing.F) {
	fixture, _ := os.ReadFile("testdata/chat_multipart.json")
	f.Add(fixture, false)
	f.Add([]byte(`{"messages":[{"role":"user","content":"hi"}]}`), false)
	f.Add([]byte(`{"prompt":[[1,2],[3]],"max_tokens":3}`), true)
	f.Add([]byte(`{"messages":[{"role":"user","content":"a\u00e9\ud83d"}]}`), false)
	f.Add([]byte(`{"x":[[[[{}]]]]}`), true)
	f.Fuzz(func(t *testing.T, body []byte, completion bool) {
		kind := Chat
		if completion {
			kind = Completion
		}
		req, err := Parse(kind, body, Options{BlockBytes: 8, MaxBodyBytes: 1 << 16})
		if err != nil {
			if _, ok := apierr.As(err); !ok {
				t.Fatalf("error %v is not an *apierr.Error", err)
			}
			return
		}
		if req.PromptTokens < 0 || req.BlockTokens != 2 || req.CachedTokens(len(req.Blocks)) > req.PromptTokens {
			t.Fatalf("inconsistent request: %+v", req)
		}
	})
}
