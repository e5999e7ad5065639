package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"skywalker/internal/apierr"
	"skywalker/internal/request"
)

// The Responses API as vLLM serves it: POST /v1/responses, streamed as
// named events or whole; GET /v1/responses/{id} (stream=true replays its
// events, after starting_after); POST /v1/responses/{id}/cancel for a
// background response. A response is stored — for previous_response_id,
// GET and cancel — only with the store on (vLLM's
// VLLM_ENABLE_RESPONSES_API_STORE; Config.ResponsesStore) and in this
// process's memory only: another replica, or this one restarted, answers
// a previous_response_id with a 404, the failure a router must avoid.
// Without the store, store=true is silently ignored and background is a
// 400, as in vLLM.

// maxStoredResponses bounds the store (vLLM's grows without bound); the
// oldest go first.
const maxStoredResponses = 100_000

// response is one response, as stored.
type response struct {
	id, model, previous string
	created             int64
	background          bool
	// units and promptTokens are the conversation so far (its prompt
	// blocks and tokens) for the response that continues it.
	units        []uint64
	promptTokens int
	mu           sync.Mutex // guards what follows
	status       string     // queued, in_progress, completed, cancelled, incomplete
	text         []byte
	outputTokens int
	cachedTokens int
	cancel       func()
}

// responseStore is the process's stored responses, oldest first out.
type responseStore struct {
	mu    sync.Mutex
	byID  map[string]*response
	order []string
}

func (rs *responseStore) get(id string) *response {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.byID[id]
}

func (rs *responseStore) put(r *response) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.byID == nil {
		rs.byID = map[string]*response{}
	}
	if len(rs.order) >= maxStoredResponses {
		delete(rs.byID, rs.order[0])
		rs.order = slices.Delete(rs.order, 0, 1)
	}
	rs.byID[r.id] = r
	rs.order = append(rs.order, r.id)
}

// notFound is vLLM's answer for an id it does not hold.
func notFound(id string) *apierr.Error {
	return &apierr.Error{Code: apierr.ResponseNotFound, Param: "response_id", Message: fmt.Sprintf("Response with id '%s' not found.", id)}
}

// respond serves POST /v1/responses.
func (s *Server) respond(w http.ResponseWriter, r *http.Request) {
	req, body, err := request.ParseFrom(request.Responses, r.Body, r.ContentLength, nil, s.cfg.Parse)
	if err != nil {
		apierr.Write(w, err)
		return
	}
	var flags struct {
		Store *bool `json:"store"` // OpenAI's default: true
	}
	_ = json.Unmarshal(body, &flags) // the body parsed: it is JSON
	store := (flags.Store == nil || *flags.Store) && s.cfg.ResponsesStore
	if req.Background && !store {
		apierr.Write(w, apierr.Invalid("background", "This vLLM engine does not support `store=True` and therefore does not support the background mode. "+
			"To enable these features, set the environment variable `VLLM_ENABLE_RESPONSES_API_STORE=1` when launching the vLLM server."))
		return
	}
	units, prompt := req.Blocks, req.PromptTokens
	if req.PreviousResponse != "" {
		prev := s.responses.get(req.PreviousResponse)
		if prev == nil {
			apierr.Write(w, notFound(req.PreviousResponse))
			return
		}
		// The conversation so far, then this input: its blocks continue
		// the previous prompt's chain, so the cached prefix is reused.
		prev.mu.Lock()
		units = append(slices.Clone(prev.units), continueChain(prev.units, req.Blocks)...)
		prompt = prev.promptTokens + prev.outputTokens + req.PromptTokens
		prev.mu.Unlock()
	}
	served, stallAt, ok := s.accept(w, r, req, apierr.OpenAI)
	if !ok {
		return
	}
	a, err := s.start(req, units, prompt)
	if err != nil {
		apierr.Write(w, apierr.Invalid("input", "%v", err))
		return
	}
	resp := &response{id: fmt.Sprintf("resp_%016x%016x", s.cfg.Seed*0x9E3779B97F4A7C15^a.id, a.id), model: served, previous: req.PreviousResponse,
		created: time.Now().Unix(), background: req.Background, units: units, promptTokens: prompt, status: "in_progress"}
	out := newOutput(request.Responses, a.id, served, resp.created, s.cfg.Seed)
	if store {
		s.responses.put(resp)
	}
	switch {
	case req.Background:
		resp.status = "queued"
		ctx, stop := context.WithCancel(s.ctx)
		done := make(chan struct{})
		resp.cancel = func() { stop(); <-done }
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(resp.object())
		go func() {
			defer close(done)
			defer stop()
			s.generate(ctx.Done(), a, resp, out, stallAt, nil)
		}()
	case req.Stream:
		s.streamEvents(w, r, a, resp, out, stallAt)
	default:
		if !s.generate(r.Context().Done(), a, resp, out, stallAt, nil) {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(resp.object())
	}
}

// continueChain chains blocks (hashed from the start of their own input)
// after the last of prior, so that a continuation's blocks extend the
// previous prompt's.
func continueChain(prior, blocks []uint64) []uint64 {
	if len(prior) == 0 {
		return blocks
	}
	out := make([]uint64, len(blocks))
	parent := prior[len(prior)-1]
	for i, b := range blocks {
		parent = request.ChainBlockID(parent, b, 0)
		out[i] = parent
	}
	return out
}

// generate follows a's sequence to its end, recording the output in resp
// and handing each new token's text to delta (nil: none); it returns
// false when done closed first (the client left, or a cancel), the
// sequence aborted.
func (s *Server) generate(done <-chan struct{}, a admitted, resp *response, out *output, stallAt int, delta func(text string) bool) bool {
	resp.mu.Lock()
	if resp.status == "queued" {
		resp.status = "in_progress"
	}
	resp.mu.Unlock()
	sent := 0
	for {
		select {
		case <-a.st.notify:
		case <-done:
			s.abort(a.st)
			resp.finish("cancelled", a)
			return false
		}
		generated, finished := s.progress(a.st)
		if stallAt >= 0 && generated >= stallAt {
			generated, finished = stallAt, false
		}
		for ; sent < generated; sent++ {
			word := out.word(sent)
			resp.mu.Lock()
			resp.text = append(resp.text, word...)
			resp.outputTokens = sent + 1
			resp.mu.Unlock()
			if delta != nil && !delta(word) {
				s.abort(a.st)
				return false
			}
		}
		if finished {
			status := "completed"
			if a.finish == "length" {
				status = "incomplete"
			}
			resp.finish(status, a)
			s.metrics.finished(a.finish, a.st.seq.Generated)
			return true
		}
		if stallAt >= 0 && sent >= stallAt {
			<-done // injected stall: silent until the client leaves
			s.abort(a.st)
			return false
		}
	}
}

// finish records how resp ended.
func (resp *response) finish(status string, a admitted) {
	resp.mu.Lock()
	defer resp.mu.Unlock()
	if resp.status == "cancelled" {
		return
	}
	resp.status = status
	resp.cachedTokens = a.st.seq.CachedTokens
}

// object is the response as the API shows it.
func (resp *response) object() map[string]any {
	resp.mu.Lock()
	defer resp.mu.Unlock()
	output := []any{} // never null: the official SDKs iterate it (a queued response's is empty)
	if len(resp.text) > 0 || resp.status == "completed" || resp.status == "incomplete" {
		output = append(output, resp.message("completed"))
	}
	var previous any
	if resp.previous != "" {
		previous = resp.previous
	}
	o := map[string]any{"id": resp.id, "object": "response", "created_at": resp.created, "status": resp.status, "model": resp.model,
		"output": output, "previous_response_id": previous, "background": resp.background, "error": nil, "incomplete_details": nil,
		"instructions": nil, "metadata": map[string]any{}, "parallel_tool_calls": true, "temperature": 1.0, "top_p": 1.0,
		"tool_choice": "auto", "tools": []any{}, "truncation": "disabled", "text": map[string]any{"format": map[string]any{"type": "text"}}}
	if resp.status == "incomplete" {
		o["incomplete_details"] = map[string]any{"reason": "max_output_tokens"}
	}
	if resp.status != "queued" && resp.status != "in_progress" {
		o["usage"] = map[string]any{"input_tokens": resp.promptTokens, "input_tokens_details": map[string]any{"cached_tokens": resp.cachedTokens},
			"output_tokens": resp.outputTokens, "output_tokens_details": map[string]any{"reasoning_tokens": 0},
			"total_tokens": resp.promptTokens + resp.outputTokens}
	}
	return o
}

// message is the response's output message (under resp.mu).
func (resp *response) message(status string) map[string]any {
	return map[string]any{"id": "msg_" + resp.id[len("resp_"):], "type": "message", "status": status, "role": "assistant",
		"content": []any{map[string]any{"type": "output_text", "text": string(resp.text), "annotations": []any{}}}}
}

// events writes the Responses stream's named events, numbering them.
type events struct {
	w    http.ResponseWriter
	rc   *http.ResponseController
	seq  int
	skip int // events numbered at or below are not written (starting_after)
	buf  []byte
}

func (e *events) send(typ string, fields map[string]any) bool {
	fields["type"], fields["sequence_number"] = typ, e.seq
	e.seq++
	if e.seq-1 <= e.skip {
		return true
	}
	data, _ := json.Marshal(fields) // maps of plain values always marshal
	e.buf = append(append(append(append(e.buf[:0], "event: "...), typ...), "\ndata: "...), data...)
	e.buf = append(e.buf, '\n', '\n')
	if _, err := e.w.Write(e.buf); err != nil {
		return false
	}
	_ = e.rc.Flush()
	return true
}

// streamEvents streams a response as vLLM does: created and in_progress
// at once, the output item and its content part, a delta per token, then
// the done events and completed.
func (s *Server) streamEvents(w http.ResponseWriter, r *http.Request, a admitted, resp *response, out *output, stallAt int) {
	e := startEvents(w, -1)
	itemID := "msg_" + resp.id[len("resp_"):]
	if !e.opening(resp) {
		s.abort(a.st)
		return
	}
	if !s.generate(r.Context().Done(), a, resp, out, stallAt, func(word string) bool {
		return e.send("response.output_text.delta", map[string]any{"item_id": itemID, "output_index": 0, "content_index": 0, "delta": word, "logprobs": []any{}})
	}) {
		return
	}
	e.closing(resp)
}

func startEvents(w http.ResponseWriter, startingAfter int) *events {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	return &events{w: w, rc: rc, skip: startingAfter}
}

// opening sends the events before the first token.
func (e *events) opening(resp *response) bool {
	itemID := "msg_" + resp.id[len("resp_"):]
	obj := resp.object()
	obj["status"], obj["output"] = "in_progress", []any{}
	return e.send("response.created", map[string]any{"response": obj}) &&
		e.send("response.in_progress", map[string]any{"response": obj}) &&
		e.send("response.output_item.added", map[string]any{"output_index": 0, "item": map[string]any{"id": itemID, "type": "message", "status": "in_progress", "role": "assistant", "content": []any{}}}) &&
		e.send("response.content_part.added", map[string]any{"item_id": itemID, "output_index": 0, "content_index": 0, "part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}}})
}

// closing sends the events after the last token.
func (e *events) closing(resp *response) bool {
	itemID := "msg_" + resp.id[len("resp_"):]
	obj := resp.object()
	resp.mu.Lock()
	text := string(resp.text)
	item := resp.message("completed")
	resp.mu.Unlock()
	final := "response.completed"
	if obj["status"] == "incomplete" {
		final = "response.incomplete"
	}
	return e.send("response.output_text.done", map[string]any{"item_id": itemID, "output_index": 0, "content_index": 0, "text": text, "logprobs": []any{}}) &&
		e.send("response.content_part.done", map[string]any{"item_id": itemID, "output_index": 0, "content_index": 0, "part": map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}) &&
		e.send("response.output_item.done", map[string]any{"output_index": 0, "item": item}) &&
		e.send(final, map[string]any{"response": obj})
}

// retrieve serves GET /v1/responses/{id}: the response, or with
// stream=true its events (after starting_after) — the whole sequence, as
// it stands now.
func (s *Server) retrieve(w http.ResponseWriter, r *http.Request) {
	resp := s.stored(w, r)
	if resp == nil {
		return
	}
	q := r.URL.Query()
	if q.Get("stream") != "true" {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(resp.object())
		return
	}
	after := -1
	if v := q.Get("starting_after"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			apierr.Write(w, apierr.Invalid("starting_after", "starting_after must be a non-negative integer"))
			return
		}
		after = n
	}
	e := startEvents(w, after)
	if !e.opening(resp) {
		return
	}
	resp.mu.Lock()
	text := string(resp.text)
	resp.mu.Unlock()
	itemID := "msg_" + resp.id[len("resp_"):]
	if text != "" && !e.send("response.output_text.delta", map[string]any{"item_id": itemID, "output_index": 0, "content_index": 0, "delta": text, "logprobs": []any{}}) {
		return
	}
	e.closing(resp)
}

// stored is the response the path's id names, or nil when it answered
// vLLM's 404.
func (s *Server) stored(w http.ResponseWriter, r *http.Request) *response {
	id := r.PathValue("id")
	resp := s.responses.get(id)
	if resp == nil {
		apierr.Write(w, notFound(id))
	}
	return resp
}

// cancelResponse serves POST /v1/responses/{id}/cancel.
func (s *Server) cancelResponse(w http.ResponseWriter, r *http.Request) {
	resp := s.stored(w, r)
	if resp == nil {
		return
	}
	if !resp.background {
		apierr.Write(w, apierr.Invalid("response_id", "Cannot cancel a synchronous response."))
		return
	}
	resp.mu.Lock()
	cancel, running := resp.cancel, resp.status == "queued" || resp.status == "in_progress"
	if running {
		resp.status = "cancelled"
	}
	resp.mu.Unlock()
	if running && cancel != nil {
		cancel()
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp.object())
}
