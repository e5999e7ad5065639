package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

// breakingBackends: the first request any of them gets streams five
// tokens and then drops the connection (an engine killed mid-stream);
// every later one streams three more and a usage chunk, and its body is
// kept.
func breakingBackends(t *testing.T, n int) ([]string, func() []byte) {
	send := func(w io.Writer, chunk string) { fmt.Fprintf(w, "data: %s\n\n", chunk) }
	return breakingStreams(t, n, breakingStream{
		path:  "/v1/chat/completions",
		open:  func(w io.Writer) { send(w, `{"choices":[{"delta":{"role":"assistant","content":""}}]}`) },
		token: func(w io.Writer, text string) { send(w, `{"choices":[{"delta":{"content":"`+text+`"}}]}`) },
		half:  `data: {"choices":[{"delta":{"cont`,
		close: func(w io.Writer) {
			send(w, `{"choices":[],"usage":{"prompt_tokens":105,"completion_tokens":3,"total_tokens":108}}`)
			send(w, "[DONE]")
		},
	})
}

// breakingStream is how one API's stream opens, carries a token, breaks
// (half an event) and closes, for breakingStreams.
type breakingStream struct {
	path        string
	open, close func(w io.Writer)
	token       func(w io.Writer, text string)
	half        string
}

// breakingStreams serves n backends of one API: the first request any of
// them gets opens its stream, sends tokens a0..a4 and half an event, and
// the engine dies; every later one opens again, sends b0..b2 and closes,
// and its body is kept.
func breakingStreams(t *testing.T, n int, api breakingStream) ([]string, func() []byte) {
	var first atomic.Bool
	var mu sync.Mutex
	var continued []byte
	var urls []string
	for range n {
		b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != api.path {
				http.NotFound(w, r)
				return
			}
			body, _ := io.ReadAll(r.Body)
			w.Header().Set("Content-Type", "text/event-stream")
			flushed := flushingWriter{w}
			api.open(flushed)
			if first.CompareAndSwap(false, true) {
				for i := range 5 {
					api.token(flushed, fmt.Sprintf("a%d", i))
				}
				_, _ = io.WriteString(flushed, api.half) // half an event, then the engine dies
				conn, _, _ := w.(http.Hijacker).Hijack()
				conn.Close()
				return
			}
			mu.Lock()
			continued = body
			mu.Unlock()
			for i := range 3 {
				api.token(flushed, fmt.Sprintf("b%d", i))
			}
			api.close(flushed)
		}))
		t.Cleanup(b.Close)
		urls = append(urls, b.URL)
	}
	return urls, func() []byte { mu.Lock(); defer mu.Unlock(); return continued }
}

// flushingWriter flushes every write to the client at once.
type flushingWriter struct{ w http.ResponseWriter }

func (f flushingWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	f.w.(http.Flusher).Flush()
	return n, err
}

// With mid-stream failover on, a stream whose engine dies midway goes on
// from another replica: the client gets every token once, no half event,
// no error, and usage counting all output as output.
func TestAStreamThatBreaksMidwayContinuesElsewhere(t *testing.T) {
	urls, continued := breakingBackends(t, 2)
	p := startSolo(t, urls, func(c *Config) { c.MidStreamFailover = true })
	resp, err := http.Post("http://"+p.addr+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"stream":true,"stream_options":{"include_usage":true},"max_tokens":20,"messages":[{"role":"user","content":"count"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	stream, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var text strings.Builder
	var usage struct{ PromptTokens, CompletionTokens, TotalTokens int }
	for _, ev := range strings.Split(strings.TrimSpace(string(stream)), "\n\n") {
		data, ok := strings.CutPrefix(ev, "data: ")
		if !ok {
			t.Fatalf("not an event: %q in\n%s", ev, stream)
		}
		if data == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct{ Delta struct{ Content string } }
			Usage   *struct {
				PromptTokens     int `json:"prompt_tokens"`
				CompletionTokens int `json:"completion_tokens"`
				TotalTokens      int `json:"total_tokens"`
			}
			Error any
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil || c.Error != nil {
			t.Fatalf("event %q: %v; want whole chunks and no error", data, err)
		}
		for _, ch := range c.Choices {
			text.WriteString(ch.Delta.Content)
		}
		if c.Usage != nil {
			usage.PromptTokens, usage.CompletionTokens, usage.TotalTokens = c.Usage.PromptTokens, c.Usage.CompletionTokens, c.Usage.TotalTokens
		}
	}
	if got := text.String(); got != "a0a1a2a3a4b0b1b2" {
		t.Errorf("the client's text is %q, want every token once: a0…a4 then b0…b2", got)
	}
	if usage.CompletionTokens != 8 || usage.PromptTokens != 100 || usage.TotalTokens != 108 {
		t.Errorf("usage %+v: want 8 completion tokens (5 before the break), the 100 prompt tokens the client sent", usage)
	}
	var body struct {
		Messages []struct{ Role, Content string }
		Continue bool `json:"continue_final_message"`
		AddGen   bool `json:"add_generation_prompt"`
		Max      int  `json:"max_tokens"`
	}
	if err := json.Unmarshal(continued(), &body); err != nil {
		t.Fatal(err)
	}
	last := body.Messages[len(body.Messages)-1]
	if last.Role != "assistant" || last.Content != "a0a1a2a3a4" || !body.Continue || body.AddGen || body.Max != 15 {
		t.Errorf("continuation %+v: want the partial assistant turn to continue and 15 tokens left", body)
	}
	if v := testutilValue(p.srv.metrics.failovers); v != 1 {
		t.Errorf("midstream_failovers_total = %v, want 1", v)
	}
}

// Off (the default), the broken stream ends with an error event.
func TestWithoutFailoverABrokenStreamEndsWithAnError(t *testing.T) {
	urls, _ := breakingBackends(t, 2)
	p := startSolo(t, urls, nil)
	resp, err := http.Post("http://"+p.addr+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"stream":true,"messages":[{"role":"user","content":"count"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	stream, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(stream), "upstream_error") || strings.Contains(string(stream), "b0") {
		t.Errorf("stream %q: want it to end with an upstream_error event, not continue", stream)
	}
}

// breakingMessagesBackends is breakingBackends for Anthropic's Messages
// stream: the opening events (message_start, content_block_start, ping),
// text deltas, and the closing events.
func breakingMessagesBackends(t *testing.T, n int) ([]string, func() []byte) {
	send := func(w io.Writer, name, data string) { fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, data) }
	return breakingStreams(t, n, breakingStream{
		path: "/v1/messages",
		open: func(w io.Writer) {
			send(w, "message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"usage":{"input_tokens":9,"output_tokens":1}}}`)
			send(w, "content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
			send(w, "ping", `{"type":"ping"}`)
		},
		token: func(w io.Writer, text string) {
			send(w, "content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"`+text+`"}}`)
		},
		half: "event: content_block_delta\ndata: {\"type\":\"content_bl",
		close: func(w io.Writer) {
			send(w, "content_block_stop", `{"type":"content_block_stop","index":0}`)
			send(w, "message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":3}}`)
			send(w, "message_stop", `{"type":"message_stop"}`)
		},
	})
}

// A Messages stream whose engine dies midway goes on from another
// replica, as the official Anthropic SDK sees it: one message, every
// delta once, no error, the output tokens of both streams; the engine is
// asked to continue the text so far as the assistant's turn.
func TestAMessagesStreamThatBreaksMidwayContinuesElsewhere(t *testing.T) {
	urls, continued := breakingMessagesBackends(t, 2)
	p := startSolo(t, urls, func(c *Config) { c.MidStreamFailover = true })
	client := anthropic.NewClient(option.WithBaseURL("http://"+p.addr), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	stream := client.Messages.NewStreaming(context.Background(), anthropic.MessageNewParams{Model: "m", MaxTokens: 20,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("count"))}})
	var acc anthropic.Message
	seen := map[string]int{}
	for stream.Next() {
		ev := stream.Current()
		seen[ev.Type]++
		if err := acc.Accumulate(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("the stream failed: %v", err)
	}
	if len(acc.Content) != 1 || acc.Content[0].Text != "a0a1a2a3a4b0b1b2" || acc.Usage.OutputTokens != 8 {
		t.Errorf("accumulated %+v, %d output tokens; want every delta once and 8", acc.Content, acc.Usage.OutputTokens)
	}
	if seen["message_start"] != 1 || seen["content_block_start"] != 1 || seen["message_stop"] != 1 {
		t.Errorf("events %v: want one message_start, content_block_start and message_stop", seen)
	}
	var body struct {
		MaxTokens int `json:"max_tokens"`
		Messages  []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		Continue *bool `json:"continue_final_message"`
	}
	if err := json.Unmarshal(continued(), &body); err != nil {
		t.Fatal(err)
	}
	last := body.Messages[len(body.Messages)-1]
	if body.MaxTokens != 15 || last.Role != "assistant" || string(last.Content) != `"a0a1a2a3a4"` || body.Continue != nil {
		t.Errorf("the continuation asked for %s", continued())
	}
}
