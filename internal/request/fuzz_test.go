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

// FuzzClientHeaders proves no priority, wait or tenant header makes the
// request helpers panic, that every failure is a 400, and that what is
// accepted is one of the classes and a bounded tenant.
func FuzzClientHeaders(f *testing.F) {
	f.Add("critical", "true", "team-a", `{"metadata":{"priority":"sheddable"}}`)
	f.Add("urgent", "maybe", "", `{}`)
	f.Add(" Sheddable ", "0", "\x00\xff", `{"metadata":{"wait":"yes"}}`)
	f.Fuzz(func(t *testing.T, priority, wait, tenant, meta string) {
		body := `{"messages":[{"role":"user","content":"hi"}]` + "}"
		if len(meta) > 2 && meta[0] == '{' {
			body = `{"messages":[{"role":"user","content":"hi"}],` + meta[1:]
		}
		req, err := Parse(Chat, []byte(body), Options{})
		if err != nil {
			return
		}
		for _, e := range []error{req.ApplyPriorityHeader(priority), req.ApplyWaitHeader(wait), req.SetTenant("X-Tenant", tenant)} {
			if e == nil {
				continue
			}
			if ae, ok := apierr.As(e); !ok || ae.Status() != 400 {
				t.Fatalf("error %v is not a 400", e)
			}
		}
		if req.Class.Rank() < 0 || req.Class.Rank() > 2 || len(req.Tenant) > MaxTenantBytes {
			t.Fatalf("accepted class %v tenant of %d bytes", req.Class, len(req.Tenant))
		}
	})
}
