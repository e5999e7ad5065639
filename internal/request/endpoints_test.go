package request

import (
	"fmt"
	"strings"
	"testing"

	"skywalker/internal/apierr"
)

func TestParseEndpointBodies(t *testing.T) {
	tests := []struct {
		name   string
		kind   Kind
		body   string
		tokens int // prompt tokens at 4 bytes each; -1: do not check
		blocks bool
	}{
		{"messages", Messages, `{"model":"m","max_tokens":16,"system":"be brief","messages":[{"role":"user","content":"hello there"}]}`, -1, true},
		{"messages blocks", Messages, `{"model":"m","max_tokens":16,"system":[{"type":"text","text":"be brief"}],"messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image","source":{"type":"url","url":"http://x/y.png"}}]},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"get","input":{"q":1}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"42"}]}]}]}`, -1, true},
		{"count tokens", CountTokens, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, -1, false},
		{"embeddings string", Embeddings, `{"model":"e","input":"twelve bytes"}`, 3, false},
		{"embeddings strings", Embeddings, `{"model":"e","input":["abcd","efgh"],"encoding_format":"base64","dimensions":8}`, -1, false},
		{"embeddings tokens", Embeddings, `{"model":"e","input":[[1,2,3],[4]]}`, 4, false},
		{"rerank", Rerank, `{"model":"r","query":"q","documents":["a","b",{"text":"c"}],"top_n":2}`, -1, false},
		{"score", Score, `{"model":"r","text_1":"q","text_2":["a","b"]}`, -1, false},
		{"score queries", Score, `{"model":"r","queries":"q","documents":"a"}`, -1, false},
		{"tokenize prompt", Tokenize, `{"model":"m","prompt":"hello"}`, -1, false},
		{"tokenize messages", Tokenize, `{"model":"m","messages":[{"role":"user","content":"hello"}]}`, -1, false},
		{"detokenize", Detokenize, `{"model":"m","tokens":[1,2,3]}`, 3, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, err := Parse(tc.kind, []byte(tc.body), Options{})
			if err != nil {
				t.Fatal(err)
			}
			if tc.tokens >= 0 && req.PromptTokens != tc.tokens {
				t.Errorf("prompt tokens %d, want %d", req.PromptTokens, tc.tokens)
			}
			if (len(req.Blocks) > 0) != tc.blocks && !(tc.blocks && req.PromptTokens < DefaultBlockBytes/BytesPerToken) {
				t.Errorf("blocks %v", req.Blocks)
			}
			if !tc.kind.Generates() && (req.MaxTokens != 1 || req.Blocks != nil) {
				t.Errorf("a %s request counts one output token and no blocks; got max_tokens %d, blocks %v", tc.kind, req.MaxTokens, req.Blocks)
			}
		})
	}
}

func TestParseEndpointBodiesRefused(t *testing.T) {
	tests := []struct {
		kind  Kind
		body  string
		param string
	}{
		{Messages, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, "max_tokens"},
		{Messages, `{"model":"m","max_tokens":1}`, "messages"},
		{Messages, `{"model":"m","max_tokens":1,"messages":[{"role":"system","content":"hi"}]}`, "messages[0].role"},
		{Messages, `{"model":"m","max_tokens":1,"system":7,"messages":[{"role":"user","content":"hi"}]}`, "system"},
		{Messages, `{"model":"m","max_tokens":1,"system":[{"text":3}],"messages":[{"role":"user","content":"hi"}]}`, "system[0].text"},
		{Messages, `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_result","content":5}]}]}`, "messages[0].content[0].content"},
		{Embeddings, `{"model":"e"}`, "input"},
		{Embeddings, `{"model":"e","input":[]}`, "input"},
		{Embeddings, `{"model":"e","input":{"a":1}}`, "input"},
		{Embeddings, `{"model":"e","input":"x","encoding_format":"int8"}`, "encoding_format"},
		{Embeddings, `{"model":"e","input":"x","dimensions":0}`, "dimensions"},
		{Rerank, `{"model":"r","documents":["a"]}`, "query"},
		{Rerank, `{"model":"r","query":"q"}`, "documents"},
		{Rerank, `{"model":"r","query":"q","documents":[]}`, "documents"},
		{Rerank, `{"model":"r","query":"q","documents":[3]}`, "documents[0]"},
		{Score, `{"model":"r","text_1":"q"}`, "text_2"},
		{Tokenize, `{"model":"m"}`, "prompt"},
		{Detokenize, `{"model":"m","tokens":"abc"}`, "tokens"},
		{Detokenize, `{"model":"m","tokens":[-1]}`, "tokens"},
	}
	for _, tc := range tests {
		_, err := Parse(tc.kind, []byte(tc.body), Options{})
		e, ok := apierr.As(err)
		if !ok || e.Code != apierr.InvalidRequest || e.Param != tc.param {
			t.Errorf("%s %s: got %v, want a 400 about %s", tc.kind, tc.body, err, tc.param)
		}
	}
}

// A conversation sent as Messages keeps its earlier blocks as it grows,
// wherever its system prompt sits in the JSON, as chat's does.
func TestMessagesKeepBlocksAsTheConversationGrows(t *testing.T) {
	long := strings.Repeat("the quick brown fox ", 80)
	turn1 := `{"max_tokens":8,"messages":[{"role":"user","content":"` + long + `"}],"system":"sys"}`
	turn2 := `{"system":"sys","max_tokens":8,"messages":[{"role":"user","content":"` + long + `"},{"role":"assistant","content":[{"type":"text","text":"ok"}]},{"role":"user","content":"` + long + `"}]}`
	a, err := Parse(Messages, []byte(turn1), Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse(Messages, []byte(turn2), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Blocks) < 2 || len(b.Blocks) <= len(a.Blocks) {
		t.Fatalf("blocks %d then %d", len(a.Blocks), len(b.Blocks))
	}
	for i := range a.Blocks {
		if a.Blocks[i] != b.Blocks[i] {
			t.Fatalf("block %d changed as the conversation grew", i)
		}
	}
	chat, err := Parse(Chat, []byte(`{"messages":[{"role":"system","content":"sys"},{"role":"user","content":"`+long+`"}]}`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if chat.Blocks[0] != a.Blocks[0] {
		t.Error("a Messages body's system prompt renders unlike chat's system message")
	}
}

func TestKindShapes(t *testing.T) {
	for k := Chat; k <= Detokenize; k++ {
		want := apierr.OpenAI
		if k == Messages || k == CountTokens {
			want = apierr.Anthropic
		}
		if k.Shape() != want {
			t.Errorf("%s: shape %v", k, k.Shape())
		}
		if k.String() == "" || (k != Chat && k.String() == "chat") {
			t.Errorf("kind %d has no name", k)
		}
	}
}

// FuzzParseEndpoints: no body for any endpoint makes the parser panic, and
// every failure is a client-visible *apierr.Error.
func FuzzParseEndpoints(f *testing.F) {
	f.Add(uint8(Messages), []byte(`{"max_tokens":8,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"x"}]}]}]}`))
	f.Add(uint8(Embeddings), []byte(`{"input":[[1,2],[3]],"encoding_format":"base64","dimensions":4}`))
	f.Add(uint8(Rerank), []byte(`{"query":"q","documents":["a",{"text":"b"}]}`))
	f.Add(uint8(Score), []byte(`{"text_1":["q"],"text_2":["a","b"]}`))
	f.Add(uint8(Detokenize), []byte(`{"tokens":[1,2]}`))
	f.Add(uint8(Tokenize), []byte(`{"messages":[{"role":"user","content":"x"}]}`))
	f.Fuzz(func(t *testing.T, kind uint8, body []byte) {
		k := Kind(int(kind) % len(kindNames))
		req, err := Parse(k, body, Options{BlockBytes: 8, MaxBodyBytes: 1 << 16})
		if err != nil {
			if _, ok := apierr.As(err); !ok {
				t.Fatalf("error %v is not an *apierr.Error", err)
			}
			return
		}
		if req.PromptTokens < 0 || req.CachedTokens(len(req.Blocks)) > req.PromptTokens || (!k.Generates() && len(req.Blocks) > 0) {
			t.Fatalf("inconsistent %s request: %+v", k, req)
		}
	})
}

func TestParseKinds(t *testing.T) {
	for _, tc := range []struct {
		list string
		want []Kind
		bad  bool
	}{
		{"pooling", []Kind{Embeddings, Rerank, Score, Tokenize, Detokenize}, false},
		{"chat+embeddings", []Kind{Chat, Embeddings}, false},
		{"generate+pooling", []Kind{Chat, Completion, Responses, Messages, CountTokens, Embeddings, Rerank, Score, Tokenize, Detokenize}, false},
		{"chat+audio", nil, true},
		{"", nil, true},
	} {
		got, err := ParseKinds(tc.list)
		if (err != nil) != tc.bad || (!tc.bad && fmt.Sprint(got) != fmt.Sprint(tc.want)) {
			t.Errorf("%q: %v %v, want %v (error %v)", tc.list, got, err, tc.want, tc.bad)
		}
	}
}
