package request

import (
	"bytes"
	"encoding/json"
	"errors"
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
		// RFC 8259: no raw control characters in any string, and UTF-8 only.
		{"control byte in an unread key", Chat, "{\"messages\":[{\"role\":\"user\",\"\x00-as-raw-byte\":\"\"}]}", apierr.InvalidRequest, "", "at byte 29: control character 0x00"},
		{"control byte in content", Chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\x1fb\"}]}", apierr.InvalidRequest, "", "control character 0x1f"},
		{"invalid UTF-8 in content", Chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"caf\xe9\"}]}", apierr.InvalidRequest, "", "invalid UTF-8"},
		{"invalid UTF-8 in a skipped value", Chat, "{\"x\":\"\xff\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", apierr.InvalidRequest, "", "at byte 6: invalid UTF-8"},
		{"overlong UTF-8", Chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"\xc0\xaf\"}]}", apierr.InvalidRequest, "", "invalid UTF-8"},
		{"UTF-8 surrogate", Chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"\xed\xa0\x80\"}]}", apierr.InvalidRequest, "", "invalid UTF-8"},
		{"truncated UTF-8", Chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"\xe2\x80\"}]}", apierr.InvalidRequest, "", "invalid UTF-8"},
		{"invalid UTF-8 in role", Chat, "{\"messages\":[{\"role\":\"us\xffr\",\"content\":\"hi\"}]}", apierr.InvalidRequest, "", "invalid UTF-8"},
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

// chunkReader hands out a body n bytes per Read and counts what it gave.
type chunkReader struct {
	body []byte
	n    int
	read int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if r.read == len(r.body) {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), r.n)], r.body[r.read:])
	r.read += n
	return n, nil
}

// A body parsed as it arrives, in chunks of any size, declared or not,
// describes the same request as the whole body parsed in memory — also
// past the size at which the streamed rendering lets go of what it hashed
// (compactAt), where a front (instructions, tools, a system prompt) makes
// the parser render the body a second time.
func TestParseFromAgreesWithParseWhateverTheChunks(t *testing.T) {
	fixture, err := os.ReadFile("testdata/chat_multipart.json")
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("The quick brown fox jumps over the lazy dog. ", (3*compactAt)/45)
	cases := []struct {
		name string
		kind Kind
		body []byte
	}{
		{"fixture", Chat, fixture},
		{"long chat", Chat, chatBody(200 << 10)},
		{"escapes and runes at every offset", Chat, []byte(`{"messages":[{"role":"user","content":"` +
			strings.Repeat(`é\n\"😀\u00e9\ud83d\ude00—x`, 300) + `"}],"max_tokens":12,"x":[1.5e3,true,null]}`)},
		{"malformed late", Chat, []byte(`{"messages":[{"role":"user","content":"` + strings.Repeat("a", 5000) + `"}],"x":tru}`)},
		{"chat past compaction", Chat, chatBody(3 * compactAt)},
		{"chat past compaction, tools after its messages", Chat, []byte(`{"messages":[{"role":"user","content":"` + long +
			`"}],"tools":[{"type":"function","function":{"name":"lookup"}}]}`)},
		{"messages past compaction, system first", Messages, []byte(`{"model":"m","max_tokens":8,"system":"be brief","messages":[{"role":"user","content":"` + long + `"}]}`)},
		{"responses past compaction, instructions after its input", Responses, []byte(`{"model":"m","input":"` + long + `","instructions":"be brief"}`)},
		{"embeddings past compaction", Embeddings, []byte(`{"model":"m","input":"` + long + `"}`)},
	}
	for _, tc := range cases {
		want, wantErr := Parse(tc.kind, tc.body, Options{BlockBytes: 64})
		for _, chunk := range []int{1, 7, 4096, 1 << 20} {
			if chunk == 1 && len(tc.body) > 1<<20 {
				continue // a byte at a time through megabytes is slow under -race; 7 covers the same straddles
			}
			for _, declared := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%dB/declared=%v", tc.name, chunk, declared), func(t *testing.T) {
					size := int64(-1)
					if declared {
						size = int64(len(tc.body))
					}
					got, read, err := ParseFrom(tc.kind, &chunkReader{body: tc.body, n: chunk}, size, nil, Options{BlockBytes: 64})
					if fmt.Sprint(err) != fmt.Sprint(wantErr) {
						t.Fatalf("err = %v, Parse said %v", err, wantErr)
					}
					if err != nil {
						return
					}
					if !bytes.Equal(read, tc.body) {
						t.Errorf("returned body of %d bytes differs from the %d sent", len(read), len(tc.body))
					}
					if declared && cap(read) > len(tc.body)+64<<10 && len(tc.body) > 1<<20 {
						t.Errorf("a declared body of %d bytes was read into %d: want it sized to its declaration (to the allocator's page)", len(tc.body), cap(read))
					}
					if !slices.Equal(got.Blocks, want.Blocks) || got.PromptTokens != want.PromptTokens || got.MaxTokens != want.MaxTokens {
						t.Errorf("streamed parse: %d blocks, %d tokens, max %d; in memory: %d, %d, %d",
							len(got.Blocks), got.PromptTokens, got.MaxTokens, len(want.Blocks), want.PromptTokens, want.MaxTokens)
					}
				})
			}
		}
	}
}

// A body that turns invalid after 300 KB is refused at the offending byte,
// naming it, before the rest is read.
func TestParseFromStopsAtTheFirstBadByte(t *testing.T) {
	good := `{"messages":[{"role":"user","content":"` + strings.Repeat("a", 300<<10)
	body := []byte(good + "\x01" + strings.Repeat("b", 1<<20) + `"}]}`)
	r := &chunkReader{body: body, n: 16 << 10}
	_, _, err := ParseFrom(Chat, r, int64(len(body)), nil, Options{})
	e, ok := apierr.As(err)
	if !ok || e.Status() != 400 || !strings.Contains(e.Message, fmt.Sprintf("at byte %d: control character 0x01", len(good))) {
		t.Fatalf("err = %v, want a 400 naming byte %d", err, len(good))
	}
	if r.read > len(good)+64<<10 {
		t.Errorf("read %d of %d bytes; the parse should stop within a chunk of byte %d", r.read, len(body), len(good))
	}
}

func TestParseFromTurnsReadFailuresIntoClientErrors(t *testing.T) {
	body := `{"messages":[{"role":"user","content":"hi"}]}`
	tests := []struct {
		name   string
		r      io.Reader
		size   int64
		limit  int
		status int
		text   string
	}{
		{"read deadline", io.MultiReader(strings.NewReader(body[:20]), iotest.ErrReader(os.ErrDeadlineExceeded)), -1, 0, 408, "did not arrive in time"},
		{"client gone", io.MultiReader(strings.NewReader(body[:20]), iotest.ErrReader(io.ErrUnexpectedEOF)), -1, 0, 400, "reading the request body"},
		{"over the limit", strings.NewReader(body), -1, 30, 413, "exceeds"},
		{"declared over the limit", iotest.ErrReader(errors.New("must not be read")), 1 << 30, 1 << 20, 413, "exceeds"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := ParseFrom(Chat, tc.r, tc.size, nil, Options{MaxBodyBytes: tc.limit})
			e, ok := apierr.As(err)
			if !ok || e.Status() != tc.status || !strings.Contains(e.Message, tc.text) {
				t.Errorf("err = %v, want %d containing %q", err, tc.status, tc.text)
			}
		})
	}
}

func TestRuneLenAgreesWithUTF8(t *testing.T) {
	// Every lead byte with every second byte, and the continuations that
	// decide 3- and 4-byte forms.
	for lead := 0x80; lead <= 0xff; lead++ {
		for second := 0; second <= 0xff; second++ {
			for _, tail := range [][]byte{{0x80, 0x80}, {0xbf, 0xbf}, {0x41, 0x80}, {0x80, 0x41}, {}} {
				d := append([]byte{byte(lead), byte(second)}, tail...)
				checkRuneLen(t, d)
			}
		}
	}
}

func checkRuneLen(t *testing.T, d []byte) {
	t.Helper()
	r, n := utf8.DecodeRune(d)
	want := n
	if r == utf8.RuneError && n <= 1 {
		want = 0
	}
	if got := runeLen(d); got != want {
		t.Fatalf("runeLen(% x) = %d, utf8.DecodeRune says %d", d, got, want)
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
