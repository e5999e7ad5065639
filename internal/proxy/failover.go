package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"skywalker/internal/region"
)

// Mid-stream failover (Config.MidStreamFailover, off by default): when a
// chat stream breaks after the client has had part of it, the request is
// sent again — to another replica, or region, by the same routing — with
// the text generated so far appended as a partial assistant turn
// ("continue_final_message": true, "add_generation_prompt": false, as
// vLLM and SGLang take it, and max_tokens less what was generated), and
// the new stream continues the client's. The client sees one stream: only
// whole events are passed on, so a break never leaves half an event, and
// the final usage counts the tokens generated before the break as output,
// not prompt. An Anthropic Messages stream continues the same way: the
// text so far is the assistant turn the engine continues (Anthropic's
// prefill), and the new stream's opening events (message_start,
// content_block_start, ping) are dropped, so the client's stream goes on
// with its next content_block_delta.

// alignedEvents passes an event stream on in whole events, keeping the
// text and the count of the content events that went by; resume swaps in
// the stream that continues it.
type alignedEvents struct {
	src     io.ReadCloser
	buf     [16 << 10]byte
	pending []byte // the start of an event not yet whole
	ready   []byte // whole events not yet read
	err     error

	text   bytes.Buffer // content generated so far, as the client had it
	tokens int          // content events so far (one token each, as vLLM streams)
	// carried is the tokens generated before the current stream began:
	// its usage counts them as prompt; the client's usage must not.
	carried int
	// messages: an Anthropic Messages stream; skipOpening: a continued
	// one, whose events up to its first content_block_delta the client
	// has had already.
	messages, skipOpening bool
}

var eventEnd = []byte("\n\n")

func (a *alignedEvents) Read(p []byte) (int, error) {
	for len(a.ready) == 0 {
		if a.err != nil {
			return 0, a.err
		}
		n, err := a.src.Read(a.buf[:])
		a.pending = append(a.pending, a.buf[:n]...)
		if i := bytes.LastIndex(a.pending, eventEnd); i >= 0 {
			a.take(a.pending[:i+len(eventEnd)])
			a.pending = append(a.pending[:0], a.pending[i+len(eventEnd):]...)
		}
		if err != nil {
			if err == io.EOF { // a clean end: whatever remains is the client's
				a.ready = append(a.ready, a.pending...)
				a.pending = a.pending[:0]
			}
			a.err = err
		}
	}
	n := copy(p, a.ready)
	a.ready = a.ready[n:]
	return n, nil
}

func (a *alignedEvents) Close() error { return a.src.Close() }

// take records whole events and queues them for the client, rewriting the
// usage of a continued stream.
func (a *alignedEvents) take(events []byte) {
	for len(events) > 0 {
		i := bytes.Index(events, eventEnd)
		ev := events[:i+len(eventEnd)]
		events = events[i+len(eventEnd):]
		if a.messages {
			if ev = a.observeMessage(ev); ev == nil {
				continue
			}
		} else if data, ok := bytes.CutPrefix(bytes.TrimSpace(ev), []byte("data: {")); ok {
			ev = a.observe(append([]byte("{"), data...), ev)
		}
		a.ready = append(a.ready, ev...)
	}
}

// observe reads one chunk's content and, in a continued stream, returns
// the event with its usage corrected.
func (a *alignedEvents) observe(chunk, ev []byte) []byte {
	var c struct {
		Choices []struct {
			Delta struct {
				Content string `json:"content"`
			} `json:"delta"`
		} `json:"choices"`
		Usage *struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if json.Unmarshal(chunk, &c) != nil {
		return ev
	}
	for _, ch := range c.Choices {
		if ch.Delta.Content != "" {
			a.text.WriteString(ch.Delta.Content)
			a.tokens++
		}
	}
	if c.Usage == nil || a.carried == 0 {
		return ev
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(chunk, &m) != nil {
		return ev
	}
	var u map[string]json.RawMessage
	_ = json.Unmarshal(m["usage"], &u)
	prompt, completion := c.Usage.PromptTokens-a.carried, c.Usage.CompletionTokens+a.carried
	u["prompt_tokens"], _ = json.Marshal(max(prompt, 0))
	u["completion_tokens"], _ = json.Marshal(completion)
	u["total_tokens"], _ = json.Marshal(max(prompt, 0) + completion)
	m["usage"], _ = json.Marshal(u)
	out, err := json.Marshal(m)
	if err != nil {
		return ev
	}
	return append(append([]byte("data: "), out...), eventEnd...)
}

// observeMessage reads one event of a Messages stream: a text delta's
// text, and, in a continued stream, drops the opening events the client
// had already (nil) and counts the tokens generated before the break in
// message_delta's output_tokens.
func (a *alignedEvents) observeMessage(ev []byte) []byte {
	i := bytes.Index(ev, []byte("data: {"))
	if i < 0 {
		return ev
	}
	data := bytes.TrimSpace(ev[i+len("data: "):])
	var e struct {
		Type  string `json:"type"`
		Delta struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"delta"`
		Usage map[string]json.RawMessage `json:"usage"`
	}
	if json.Unmarshal(data, &e) != nil {
		return ev
	}
	if a.skipOpening {
		if e.Type != "content_block_delta" {
			return nil
		}
		a.skipOpening = false
	}
	switch {
	case e.Type == "content_block_delta" && e.Delta.Type == "text_delta":
		a.text.WriteString(e.Delta.Text)
		a.tokens++
	case e.Type == "message_delta" && a.carried > 0 && e.Usage != nil:
		var out int
		_ = json.Unmarshal(e.Usage["output_tokens"], &out)
		var m map[string]json.RawMessage
		if json.Unmarshal(data, &m) != nil {
			return ev
		}
		e.Usage["output_tokens"], _ = json.Marshal(out + a.carried)
		m["usage"], _ = json.Marshal(e.Usage)
		b, err := json.Marshal(m)
		if err != nil {
			return ev
		}
		return append(append(append([]byte(nil), ev[:i+len("data: ")]...), b...), eventEnd...)
	}
	return ev
}

// resume continues the stream from src: the broken stream's half event is
// dropped, and what was generated so far is carried.
func (a *alignedEvents) resume(src io.ReadCloser) {
	_ = a.src.Close()
	a.src, a.err, a.carried, a.skipOpening = src, nil, a.tokens, a.messages
	a.pending = a.pending[:0]
}

// continuation is the original chat or Messages body with the text
// generated so far as a partial assistant turn for the engine to
// continue, and max_tokens (or max_completion_tokens) less the tokens
// generated.
func continuation(body []byte, text string, generated int, messages bool) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	var msgs []json.RawMessage
	if err := json.Unmarshal(m["messages"], &msgs); err != nil {
		return nil, fmt.Errorf("messages: %w", err)
	}
	turn, _ := json.Marshal(map[string]string{"role": "assistant", "content": text})
	m["messages"], _ = json.Marshal(append(msgs, turn))
	if !messages { // Anthropic's API continues a final assistant turn by itself
		m["continue_final_message"], m["add_generation_prompt"] = json.RawMessage("true"), json.RawMessage("false")
	}
	for _, k := range []string{"max_tokens", "max_completion_tokens"} {
		var n int
		if raw, ok := m[k]; ok && json.Unmarshal(raw, &n) == nil && n > 0 {
			m[k], _ = json.Marshal(max(n-generated, 1))
		}
	}
	return json.Marshal(m)
}

// continueElsewhere re-issues a chat stream that broke midway to another
// target and switches the client's stream to it. The broken attempt is
// ended as failed (the passive rule counts it), and the core routes the
// request again within its retry bound (region.Attempt.Continue).
func (x *exchange) continueElsewhere(events *alignedEvents) error {
	body, err := continuation(x.body, events.text.String(), events.tokens, events.messages)
	if err != nil {
		x.endAttempt(region.BrokeMidStream)
		x.endContext()
		return fmt.Errorf("continuation body: %w", err)
	}
	o := x.target
	x.target = routed{}
	x.endContext()
	next, n, err := x.s.router.Continue(x.ctx, o.Attempt)
	if err == nil && n.Err != nil {
		err = n.Err
	}
	resp, err := x.attempt(body, next, err)
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		resp.Body.Close()
		x.endAttempt(region.Released)
		return fmt.Errorf("the continuation was answered %s", resp.Status)
	}
	events.resume(resp.Body)
	x.start = time.Now()
	if p := x.target.Peer; p != nil {
		x.servedBy = p.Region
	} else {
		x.servedBy = x.s.cfg.Region
	}
	x.stall.Reset(x.s.cfg.StallTimeout)
	x.s.metrics.failovers.Inc()
	x.s.log.Info("stream continued elsewhere", "id", x.req.ID, "generated", events.tokens, "served", x.servedBy)
	return nil
}
