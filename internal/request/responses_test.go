package request

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"skywalker/internal/apierr"
)

// A Responses body renders as the chat body that says the same: its
// instructions as a system message first (wherever the JSON puts them), a
// string input as one user message, message items as chat messages — so
// the prefix index and the digests know a conversation whichever API
// carries it.
func TestResponsesRenderAsTheChatThatSaysTheSame(t *testing.T) {
	system := strings.Repeat("You answer questions about trains. ", 40)
	question := strings.Repeat("Which train reaches Lyon first? ", 30)
	for _, tc := range []struct {
		name, responses, chat string
	}{
		{"a string input",
			`{"model":"m","input":` + q(question) + `}`,
			`{"model":"m","messages":[{"role":"user","content":` + q(question) + `}]}`},
		{"instructions after the input",
			`{"input":[{"role":"user","content":` + q(question) + `}],"instructions":` + q(system) + `,"model":"m"}`,
			`{"model":"m","messages":[{"role":"system","content":` + q(system) + `},{"role":"user","content":` + q(question) + `}]}`},
		{"typed message items with content parts",
			`{"model":"m","instructions":` + q(system) + `,"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":` + q(question) + `}]},` +
				`{"type":"message","role":"assistant","id":"msg_1","status":"completed","content":[{"type":"output_text","text":"The 9:04."}]}]}`,
			`{"model":"m","messages":[{"role":"system","content":` + q(system) + `},{"role":"user","content":[{"type":"text","text":` + q(question) + `}]},` +
				`{"role":"assistant","content":[{"type":"text","text":"The 9:04."}]}]}`},
	} {
		r, c := mustParse(t, Responses, tc.responses), mustParse(t, Chat, tc.chat)
		if !slices.Equal(r.Blocks, c.Blocks) || r.PromptTokens != c.PromptTokens || len(r.Blocks) == 0 {
			t.Errorf("%s: %d blocks, %d tokens; chat %d blocks, %d tokens: not the same prompt", tc.name, len(r.Blocks), r.PromptTokens, len(c.Blocks), c.PromptTokens)
		}
	}
}

// Every field a router needs is read; the rest passes through.
func TestResponsesReadsWhatRoutingNeeds(t *testing.T) {
	body := `{"model":"llama","input":[{"role":"user","content":"hi"},{"type":"function_call","call_id":"c1","name":"weather","arguments":"{\"city\":\"Oslo\"}"},` +
		`{"type":"function_call_output","call_id":"c1","output":"-3C"}],"tools":[{"type":"function","name":"weather"}],"previous_response_id":"resp_abc",` +
		`"prompt_cache_key":"user-42-thread-7","user":"u1","max_output_tokens":64,"stream":true,"store":true,"background":false,"metadata":{"priority":"critical","data_residency":"EU"}}`
	r := mustParse(t, Responses, body)
	if r.Model != "llama" || r.PreviousResponse != "resp_abc" || r.Session != "user-42-thread-7" || r.MaxTokens != 64 || !r.Stream || !r.Store ||
		r.Class != Critical || r.Residency != "eu" {
		t.Errorf("read %+v", r)
	}
	out := r.RewritePrevious(r.RewriteModel([]byte(body), "meta-llama/Llama-3.1-8B-Instruct"), "resp_engine_0123")
	var back map[string]any
	if err := json.Unmarshal(out, &back); err != nil || back["previous_response_id"] != "resp_engine_0123" || back["model"] != "meta-llama/Llama-3.1-8B-Instruct" ||
		back["prompt_cache_key"] != "user-42-thread-7" {
		t.Errorf("rewritten body %s (%v)", out, err)
	}
	// prompt_cache_key wins over user whatever their order.
	if r := mustParse(t, Responses, `{"prompt_cache_key":"k","user":"u","input":"x"}`); r.Session != "k" {
		t.Errorf("session %q, want the prompt_cache_key", r.Session)
	}
	if r := mustParse(t, Chat, `{"user":"u","messages":[{"role":"user","content":"x"}],"prompt_cache_key":"k"}`); r.Session != "k" {
		t.Errorf("chat: session %q, want the prompt_cache_key", r.Session)
	}
}

// A request resends its conversation when its input carries a model's
// earlier output; without previous_response_id it is the same request as
// a new chain.
func TestAResentConversationCanStartItsChainOver(t *testing.T) {
	for _, tc := range []struct {
		body   string
		resent bool
	}{
		{`{"model":"m","input":"And back?","previous_response_id":"resp_1"}`, false},
		{`{"model":"m","input":[{"role":"user","content":"And back?"}],"previous_response_id":"resp_1"}`, false},
		{`{"previous_response_id":"resp_1","model":"m","input":[{"role":"user","content":"To Lyon?"},{"role":"assistant","content":"The 9:04."},{"role":"user","content":"And back?"}]}`, true},
		{`{"model":"m","input":[{"role":"user","content":"weather?"},{"type":"function_call","call_id":"c1","name":"weather","arguments":"{}"},` +
			`{"type":"function_call_output","call_id":"c1","output":"-3C"}],"previous_response_id":"resp_1"}`, true},
		{`{"model":"m","input":[{"type":"reasoning","summary":[]},{"role":"user","content":"go on"}],"previous_response_id":"resp_1"}`, true},
		{`{"model":"m","input":[{"type":"function_call_output","call_id":"c1","output":"-3C"}],"previous_response_id":"resp_1"}`, false},
	} {
		r := mustParse(t, Responses, tc.body)
		if r.Resent != tc.resent {
			t.Errorf("%s: resent %v, want %v", tc.body, r.Resent, tc.resent)
		}
		renamed := r.RewriteModel([]byte(tc.body), "meta-llama/Llama-3.1-8B-Instruct")
		fresh := r.WithoutPrevious(renamed)
		var back map[string]any
		if err := json.Unmarshal(fresh, &back); err != nil {
			t.Fatalf("%s: the body without its previous response is not JSON: %v\n%s", tc.body, err, fresh)
		}
		if v, ok := back["previous_response_id"]; !ok || v != nil || back["model"] != "meta-llama/Llama-3.1-8B-Instruct" {
			t.Errorf("without previous: %s", fresh)
		}
		again := mustParse(t, Responses, string(fresh))
		if again.PreviousResponse != "" || !slices.Equal(again.Blocks, r.Blocks) {
			t.Errorf("%s: parsed again, previous %q and %d blocks (was %d)", fresh, again.PreviousResponse, len(again.Blocks), len(r.Blocks))
		}
		// The engine's id for the home is written into its own copy.
		if home := r.RewritePrevious(append([]byte(nil), renamed...), "resp_engine_7"); !strings.Contains(string(home), `"resp_engine_7"`) {
			t.Errorf("home body %s", home)
		}
	}
	if r := mustParse(t, Responses, `{"model":"m","input":"x"}`); string(r.WithoutPrevious([]byte(`{"model":"m","input":"x"}`))) != `{"model":"m","input":"x"}` {
		t.Error("a body without previous_response_id changed")
	}
}

func TestResponsesRejectsBadBodies(t *testing.T) {
	for _, tc := range []struct {
		body, param, msg string
	}{
		{`{"model":"m"}`, "input", "input is required"},
		{`{"input":3}`, "input", "string or an array"},
		{`{"input":[]}`, "input", "must not be empty"},
		{`{"input":[3]}`, "input[0]", "must be an object"},
		{`{"input":[{"content":"hi"}]}`, "input[0].type", "needs a type"},
		{`{"input":[{"type":"message","content":"hi"}]}`, "input[0].role", "role is required"},
		{`{"input":[{"role":"wizard","content":"hi"}]}`, "input[0].role", "unknown role"},
		{`{"input":[{"type":"function_call_output","output":"x"}]}`, "input[0].call_id", "call_id is required"},
		{`{"input":[{"role":"user","content":7}]}`, "input[0].content", "content must be"},
		{`{"input":"x","input":"y"}`, "input", "given twice"},
		{`{"input":"x","previous_response_id":""}`, "previous_response_id", "must not be empty"},
		{`{"input":"x","previous_response_id":7}`, "previous_response_id", "must be a string"},
		{`{"input":"x","tools":{}}`, "tools", "must be an array"},
		{`{"input":"x","instructions":1}`, "instructions", "must be a string"},
		{`{"input":"x","max_output_tokens":0}`, "max_output_tokens", "positive"},
	} {
		_, err := Parse(Responses, []byte(tc.body), Options{})
		e, ok := apierr.As(err)
		if !ok || e.Status() != 400 || e.Param != tc.param || !strings.Contains(e.Message, tc.msg) {
			t.Errorf("%s: %v; want a 400 on %s saying %q", tc.body, err, tc.param, tc.msg)
		}
	}
}

func q(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// A session's key comes from the body's prompt_cache_key, else its
// session_id (vLLM's), else the session header, whatever the keys' order;
// user names a session for hashing only, never for affinity.
func TestTheSessionKeyComesFromTheBodyThenTheHeader(t *testing.T) {
	for _, tc := range []struct {
		body, header      string
		session, affinity string
	}{
		{`{"session_id":"s","messages":[{"role":"user","content":"x"}]}`, "h", "s", "s"},
		{`{"messages":[{"role":"user","content":"x"}],"session_id":"s","prompt_cache_key":"k"}`, "h", "k", "k"},
		{`{"prompt_cache_key":"k","session_id":"s","messages":[{"role":"user","content":"x"}]}`, "", "k", "k"},
		{`{"user":"u","session_id":"s","messages":[{"role":"user","content":"x"}]}`, "", "s", "s"},
		{`{"session_id":"s","user":"u","messages":[{"role":"user","content":"x"}]}`, "", "s", "s"},
		{`{"user":"u","messages":[{"role":"user","content":"x"}]}`, "h", "u", "h"},
		{`{"session_id":"","messages":[{"role":"user","content":"x"}]}`, "h", "", "h"},
	} {
		r := mustParse(t, Chat, tc.body)
		r.SetAffinityHeader(tc.header)
		if r.Session != tc.session || r.Affinity != tc.affinity {
			t.Errorf("%s with header %q: session %q, affinity %q; want %q, %q", tc.body, tc.header, r.Session, r.Affinity, tc.session, tc.affinity)
		}
	}
	if _, err := Parse(Chat, []byte(`{"session_id":7,"messages":[{"role":"user","content":"x"}]}`), Options{}); err == nil || !strings.Contains(err.Error(), "session_id") {
		t.Errorf("a numeric session_id: %v, want an error naming session_id", err)
	}
}
