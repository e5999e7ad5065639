package request

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"skywalker/internal/apierr"
)

func mustParse(t *testing.T, kind Kind, body string) *Request {
	t.Helper()
	req, err := Parse(kind, []byte(body), Options{})
	if err != nil {
		t.Fatalf("Parse(%s): %v", body, err)
	}
	return req
}

func TestParseChatFixtureReadsEveryField(t *testing.T) {
	body, err := os.ReadFile("testdata/chat_multipart.json")
	if err != nil {
		t.Fatal(err)
	}
	req, err := Parse(Chat, body, Options{BlockBytes: 16})
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"model", req.Model, "llama3-8b"},
		{"max tokens", req.MaxTokens, 64},
		{"stream", req.Stream, true},
		{"include usage", req.IncludeUsage, true},
		{"session", req.Session, "alice"},
		{"residency lower-cased", req.Residency, "eu"},
		{"priority", req.Priority, -1},
		{"block tokens", req.BlockTokens, 4},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	// Every message contributes: the tool result (the last message) is part
	// of the rendering, so the token estimate covers it.
	if req.PromptTokens < 50 {
		t.Errorf("PromptTokens = %d, want the whole conversation counted", req.PromptTokens)
	}
	if len(req.Blocks) == 0 {
		t.Fatal("no blocks hashed")
	}
}

func TestParseChatRendersTheWholeConversation(t *testing.T) {
	base := `{"messages":[{"role":"system","content":"%s"},{"role":"user","content":"%s"}]}`
	long := strings.Repeat("x", 2048)
	a := mustParse(t, Chat, fmt.Sprintf(base, long, "first question"))
	b := mustParse(t, Chat, fmt.Sprintf(base, long, "a different question"))
	c := mustParse(t, Chat, fmt.Sprintf(base, strings.Repeat("y", 2048), "first question"))
	if a.Blocks[0] != b.Blocks[0] {
		t.Error("same system prompt should give the same first block")
	}
	if a.Blocks[0] == c.Blocks[0] {
		t.Error("different system prompts should give different first blocks")
	}
	if a.PromptTokens == b.PromptTokens {
		t.Error("the last message must count toward the prompt")
	}
}

func TestParseChatMultiTurnKeepsEveryEarlierBlock(t *testing.T) {
	turn1 := `{"messages":[{"role":"system","content":"` + strings.Repeat("rules ", 300) + `"},{"role":"user","content":"` + strings.Repeat("q1 ", 200) + `"}]}`
	turn2 := `{"messages":[{"role":"system","content":"` + strings.Repeat("rules ", 300) + `"},{"role":"user","content":"` + strings.Repeat("q1 ", 200) + `"},` +
		`{"role":"assistant","content":"` + strings.Repeat("a1 ", 200) + `"},{"role":"user","content":"q2"}]}`
	r1 := mustParse(t, Chat, turn1)
	r2 := mustParse(t, Chat, turn2)
	if len(r2.Blocks) <= len(r1.Blocks) {
		t.Fatalf("turn 2 has %d blocks, turn 1 %d: want more", len(r2.Blocks), len(r1.Blocks))
	}
	for i, h := range r1.Blocks {
		if r2.Blocks[i] != h {
			t.Fatalf("block %d differs between turns; the conversation prefix must be reusable", i)
		}
	}
}

func TestParseChatIgnoresKeyOrderAndWhitespace(t *testing.T) {
	a := mustParse(t, Chat, `{"model":"m","messages":[{"role":"user","name":"bob","content":"`+strings.Repeat("hello ", 200)+`"}]}`)
	b := mustParse(t, Chat, "{ \"messages\" : [ { \"content\" : \""+strings.Repeat("hello ", 200)+"\", \"name\":\"bob\", \"role\" : \"user\" } ] ,\n \"model\":\"m\" }")
	if fmt.Sprint(a.Blocks) != fmt.Sprint(b.Blocks) || a.PromptTokens != b.PromptTokens {
		t.Errorf("key order changed the rendering: %v/%d vs %v/%d", a.Blocks, a.PromptTokens, b.Blocks, b.PromptTokens)
	}
}

func TestParseChatDecodesEscapesLikeEncodingJSON(t *testing.T) {
	text := "line\none\t\"quoted\" \\ slash/ é 😀 \u2028"
	enc, _ := json.Marshal(strings.Repeat(text, 40))
	ascii := strings.NewReplacer("é", `\u00e9`, "😀", `\ud83d\ude00`).Replace(string(enc))
	a := mustParse(t, Chat, `{"messages":[{"role":"user","content":`+string(enc)+`}]}`)
	b := mustParse(t, Chat, `{"messages":[{"role":"user","content":`+ascii+`}]}`)
	if fmt.Sprint(a.Blocks) != fmt.Sprint(b.Blocks) {
		t.Error("escaped and literal forms of the same text must hash the same")
	}
}

func TestParseCompletionPromptForms(t *testing.T) {
	tests := []struct {
		name       string
		body       string
		wantTokens int
		wantMax    int
	}{
		{"string", `{"model":"m","prompt":"12345678","max_tokens":5}`, 2, 5},
		{"array of strings", `{"prompt":["1234","5678"]}`, 3, 0},
		{"token ids count one each", `{"prompt":[1,2,3,40000,5]}`, 5, 0},
		{"batched token ids", `{"prompt":[[1,2],[3]]}`, 3, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := mustParse(t, Completion, tc.body)
			if req.PromptTokens != tc.wantTokens {
				t.Errorf("PromptTokens = %d, want %d", req.PromptTokens, tc.wantTokens)
			}
			if req.MaxTokens != tc.wantMax {
				t.Errorf("MaxTokens = %d, want %d", req.MaxTokens, tc.wantMax)
			}
		})
	}
}

func TestParseRejectsBadBodies(t *testing.T) {
	tests := []struct {
		name      string
		kind      Kind
		body      string
		wantCode  apierr.Code
		wantParam string
		wantText  string
	}{
		{"empty body", Chat, "", apierr.InvalidRequest, "", "empty"},
		{"not JSON", Chat, "hello", apierr.InvalidRequest, "", "JSON object"},
		{"array at top", Chat, `[1]`, apierr.InvalidRequest, "", "JSON object"},
		{"truncated", Chat, `{"messages":[{"role":"user","content":"hi`, apierr.InvalidRequest, "", "unterminated"},
		{"trailing garbage", Chat, `{"messages":[{"role":"user","content":"hi"}]} x`, apierr.InvalidRequest, "", "after the JSON"},
		{"missing messages", Chat, `{"model":"m"}`, apierr.InvalidRequest, "messages", "required"},
		{"empty messages", Chat, `{"messages":[]}`, apierr.InvalidRequest, "messages", "empty"},
		{"messages not array", Chat, `{"messages":"hi"}`, apierr.InvalidRequest, "messages", "array"},
		{"message not object", Chat, `{"messages":[1]}`, apierr.InvalidRequest, "messages[0]", "object"},
		{"missing role", Chat, `{"messages":[{"content":"hi"}]}`, apierr.InvalidRequest, "messages[0].role", "required"},
		{"unknown role", Chat, `{"messages":[{"role":"wizard","content":"hi"}]}`, apierr.InvalidRequest, "messages[0].role", "unknown role"},
		{"content wrong type", Chat, `{"messages":[{"role":"user","content":5}]}`, apierr.InvalidRequest, "messages[0].content", "found number"},
		{"part without type", Chat, `{"messages":[{"role":"user","content":[{"text":"hi"}]}]}`, apierr.InvalidRequest, "messages[0].content[0].type", "required"},
		{"part text wrong type", Chat, `{"messages":[{"role":"user","content":[{"type":"text","text":1}]}]}`, apierr.InvalidRequest, "messages[0].content[0].text", "string"},
		{"model wrong type", Chat, `{"model":1,"messages":[{"role":"user","content":"hi"}]}`, apierr.InvalidRequest, "model", "string"},
		{"max_tokens string", Chat, `{"max_tokens":"5","messages":[{"role":"user","content":"hi"}]}`, apierr.InvalidRequest, "max_tokens", "integer"},
		{"max_tokens zero", Chat, `{"max_tokens":0,"messages":[{"role":"user","content":"hi"}]}`, apierr.InvalidRequest, "max_tokens", "positive"},
		{"max_tokens fraction", Chat, `{"max_completion_tokens":1.5,"messages":[{"role":"user","content":"hi"}]}`, apierr.InvalidRequest, "max_completion_tokens", "positive integer"},
		{"stream not bool", Chat, `{"stream":"yes","messages":[{"role":"user","content":"hi"}]}`, apierr.InvalidRequest, "stream", "boolean"},
		{"bad escape", Chat, `{"messages":[{"role":"user","content":"a\qb"}]}`, apierr.InvalidRequest, "", "invalid escape"},
		{"bad number", Chat, `{"temperature":01,"messages":[{"role":"user","content":"hi"}]}`, apierr.InvalidRequest, "", "want ','"},
		{"too deep", Chat, `{"x":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `,"messages":[{"role":"user","content":"hi"}]}`, apierr.InvalidRequest, "", "nesting"},
		{"residency wrong type", Chat, `{"metadata":{"data_residency":1},"messages":[{"role":"user","content":"hi"}]}`, apierr.InvalidRequest, "metadata.data_residency", "string"},
		{"missing prompt", Completion, `{"model":"m"}`, apierr.InvalidRequest, "prompt", "required"},
		{"empty prompt array", Completion, `{"prompt":[]}`, apierr.InvalidRequest, "prompt", "empty"},
		{"negative token id", Completion, `{"prompt":[1,-2]}`, apierr.InvalidRequest, "prompt", "non-negative"},
		{"prompt object", Completion, `{"prompt":{}}`, apierr.InvalidRequest, "prompt", "string or an array"},
		{"too large", Chat, `{"messages":[{"role":"user","content":"` + strings.Repeat("a", 200) + `"}]}`, apierr.BodyTooLarge, "", "exceeds"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := Options{}
			if tc.wantCode == apierr.BodyTooLarge {
				opts.MaxBodyBytes = 150
			}
			_, err := Parse(tc.kind, []byte(tc.body), opts)
			e, ok := apierr.As(err)
			if !ok {
				t.Fatalf("err = %v, want an *apierr.Error", err)
			}
			if e.Code != tc.wantCode || e.Param != tc.wantParam || !strings.Contains(e.Message, tc.wantText) {
				t.Errorf("got code=%s param=%q msg=%q; want code=%s param=%q msg containing %q",
					e.Code, e.Param, e.Message, tc.wantCode, tc.wantParam, tc.wantText)
			}
		})
	}
}

func TestParseAgreesWithEncodingJSONOnValidity(t *testing.T) {
	bodies := []string{
		`{"messages":[{"role":"user","content":"hi"}],"x":[1,2.5e3,-0.1,true,false,null,{"a":"b"}]}`,
		`{"messages":[{"role":"user","content":"hi"}],"x":[1,]}`,
		`{"messages":[{"role":"user","content":"hi"}],"x":{"a" "b"}}`,
		`{"messages":[{"role":"user","content":"hi"}],"x":-}`,
		`{"messages":[{"role":"user","content":"hi"}],"x":1.}`,
		`{"messages":[{"role":"user","content":"hi"}],"x":tru}`,
		`{"messages":[{"role":"user","content":"hi"}],"x":"\u12"}`,
		`{"messages":[{"role":"user","content":"hi"}],}`,
	}
	for _, b := range bodies {
		_, err := Parse(Chat, []byte(b), Options{})
		if want := json.Valid([]byte(b)); (err == nil) != want {
			t.Errorf("Parse(%s) err = %v; encoding/json says valid=%v", b, err, want)
		}
	}
}

func TestReadBodyEnforcesTheLimit(t *testing.T) {
	if _, err := ReadBody(strings.NewReader("12345"), 5); err != nil {
		t.Errorf("body at the limit: %v", err)
	}
	_, err := ReadBody(strings.NewReader("123456"), 5)
	if e, ok := apierr.As(err); !ok || e.Status() != 413 {
		t.Errorf("body over the limit: err = %v, want 413", err)
	}
}

func TestApplyResidencyHeader(t *testing.T) {
	tests := []struct {
		body, header, want string
		wantErr            bool
	}{
		{"", "EU", "eu", false},
		{"eu", "eu", "eu", false},
		{"eu", "", "eu", false},
		{"eu", "us", "", true},
	}
	for _, tc := range tests {
		r := &Request{Residency: tc.body}
		err := r.ApplyResidencyHeader(tc.header)
		if (err != nil) != tc.wantErr || (!tc.wantErr && r.Residency != tc.want) {
			t.Errorf("body %q header %q: residency %q err %v", tc.body, tc.header, r.Residency, err)
		}
	}
}

func TestAllowedIn(t *testing.T) {
	if !(&Request{}).AllowedIn("us") {
		t.Error("a request without residency may go anywhere")
	}
	r := &Request{Residency: "eu"}
	if !r.AllowedIn("EU") || r.AllowedIn("us") || r.AllowedIn("") {
		t.Error("an eu request may only be served in eu")
	}
}

func TestFromTraceSharesBlocksExactlyAsFarAsIDsAgree(t *testing.T) {
	a := FromTrace(TraceRecord{InputTokens: 2000, OutputTokens: 10, BlockIDs: []uint64{0, 1, 2, 3}, BlockTokens: 512}, DefaultSeed)
	b := FromTrace(TraceRecord{InputTokens: 2000, OutputTokens: 10, BlockIDs: []uint64{0, 1, 9, 3}, BlockTokens: 512}, DefaultSeed)
	if a.Blocks[0] != b.Blocks[0] || a.Blocks[1] != b.Blocks[1] {
		t.Error("equal leading ids must give equal block hashes")
	}
	if a.Blocks[2] == b.Blocks[2] || a.Blocks[3] == b.Blocks[3] {
		t.Error("after the first differing id, the chain must differ, even where later ids agree")
	}
	if a.CachedTokens(4) != 2000 || a.CachedTokens(1) != 512 {
		t.Errorf("CachedTokens: %d, %d", a.CachedTokens(4), a.CachedTokens(1))
	}
}

func TestHashBlocksHashesOnlyCompleteBlocks(t *testing.T) {
	if got := HashBlocks(nil, make([]byte, 1023), 512, 1); len(got) != 1 {
		t.Errorf("1023 bytes in 512-byte blocks: %d hashes, want 1", len(got))
	}
}
