package request

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"unicode/utf8"

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

// FuzzScannerAgreesWithEncodingJSON holds the scanner to RFC 8259: a value
// is accepted exactly when encoding/json accepts it and it is UTF-8
// (json.Valid checks the grammar only). It also proves that parsing as the
// body arrives, a byte at a time, decides the same.
func FuzzScannerAgreesWithEncodingJSON(f *testing.F) {
	for _, v := range []string{`1`, `-0.5e+3`, `"a\u00e9\ud83d"`, `{"a":[true,false,null]}`, "\"\x00\"", "\"caf\xe9\"",
		`[1,]`, `01`, `"\q"`, `{"a" 1}`, "\"\xed\xa0\x80\"", `tru`, `1.`, `[[[]]]`, " \t\n1 "} {
		f.Add([]byte(v))
	}
	f.Fuzz(func(t *testing.T, value []byte) {
		if bytes.Count(value, []byte("["))+bytes.Count(value, []byte("{")) > maxDepth-4 {
			return // nesting beyond maxDepth is refused on purpose; encoding/json allows 10,000
		}
		body := append(append([]byte(`{"messages":[{"role":"user","content":"hi"}],"x":`), value...), '}')
		_, err := Parse(Chat, body, Options{})
		malformed := err != nil && strings.Contains(err.Error(), "malformed JSON")
		if want := !(json.Valid(body) && utf8.Valid(body)); malformed != want {
			t.Fatalf("%q: scanner malformed=%v (%v); encoding/json and utf8 say malformed=%v", body, malformed, err, want)
		}
		_, _, streamErr := ParseFrom(Chat, iotest.OneByteReader(bytes.NewReader(body)), -1, nil, Options{})
		if fmt.Sprint(streamErr) != fmt.Sprint(err) {
			t.Fatalf("%q: in memory %v, a byte at a time %v", body, err, streamErr)
		}
	})
}

// FuzzRuneLen holds the scanner's UTF-8 check to unicode/utf8.
func FuzzRuneLen(f *testing.F) {
	f.Add([]byte("\xe2\x80\x94"))
	f.Add([]byte("\xf0\x9f\x98"))
	f.Fuzz(func(t *testing.T, d []byte) {
		if len(d) > 0 && d[0] >= 0x80 {
			checkRuneLen(t, d)
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

// FuzzAppendStringDecodesLikeEncodingJSON holds the rendering to an
// independent decoder: a string encoding/json writes (escapes and all) is
// decoded by the scanner to exactly what encoding/json reads back, and a
// byte at a time too.
func FuzzAppendStringDecodesLikeEncodingJSON(f *testing.F) {
	f.Add("plain text long enough to take the word loop")
	f.Add("tabs\tand\nnewlines \"quoted\" \\ é — § 😀 \u2028 \x01\x7f<>&")
	f.Add(strings.Repeat("Café \"x\"\n", 20))
	f.Fuzz(func(t *testing.T, s string) {
		lit, err := json.Marshal(s)
		if err != nil {
			return
		}
		var want string
		if err := json.Unmarshal(lit, &want); err != nil {
			t.Fatal(err)
		}
		for _, src := range []io.Reader{nil, iotest.OneByteReader(bytes.NewReader(lit))} {
			sc := scanner{data: lit, limit: len(lit)}
			if src != nil {
				sc = scanner{src: src, limit: len(lit)}
			}
			if err := sc.appendString(); err != nil {
				t.Fatalf("%s: %v", lit, err)
			}
			if string(sc.out) != want {
				t.Fatalf("%s decoded to %q, encoding/json reads %q", lit, sc.out, want)
			}
		}
	})
}

// FuzzParseResponses: no Responses body makes the parser panic; every
// failure is a client-visible *apierr.Error; what is read can be
// rewritten (model, previous_response_id) into a body that is still JSON.
func FuzzParseResponses(f *testing.F) {
	f.Add([]byte(`{"model":"m","input":"hi","previous_response_id":"resp_1","instructions":"be brief"}`))
	f.Add([]byte(`{"input":[{"role":"user","content":[{"type":"input_text","text":"a"}]},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"}],"tools":[{}]}`))
	f.Add([]byte(`{"input":[{"type":"function_call_output","call_id":"c","output":[{"type":"input_text","text":"x"}]}],"prompt_cache_key":"k"}`))
	f.Add([]byte(`{"messages":[{"role":"user","content":"x"}],"session_id":"s","prompt_cache_key":null}`))
	f.Add([]byte(`{"input":[{"role":"assistant","content":"x"}],"previous_response_id":"a","previous_response_id":"b","previous_response_id":null}`))
	f.Add([]byte(`{"input":"x","previous_response_id":"a","previous_response_id":"b"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := Parse(Responses, body, Options{BlockBytes: 8, MaxBodyBytes: 1 << 16})
		if err != nil {
			if _, ok := apierr.As(err); !ok {
				t.Fatalf("error %v is not an *apierr.Error", err)
			}
			return
		}
		if req.PromptTokens < 0 || req.CachedTokens(len(req.Blocks)) > req.PromptTokens {
			t.Fatalf("inconsistent request: %+v", req)
		}
		renamed := req.RewriteModel(body, "m2")
		fresh := req.WithoutPrevious(renamed)
		out := req.RewritePrevious(renamed, "resp_2")
		if !json.Valid(out) || !json.Valid(fresh) {
			t.Fatalf("rewriting %q gave %q and, without its previous response, %q", body, out, fresh)
		}
		again, err := Parse(Responses, fresh, Options{BlockBytes: 8, MaxBodyBytes: 1 << 16})
		if err != nil || again.PreviousResponse != "" || !slices.Equal(again.Blocks, req.Blocks) {
			t.Fatalf("%q without its previous response, %q, parses as previous %q, %d blocks (was %d), %v", body, fresh, again.PreviousResponse, len(again.Blocks), len(req.Blocks), err)
		}
	})
}
