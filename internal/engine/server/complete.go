package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"

	"skywalker/internal/apierr"
	"skywalker/internal/engine"
	"skywalker/internal/request"
	"skywalker/internal/tracing"
)

// complete serves /v1/chat/completions, /v1/completions and Anthropic's
// /v1/messages.
func (s *Server) complete(w http.ResponseWriter, r *http.Request, kind request.Kind) {
	req, _, err := request.ParseFrom(kind, r.Body, r.ContentLength, nil, s.cfg.Parse)
	if err != nil {
		apierr.WriteAs(w, err, kind.Shape())
		return
	}
	served, stallAt, ok := s.accept(w, r, req, kind.Shape())
	if !ok {
		return
	}
	a, err := s.start(req, req.Blocks, req.PromptTokens)
	if err != nil {
		apierr.WriteAs(w, apierr.Invalid("messages", "%v", err), kind.Shape())
		return
	}
	out := newOutput(kind, a.id, served, s.clock.start.Unix(), s.cfg.Seed)
	if req.Stream {
		s.streamResponse(w, r, a.st, out, req.IncludeUsage, a.finish, stallAt)
	} else {
		s.wholeResponse(w, r, a.st, out, a.finish, stallAt)
	}
}

// accept takes a parsed request: its model (the name the server answers
// as) and its faults (the token a stream stalls at, -1 for none); false
// when it answered the request already.
func (s *Server) accept(w http.ResponseWriter, r *http.Request, req *request.Request, shape apierr.Shape) (served string, stallAt int, ok bool) {
	if served, ok = s.model(w, req, shape); !ok {
		return "", 0, false
	}
	if span := tracing.FromContext(r.Context()); span.On() {
		span.Set(semconv.GenAIRequestModelKey.String(served), semconv.GenAIUsageInputTokensKey.Int(req.PromptTokens))
	}
	stallAt, ok = s.faults(w, r, shape)
	return served, stallAt, ok
}

// model checks the request's model against what the server serves and
// returns the name it answers as (the model, or the LoRA adapter the
// request names, whose prefix cache is its own); false when it wrote a
// 404.
func (s *Server) model(w http.ResponseWriter, req *request.Request, shape apierr.Shape) (string, bool) {
	if req.Model == "" || req.Model == s.cfg.Model {
		return s.cfg.Model, true
	}
	if !slices.Contains(s.cfg.LoRAModules, req.Model) {
		apierr.WriteAs(w, &apierr.Error{Code: apierr.ModelNotFound, Param: "model",
			Message: fmt.Sprintf("the model %q does not exist; this server serves %q", req.Model, strings.Join(append([]string{s.cfg.Model}, s.cfg.LoRAModules...), ", "))}, shape)
		return "", false
	}
	req.SetPool(s.cfg.Model, req.Model)
	return req.Model, true
}

// faults applies the injected faults to an accepted request: it returns
// the token a stream stalls at (-1: none), or false when the fault
// answered it (an error, a hang until the client leaves, the process
// exiting).
func (s *Server) faults(w http.ResponseWriter, r *http.Request, shape apierr.Shape) (int, bool) {
	if f := s.cfg.Faults; f.ExitAfter > 0 && s.accepted.Load() >= int64(f.ExitAfter) {
		s.log.Warn("fault injection: exiting", "after_requests", f.ExitAfter)
		s.cfg.Exit(3)
		return 0, false
	}
	s.accepted.Add(1)
	if s.chance(s.cfg.Faults.ErrorRate) {
		apierr.WriteAs(w, apierr.New(apierr.Internal, "injected fault: internal server error"), shape)
		return 0, false
	}
	if s.chance(s.cfg.Faults.HangRate) {
		<-r.Context().Done()
		return 0, false
	}
	if s.chance(s.cfg.Faults.StallRate) {
		return max(s.cfg.Faults.StallAfter, 0), true
	}
	return -1, true
}

// admitted is a sequence the engine took.
type admitted struct {
	id     uint64
	st     *stream
	finish string // the finish reason when it ends: length at max_tokens, stop at the default
}

// start adds req's sequence — its prompt as units (prefix blocks) and
// tokens — to the engine.
func (s *Server) start(req *request.Request, units []uint64, promptTokens int) (admitted, error) {
	maxTokens, finish := req.MaxTokens, "length"
	if maxTokens == 0 {
		maxTokens, finish = s.cfg.DefaultMaxTokens, "stop"
	}
	id := s.nextID.Add(1)
	st := &stream{notify: make(chan struct{}, 1)}
	st.seq = &engine.Sequence{ID: strconv.FormatUint(id, 10), PromptTokens: max(promptTokens, 1), MaxTokens: maxTokens,
		Units: units, UnitTokens: req.BlockTokens, Adapter: req.Adapter, Data: st}
	s.mu.Lock()
	st.seq.Arrival = s.clock.model(time.Now())
	err := s.eng.Add(st.seq)
	s.mu.Unlock()
	if err != nil {
		return admitted{}, err
	}
	s.metrics.requestAdded(promptTokens)
	s.poke()
	return admitted{id: id, st: st, finish: finish}, nil
}

// awaitProgress blocks until the engine reports progress on st, or the
// client goes away, in which case the sequence is aborted and it returns false.
func (s *Server) awaitProgress(r *http.Request, st *stream) bool {
	select {
	case <-st.notify:
		return true
	case <-r.Context().Done():
		s.abort(st)
		return false
	}
}

// awaitDone blocks until the sequence is done (never, under an injected
// stall: stallAt >= 0) or the client goes away (false: it was aborted).
func (s *Server) awaitDone(r *http.Request, st *stream, stallAt int) bool {
	for {
		if !s.awaitProgress(r, st) {
			return false
		}
		if _, done := s.progress(st); done && stallAt < 0 {
			return true
		}
	}
}

// progress reads how far the sequence got, under the server lock.
func (s *Server) progress(st *stream) (generated int, done bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return st.seq.Generated, st.done
}

// abort gives the engine back a sequence whose client went away, and
// counts it.
func (s *Server) abort(st *stream) {
	s.metrics.aborted()
	s.mu.Lock()
	s.eng.Abort(st.seq)
	s.mu.Unlock()
	s.poke()
}

// streamResponse writes SSE as vLLM does: headers at once, then — from the
// first token on — a role chunk, one chunk per token, a final chunk with
// finish_reason, a usage chunk if asked, and data: [DONE]. A client that
// goes away aborts the sequence.
func (s *Server) streamResponse(w http.ResponseWriter, r *http.Request, st *stream, out *output, includeUsage bool, finish string, stallAt int) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	var buf []byte
	sent := 0
	for {
		if !s.awaitProgress(r, st) {
			return
		}
		generated, done := s.progress(st)
		if stallAt >= 0 && generated >= stallAt {
			generated = stallAt
			done = false
		}
		if sent == 0 && (generated > 0 || done) {
			buf = out.appendStart(buf, st.seq) // the role chunk travels with the first token
		}
		for ; sent < generated; sent++ {
			buf = out.appendToken(buf, sent)
		}
		if done {
			buf = out.appendEnd(buf, finish, includeUsage, st.seq, sent)
		}
		if len(buf) > 0 {
			if _, err := w.Write(buf); err != nil {
				s.abort(st)
				return
			}
			_ = rc.Flush()
			buf = buf[:0]
		}
		if done {
			s.metrics.finished(finish, st.seq.Generated)
			return
		}
		if stallAt >= 0 && sent >= stallAt {
			<-r.Context().Done() // injected stall: hold the stream open, silent
			s.abort(st)
			return
		}
	}
}

// wholeResponse waits for the sequence to finish and writes one JSON body.
func (s *Server) wholeResponse(w http.ResponseWriter, r *http.Request, st *stream, out *output, finish string, stallAt int) {
	if !s.awaitDone(r, st, stallAt) {
		return
	}
	generated := st.seq.Generated
	s.metrics.finished(finish, generated)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out.whole(generated, finish, st.seq.PromptTokens, st.seq.CachedTokens))
}

// words are the filler output, one per token.
var words = [...]string{"the ", "of ", "and ", "to ", "in ", "a ", "is ", "that ", "for ", "it ", "as ", "was ", "with ", "be ",
	"by ", "on ", "not ", "he ", "this ", "are ", "or ", "his ", "from ", "at ", "which ", "but ", "have ", "an ", "had ",
	"they ", "you ", "were ", "their ", "one ", "all ", "we ", "can ", "her ", "has ", "there ", "been ", "if ", "more ",
	"when ", "will ", "would ", "who ", "so ", "no ", "model ", "cache ", "region ", "token ", "prefix ", "latency ",
	"queue ", "replica ", "balance ", "route ", "serve ", "batch ", "block ", "prompt ", "reply "}

// output renders one response in the endpoint's OpenAI shape.
type output struct {
	kind    request.Kind
	prefix  []byte // shared start of every chunk, up to the choices
	id      string
	model   string
	created int64
	seed    uint64
}

func newOutput(kind request.Kind, id uint64, model string, created int64, seed uint64) *output {
	o := &output{kind: kind, model: model, created: created, seed: seed}
	object := "chat.completion.chunk"
	o.id = "chatcmpl-" + strconv.FormatUint(id, 16)
	switch kind {
	case request.Completion:
		object = "text_completion"
		o.id = "cmpl-" + strconv.FormatUint(id, 16)
	case request.Messages:
		o.id = "msg_" + strconv.FormatUint(id, 16)
	}
	o.prefix = fmt.Appendf(nil, `data: {"id":%q,"object":%q,"created":%d,"model":%s,"choices":[`, o.id, object, created, strconv.Quote(model))
	return o
}

func (o *output) word(i int) string {
	x := o.seed ^ uint64(i)*0x9E3779B97F4A7C15
	x ^= x >> 29
	return words[x%uint64(len(words))]
}

func (o *output) appendStart(buf []byte, seq *engine.Sequence) []byte {
	switch o.kind {
	case request.Completion:
		return buf
	case request.Messages:
		return o.appendMessageStart(buf, seq)
	}
	buf = append(buf, o.prefix...)
	return append(buf, `{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
}

func (o *output) appendToken(buf []byte, i int) []byte {
	if o.kind == request.Messages {
		return o.appendTextDelta(buf, i)
	}
	buf = append(buf, o.prefix...)
	if o.kind == request.Completion {
		buf = append(buf, `{"index":0,"text":"`...)
		buf = append(buf, o.word(i)...)
		return append(buf, `","logprobs":null,"finish_reason":null,"stop_reason":null}]}`+"\n\n"...)
	}
	buf = append(buf, `{"index":0,"delta":{"content":"`...)
	buf = append(buf, o.word(i)...)
	return append(buf, `"},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
}

// appendEnd ends a stream: the finish chunk, the usage chunk if asked and
// [DONE]; a Messages stream's closing events.
func (o *output) appendEnd(buf []byte, finish string, includeUsage bool, seq *engine.Sequence, generated int) []byte {
	if o.kind == request.Messages {
		return o.appendMessageEnd(buf, finish, generated)
	}
	buf = o.appendFinish(buf, finish)
	if includeUsage {
		buf = o.appendUsage(buf, seq.PromptTokens, generated, seq.CachedTokens)
	}
	return append(buf, "data: [DONE]\n\n"...)
}

func (o *output) appendFinish(buf []byte, finish string) []byte {
	buf = append(buf, o.prefix...)
	if o.kind == request.Completion {
		return fmt.Appendf(buf, `{"index":0,"text":"","logprobs":null,"finish_reason":%q,"stop_reason":null}]}`+"\n\n", finish)
	}
	return fmt.Appendf(buf, `{"index":0,"delta":{},"logprobs":null,"finish_reason":%q}]}`+"\n\n", finish)
}

func (o *output) appendUsage(buf []byte, prompt, completion, cached int) []byte {
	buf = append(buf, o.prefix[:len(o.prefix)-len(`"choices":[`)]...)
	return fmt.Appendf(buf, `"choices":[],"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}}}`+"\n\n",
		prompt, prompt+completion, completion, cached)
}

type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	TotalTokens         int `json:"total_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// whole is the non-streaming response body.
func (o *output) whole(generated int, finish string, prompt, cached int) []byte {
	text := make([]byte, 0, generated*6)
	for i := range generated {
		text = append(text, o.word(i)...)
	}
	u := usage{PromptTokens: prompt, CompletionTokens: generated, TotalTokens: prompt + generated}
	u.PromptTokensDetails.CachedTokens = cached
	var v any
	if o.kind == request.Messages {
		return o.wholeMessage(string(text), finish, prompt, generated, cached)
	}
	if o.kind == request.Completion {
		v = map[string]any{"id": o.id, "object": "text_completion", "created": o.created, "model": o.model, "usage": u,
			"choices": []map[string]any{{"index": 0, "text": string(text), "logprobs": nil, "finish_reason": finish, "stop_reason": nil}}}
	} else {
		v = map[string]any{"id": o.id, "object": "chat.completion", "created": o.created, "model": o.model, "usage": u,
			"choices": []map[string]any{{"index": 0, "message": map[string]any{"role": "assistant", "content": string(text), "tool_calls": []any{}},
				"logprobs": nil, "finish_reason": finish, "stop_reason": nil}}}
	}
	b, _ := json.Marshal(v) // maps of strings and numbers always marshal
	return b
}
