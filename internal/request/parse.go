package request

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"skywalker/internal/apierr"
)

// DefaultMaxBodyBytes bounds request bodies (16 MiB), as the proxy's default.
const DefaultMaxBodyBytes = 16 << 20

// Kind says which endpoint a body was sent to.
type Kind int

// The endpoints a body can be parsed for.
const (
	Chat        Kind = iota // POST /v1/chat/completions
	Completion              // POST /v1/completions
	Responses               // POST /v1/responses
	Messages                // POST /v1/messages (Anthropic)
	CountTokens             // POST /v1/messages/count_tokens (Anthropic)
	Embeddings              // POST /v1/embeddings
	Rerank                  // POST /v1/rerank, /rerank, /v2/rerank (vLLM, Cohere, Jina)
	Score                   // POST /v1/score, /score (vLLM)
	Tokenize                // POST /tokenize (vLLM)
	Detokenize              // POST /detokenize (vLLM)
)

var kindNames = [...]string{Chat: "chat", Completion: "completion", Responses: "responses", Messages: "messages",
	CountTokens: "count_tokens", Embeddings: "embeddings", Rerank: "rerank", Score: "score", Tokenize: "tokenize", Detokenize: "detokenize"}

func (k Kind) String() string {
	if k < 0 || int(k) >= len(kindNames) {
		return "chat"
	}
	return kindNames[k]
}

// Generates reports whether the endpoint generates tokens. The others
// (embeddings, rerank, score: a prefill and a pooled output; tokenize,
// detokenize and count_tokens: the engine's tokenizer only) parse into a
// Request of one output token and no prefix blocks: they are routed by
// load, with no prefix credit (a pooling model keeps no KV cache to reuse).
func (k Kind) Generates() bool {
	return k == Chat || k == Completion || k == Responses || k == Messages
}

// Shape is the error shape of the endpoint's API: Anthropic's for
// Messages and count_tokens, OpenAI's for the rest.
func (k Kind) Shape() apierr.Shape {
	if k == Messages || k == CountTokens {
		return apierr.Anthropic
	}
	return apierr.OpenAI
}

// anthropic: the body is in Anthropic's Messages shape.
func (k Kind) anthropic() bool { return k == Messages || k == CountTokens }

// Options configure parsing; the zero value means the defaults.
type Options struct {
	BlockBytes   int    // prefix block size in rendered bytes; default DefaultBlockBytes
	Seed         uint64 // hash chain seed; default DefaultSeed
	MaxBodyBytes int    // default DefaultMaxBodyBytes
	// BytesPerToken estimates prompt tokens from rendered bytes (no
	// tokenizer runs in the proxy); default BytesPerToken.
	BytesPerToken int
}

func (o Options) withDefaults() Options {
	if o.BlockBytes <= 0 {
		o.BlockBytes = DefaultBlockBytes
	}
	if o.Seed == 0 {
		o.Seed = DefaultSeed
	}
	if o.BytesPerToken <= 0 {
		o.BytesPerToken = BytesPerToken
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	return o
}

func tooLarge(limit int) *apierr.Error {
	return apierr.New(apierr.BodyTooLarge, "request body exceeds the limit of %d bytes", limit)
}

// readError makes a failure to read the body client-visible: a deadline
// is a 408, anything else (the client went away mid-body) a 400.
func readError(err error) error {
	if e, ok := apierr.As(err); ok {
		return e
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return apierr.New(apierr.BodyTimeout, "the request body did not arrive in time: %v", err)
	}
	return apierr.Invalid("", "reading the request body: %v", err)
}

var renderPool = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

// Parse reads an OpenAI request body for the given endpoint and returns the
// Request it describes, with the whole prompt rendered canonically and
// hashed into chained blocks. Every failure is an *apierr.Error: 413 for an
// oversized body, 400 with the offending parameter and byte offset for
// anything malformed.
func Parse(kind Kind, body []byte, opts Options) (*Request, error) {
	opts = opts.withDefaults()
	if len(body) > opts.MaxBodyBytes {
		return nil, tooLarge(opts.MaxBodyBytes)
	}
	req, _, err := parse(kind, scanner{data: body}, len(body), opts)
	return req, err
}

// ParseFrom reads a body from r and parses it as it arrives: each chunk is
// scanned, rendered and hashed before the next is read, so the request is
// ready microseconds after the body's last byte, and a body that turns out
// malformed is refused at the offending byte without reading the rest.
// The body is appended to buf[:0] (pass a pooled buffer; it grows with what
// arrives, never with what was declared) and returned with the request.
// size is the declared Content-Length, or -1: a declared size over the limit
// is a 413 before anything is read. Read failures are client-visible too:
// a deadline (see http.ResponseController.SetReadDeadline) is a 408.
func ParseFrom(kind Kind, r io.Reader, size int64, buf []byte, opts Options) (*Request, []byte, error) {
	opts = opts.withDefaults()
	if size > int64(opts.MaxBodyBytes) {
		return nil, buf[:0], tooLarge(opts.MaxBodyBytes)
	}
	hint := len(buf)
	if size > 0 {
		hint = int(size)
	}
	return parse(kind, scanner{data: buf[:0], src: r, limit: opts.MaxBodyBytes, want: int(max(size, 0))}, hint, opts)
}

// parse runs one parse over s; sizeHint (the body's size if known) only
// sizes the block list.
func parse(kind Kind, s scanner, sizeHint int, opts Options) (*Request, []byte, error) {
	bufp := renderPool.Get().(*[]byte)
	p := parser{s: s, kind: kind}
	p.s.out = (*bufp)[:0]
	if kind.Generates() { // the other kinds get no prefix blocks: nothing to hash
		p.s.chain = &p.chain
		p.chain = blockChain{blockBytes: opts.BlockBytes, seed: opts.Seed, parent: opts.Seed,
			blocks: make([]uint64, 0, sizeHint/opts.BlockBytes+1)}
	}
	err := p.parse()
	if rerr := p.s.readErr; err == nil && len(p.front) > 0 && p.s.dropped > 0 && (rerr == nil || rerr == io.EOF) {
		// The rendering must be rebuilt with the front first, and part of
		// it was let go while the body arrived: render the whole body
		// again, now that it is all here.
		if cap(p.s.out) <= 8<<20 {
			*bufp = p.s.out[:0]
			renderPool.Put(bufp)
		}
		return parse(kind, scanner{data: p.s.data, limit: p.s.limit}, sizeHint, opts)
	}
	if err == nil && len(p.front) > 0 {
		// Instructions and tools come before the input, wherever the JSON
		// put them: the rendering is rebuilt and hashed again.
		p.s.out = append(p.front, p.s.out...)
		p.chain = blockChain{blockBytes: opts.BlockBytes, seed: opts.Seed, parent: opts.Seed, blocks: p.chain.blocks[:0]}
	}
	rendered := p.s.out
	defer func() {
		if cap(rendered) <= 8<<20 { // don't pin huge buffers
			*bufp = rendered[:0]
			renderPool.Put(bufp)
		}
	}()
	if rerr := p.s.readErr; rerr != nil && rerr != io.EOF {
		return nil, p.s.data, readError(rerr) // the body never arrived whole: that, not the JSON, is the error
	}
	if err != nil {
		var se *syntaxError
		if errors.As(err, &se) {
			return nil, p.s.data, apierr.Invalid("", "%v", se)
		}
		return nil, p.s.data, err
	}
	req := &p.req
	bpt := opts.BytesPerToken
	req.PromptTokens = p.promptTokens + (p.s.dropped+len(rendered)-p.tokenBytes+bpt-1)/bpt
	req.BlockTokens = max(opts.BlockBytes/bpt, 1)
	if kind.Generates() {
		p.chain.hash(rendered)
		req.Blocks = p.chain.blocks
	} else {
		req.MaxTokens = 1 // one pooled output (or none at all), and no blocks to reuse
	}
	body := p.s.data
	p.s, p.chain = scanner{}, blockChain{} // the request must not pin the pooled buffers
	return req, body, nil
}

// parser holds the state of one Parse call.
type parser struct {
	s     scanner // s.out is the rendering
	kind  Kind
	req   Request
	chain blockChain
	// promptTokens counts tokens given as token ids (completions with an
	// integer prompt); tokenBytes is how many rendered bytes those ids took,
	// so they are not counted twice by the bytes-per-token estimate.
	promptTokens int
	tokenBytes   int
	sawPrompt    bool
	// front is what a Responses body renders before its input: its
	// instructions (as a system message), then its tools.
	front                     []byte
	sawInstructions, sawTools bool
	// sawPair: a rerank or score body's second side (documents, text_2).
	sawPair bool
}

// list is the name of the body's message list, for error parameters.
func (p *parser) list() string {
	if p.kind == Responses {
		return "input"
	}
	return "messages"
}

// Separators of the canonical rendering. Each message renders as
// content, then unitSep + role + unitSep + name + unitSep + tool_call_id +
// unitSep + tool_calls (as written), then recordSep. Rendering depends only
// on the message itself, so a conversation that grows by appending messages
// keeps every earlier block hash.
const (
	unitSep   = 0x1f
	recordSep = 0x1e
)

func (p *parser) parse() error {
	s := &p.s
	if s.atEnd() {
		return apierr.Invalid("", "request body is empty")
	}
	if s.peek() != '{' {
		return apierr.Invalid("", "request body must be a JSON object, found %s", s.kind())
	}
	err := s.object(p.topField)
	if err != nil {
		return err
	}
	if !s.atEnd() {
		return s.fail("unexpected data after the JSON object")
	}
	if !p.sawPrompt {
		switch p.kind {
		case Chat, Messages, CountTokens:
			return apierr.Invalid("messages", "messages is required")
		case Responses, Embeddings:
			return apierr.Invalid("input", "input is required")
		case Rerank:
			return apierr.Invalid("query", "query is required")
		case Score:
			return apierr.Invalid("text_1", "text_1 (or queries) is required")
		case Tokenize:
			return apierr.Invalid("prompt", "prompt or messages is required")
		case Detokenize:
			return apierr.Invalid("tokens", "tokens is required")
		}
		return apierr.Invalid("prompt", "prompt is required")
	}
	switch {
	case p.kind == Rerank && !p.sawPair:
		return apierr.Invalid("documents", "documents is required")
	case p.kind == Score && !p.sawPair:
		return apierr.Invalid("text_2", "text_2 (or documents) is required")
	case p.kind == Messages && p.req.MaxTokens == 0:
		return apierr.Invalid("max_tokens", "max_tokens is required")
	}
	return nil
}

func (p *parser) topField(key []byte) error {
	s := &p.s
	switch string(key) {
	case "model":
		if s.peek() == '"' {
			start := s.pos
			v, err := p.stringField("model")
			p.req.Model, p.req.modelAt = v, [2]int{start, s.pos}
			return err
		}
		v, err := p.stringField("model")
		p.req.Model = v
		return err
	case "messages":
		if p.kind != Chat && !p.kind.anthropic() && p.kind != Tokenize {
			return s.skip()
		}
		if p.sawPrompt {
			return apierr.Invalid("messages", "messages is given twice")
		}
		p.sawPrompt = true
		return p.messages()
	case "prompt":
		if p.kind != Completion && p.kind != Tokenize {
			return s.skip()
		}
		if p.sawPrompt {
			return apierr.Invalid("prompt", "prompt is given twice")
		}
		p.sawPrompt = true
		return p.prompt("prompt")
	case "input":
		if p.kind != Responses && p.kind != Embeddings {
			return s.skip()
		}
		if p.sawPrompt {
			return apierr.Invalid("input", "input is given twice")
		}
		p.sawPrompt = true
		if p.kind == Embeddings {
			return p.prompt("input")
		}
		return p.input()
	case "system":
		if !p.kind.anthropic() {
			return s.skip()
		}
		return p.system()
	case "instructions":
		if p.kind != Responses {
			return s.skip()
		}
		if p.sawInstructions {
			return apierr.Invalid("instructions", "instructions is given twice")
		}
		p.sawInstructions = true
		v, err := p.stringField("instructions")
		if err != nil || v == "" {
			return err
		}
		p.systemFirst([]byte(v))
		return nil
	case "tools":
		if p.kind != Responses && !p.kind.anthropic() {
			return s.skip()
		}
		if p.sawTools {
			return apierr.Invalid("tools", "tools is given twice")
		}
		p.sawTools = true
		if null, err := s.null(); null || err != nil {
			return err
		}
		if s.peek() != '[' {
			return apierr.Invalid("tools", "tools must be an array, found %s", s.kind())
		}
		raw, err := s.rawValue()
		p.front = append(append(p.front, raw...), unitSep, 't', 'o', 'o', 'l', 's', unitSep, unitSep, unitSep, recordSep)
		return err
	case "previous_response_id":
		if p.kind != Responses {
			return s.skip()
		}
		if s.peek() != '"' {
			// null (the last key wins, as in the engines' JSON), or the error
			p.req.PreviousResponse, p.req.previousAt = "", [2]int{}
			_, err := p.stringField("previous_response_id")
			return err
		}
		start := s.pos
		v, err := p.stringField("previous_response_id")
		if err == nil && v == "" {
			return apierr.Invalid("previous_response_id", "previous_response_id must not be empty")
		}
		p.req.PreviousResponse, p.req.previousAt = v, [2]int{start, s.pos}
		return err
	case "prompt_cache_key":
		v, err := p.stringField("prompt_cache_key")
		if v != "" {
			p.req.Session, p.req.Affinity, p.req.cacheKey = v, v, true
		}
		return err
	case "session_id":
		// vLLM's body session key: affinity as the session header, below
		// prompt_cache_key.
		v, err := p.stringField("session_id")
		if v != "" && !p.req.cacheKey {
			p.req.Session, p.req.Affinity, p.req.sessionKey = v, v, true
		}
		return err
	case "store":
		v, err := p.boolField("store")
		p.req.Store = v
		return err
	case "background":
		v, err := p.boolField("background")
		p.req.Background = v
		return err
	case "max_output_tokens":
		if p.kind != Responses {
			return s.skip()
		}
		return p.maxTokens("max_output_tokens")
	case "max_tokens", "max_completion_tokens":
		return p.maxTokens(string(key))
	case "stream":
		v, err := p.boolField("stream")
		p.req.Stream = v
		return err
	case "stream_options":
		return p.streamOptions()
	case "user":
		v, err := p.stringField("user")
		if v != "" && !p.req.cacheKey && !p.req.sessionKey {
			p.req.Session = v
		}
		return err
	case "metadata":
		return p.metadata()
	case "query", "text_1", "queries", "data_1", "documents", "text_2", "items", "data_2", "tokens", "encoding_format", "dimensions":
		return p.poolingField(string(key))
	case "priority":
		if null, err := s.null(); null || err != nil {
			return err
		}
		n, ok := s.integer()
		if !ok {
			return apierr.Invalid("priority", "priority must be an integer")
		}
		p.req.Priority = n
		return nil
	default:
		return s.skip()
	}
}

func (p *parser) stringField(param string) (string, error) {
	s := &p.s
	if null, err := s.null(); null || err != nil {
		return "", err
	}
	if s.peek() != '"' {
		return "", apierr.Invalid(param, "%s must be a string, found %s", param, s.kind())
	}
	return s.str()
}

// messageString reads a string field of messages[i]; the parameter name is
// only built when there is an error to report.
func (p *parser) messageString(i int, field string) (string, error) {
	s := &p.s
	if null, err := s.null(); null || err != nil {
		return "", err
	}
	if s.peek() != '"' {
		return "", apierr.Invalid(fmt.Sprintf("%s[%d].%s", p.list(), i, field), "%s must be a string, found %s", field, s.kind())
	}
	return s.str()
}

func (p *parser) boolField(param string) (bool, error) {
	s := &p.s
	if null, err := s.null(); null || err != nil {
		return false, err
	}
	v, ok := s.boolean()
	if !ok {
		return false, apierr.Invalid(param, "%s must be a boolean", param)
	}
	return v, nil
}

func (p *parser) maxTokens(param string) error {
	s := &p.s
	if null, err := s.null(); null || err != nil {
		return err
	}
	if s.kind() != "number" {
		return apierr.Invalid(param, "%s must be an integer, found %s", param, s.kind())
	}
	n, ok := s.integer()
	if !ok || n < 1 {
		return apierr.Invalid(param, "%s must be a positive integer", param)
	}
	p.req.MaxTokens = n
	return nil
}

func (p *parser) streamOptions() error {
	s := &p.s
	if null, err := s.null(); null || err != nil {
		return err
	}
	if s.peek() != '{' {
		return apierr.Invalid("stream_options", "stream_options must be an object")
	}
	return s.object(func(key []byte) error {
		if string(key) != "include_usage" {
			return s.skip()
		}
		v, err := p.boolField("stream_options.include_usage")
		p.req.IncludeUsage = v
		return err
	})
}

// metadata reads OpenAI's string-to-string metadata map: data_residency
// names the jurisdiction, session_id a session key, priority the class
// (critical, standard, sheddable) and wait ("true") asks to be held
// rather than refused under overload.
func (p *parser) metadata() error {
	s := &p.s
	if null, err := s.null(); null || err != nil {
		return err
	}
	if s.peek() != '{' {
		return apierr.Invalid("metadata", "metadata must be an object")
	}
	return s.object(func(key []byte) error {
		switch string(key) {
		case "data_residency":
			v, err := p.stringField("metadata.data_residency")
			p.req.Residency = strings.ToLower(strings.TrimSpace(v))
			return err
		case "session_id", "user_id": // user_id: Anthropic's metadata
			v, err := p.stringField("metadata." + string(key))
			if p.req.Session == "" {
				p.req.Session = v
			}
			return err
		case "priority":
			v, err := p.stringField("metadata.priority")
			if err != nil {
				return err
			}
			c, err := ParseClass(v)
			if err != nil {
				e := err.(*apierr.Error)
				e.Param = "metadata.priority"
				return e
			}
			p.req.Class, p.req.classSet = c, true
			return nil
		case "wait":
			v, err := p.stringField("metadata.wait")
			if err != nil {
				return err
			}
			w, err := parseWait(v)
			if err != nil {
				return apierr.Invalid("metadata.wait", "%v", err)
			}
			p.req.Wait = w
			return nil
		default:
			return s.skip()
		}
	})
}

// roles are the message roles the API knows.
var roles = []string{"system", "developer", "user", "assistant", "tool", "function"}

// role reads messages[i].role, returning one of roles (no allocation).
func (p *parser) role(i int) (string, error) {
	s := &p.s
	param := func() string { return fmt.Sprintf("%s[%d].role", p.list(), i) }
	if s.peek() != '"' {
		return "", apierr.Invalid(param(), "role must be a string, found %s", s.kind())
	}
	raw, escaped, err := s.rawString()
	if err != nil {
		return "", err
	}
	if escaped {
		if raw, err = unescape(nil, raw); err != nil {
			return "", s.fail("%v", err)
		}
	}
	for _, r := range roles {
		if string(raw) == r {
			return r, nil
		}
	}
	if len(raw) == 0 {
		return "", apierr.Invalid(param(), "role is required")
	}
	return "", apierr.Invalid(param(), "unknown role %q", raw)
}

func (p *parser) messages() error {
	s := &p.s
	if s.peek() != '[' {
		return apierr.Invalid("messages", "messages must be an array, found %s", s.kind())
	}
	count := 0
	err := s.array(func(i int) error {
		count++
		return p.message(i)
	})
	if err != nil {
		return err
	}
	if count == 0 {
		return apierr.Invalid("messages", "messages must not be empty")
	}
	return nil
}

// message renders one chat message. Content is decoded straight into the
// rendering as it is met; the short fields are appended after it, so the
// message's key order in the JSON does not matter.
func (p *parser) message(i int) error {
	s := &p.s
	if s.peek() != '{' {
		return apierr.Invalid(fmt.Sprintf("%s[%d]", p.list(), i), "each message must be an object, found %s", s.kind())
	}
	var role, name, toolCallID string
	var toolCalls []byte
	sawContent := false
	err := s.object(func(key []byte) error {
		var err error
		switch string(key) {
		case "role":
			role, err = p.role(i)
		case "name":
			name, err = p.messageString(i, "name")
		case "tool_call_id":
			toolCallID, err = p.messageString(i, "tool_call_id")
		case "tool_calls", "function_call":
			toolCalls, err = s.rawValue()
		case "content":
			if sawContent {
				return apierr.Invalid(fmt.Sprintf("%s[%d].content", p.list(), i), "content is given twice")
			}
			sawContent = true
			err = p.content(i)
		default:
			err = s.skip()
		}
		return err
	})
	if err != nil {
		return err
	}
	if role == "" {
		return apierr.Invalid(fmt.Sprintf("%s[%d].role", p.list(), i), "role is required")
	}
	if p.kind.anthropic() && role != "user" && role != "assistant" {
		return apierr.Invalid(fmt.Sprintf("%s[%d].role", p.list(), i), "role must be user or assistant (the system prompt is the top-level system field), not %q", role)
	}
	r := append(p.s.out, unitSep)
	r = append(r, role...)
	r = append(r, unitSep)
	r = append(r, name...)
	r = append(r, unitSep)
	r = append(r, toolCallID...)
	r = append(r, unitSep)
	r = append(r, toolCalls...)
	p.s.out = append(r, recordSep)
	return nil
}

// content renders a message's content: a string, null, or an array of parts
// (text parts as their text, images and audio as their URL or data).
func (p *parser) content(i int) error {
	s := &p.s
	switch s.peek() {
	case '"':
		var err error
		err = s.appendString()
		return err
	case 'n':
		return s.literal("null")
	case '[':
		return s.array(func(j int) error {
			if j > 0 {
				p.s.out = append(p.s.out, '\n')
			}
			return p.contentPart(i, j)
		})
	default:
		return apierr.Invalid(fmt.Sprintf("%s[%d].content", p.list(), i), "content must be a string, an array of parts or null, found %s", s.kind())
	}
}

func (p *parser) contentPart(i, j int) error {
	s := &p.s
	param := func(field string) string { return fmt.Sprintf("%s[%d].content[%d]%s", p.list(), i, j, field) }
	if s.peek() != '{' {
		return apierr.Invalid(param(""), "each content part must be an object, found %s", s.kind())
	}
	sawType := false
	err := s.object(func(key []byte) error {
		switch string(key) {
		case "type":
			if s.peek() != '"' {
				return apierr.Invalid(param(".type"), "type must be a string, found %s", s.kind())
			}
			raw, _, err := s.rawString()
			sawType = len(raw) > 0
			return err
		case "text", "refusal":
			if s.peek() != '"' {
				return apierr.Invalid(param("."+string(key)), "%s must be a string, found %s", key, s.kind())
			}
			var err error
			err = s.appendString()
			return err
		case "image_url", "input_audio", "file", "video_url", "file_id", "file_data", "file_url":
			// The media reference (URL or inline data) stands for the media:
			// the same image gives the same blocks.
			raw, err := s.rawValue()
			p.s.out = append(p.s.out, raw...)
			return err
		default:
			if p.kind.anthropic() {
				return p.anthropicBlockField(key, param)
			}
			return s.skip()
		}
	})
	if err != nil {
		return err
	}
	if !sawType {
		return apierr.Invalid(param(".type"), "content part type is required")
	}
	return nil
}

// input renders a Responses input: a string (one user message, rendered
// as chat renders it) or an array of items. A message item renders as a
// chat message with the same role and content; other items (a function
// call, its output, reasoning, …) as their text and their type, so that
// a conversation resent whole keeps its blocks.
func (p *parser) input() error {
	s := &p.s
	switch s.peek() {
	case '"':
		if err := s.appendString(); err != nil {
			return err
		}
		p.s.out = append(p.s.out, unitSep, 'u', 's', 'e', 'r', unitSep, unitSep, unitSep, recordSep)
		return nil
	case '[':
		count := 0
		err := s.array(func(i int) error {
			count++
			return p.item(i)
		})
		if err == nil && count == 0 {
			return apierr.Invalid("input", "input must not be empty")
		}
		return err
	default:
		return apierr.Invalid("input", "input must be a string or an array of items, found %s", s.kind())
	}
}

// item renders one Responses input item.
func (p *parser) item(i int) error {
	s := &p.s
	param := func(field string) string { return fmt.Sprintf("input[%d]%s", i, field) }
	if s.peek() != '{' {
		return apierr.Invalid(param(""), "each input item must be an object, found %s", s.kind())
	}
	var typ, role, name, callID string
	sawContent := false
	err := s.object(func(key []byte) error {
		var err error
		switch string(key) {
		case "type":
			typ, err = p.stringField(param(".type"))
		case "role":
			role, err = p.role(i)
		case "name":
			name, err = p.stringField(param(".name"))
		case "call_id":
			callID, err = p.stringField(param(".call_id"))
		case "content":
			if sawContent {
				return apierr.Invalid(param(".content"), "content is given twice")
			}
			sawContent = true
			err = p.content(i)
		case "arguments", "output", "summary", "encrypted_content", "action", "result":
			if s.peek() == '"' {
				return s.appendString()
			}
			raw, err := s.rawValue()
			p.s.out = append(p.s.out, raw...)
			return err
		default:
			err = s.skip() // ids, status: not part of the prompt
		}
		return err
	})
	if err != nil {
		return err
	}
	switch {
	case typ == "" && role == "":
		return apierr.Invalid(param(".type"), "an input item needs a type, or a role for a message")
	case typ == "message" || typ == "":
		if role == "" {
			return apierr.Invalid(param(".role"), "role is required")
		}
		typ = role
	case typ == "function_call_output" && callID == "":
		return apierr.Invalid(param(".call_id"), "call_id is required")
	}
	switch typ {
	case "assistant", "function_call", "reasoning": // a model's output, sent back
		p.req.Resent = true
	}
	r := append(p.s.out, unitSep)
	r = append(r, typ...)
	r = append(r, unitSep)
	r = append(r, name...)
	r = append(r, unitSep)
	r = append(r, callID...)
	p.s.out = append(r, unitSep, recordSep)
	return nil
}

// prompt renders a completions prompt: a string, an array of strings, an
// array of token ids, or an array of such arrays.
func (p *parser) prompt(param string) error {
	s := &p.s
	switch s.peek() {
	case '"':
		var err error
		err = s.appendString()
		return err
	case '[':
		empty := true
		err := s.array(func(i int) error {
			empty = false
			switch s.peek() {
			case '"':
				if i > 0 {
					p.s.out = append(p.s.out, recordSep)
				}
				var err error
				err = s.appendString()
				return err
			case '[':
				return s.array(func(int) error { return p.tokenID(fmt.Sprintf("%s[%d]", param, i)) })
			default:
				return p.tokenID(param)
			}
		})
		if err == nil && empty {
			return apierr.Invalid(param, "%s must not be empty", param)
		}
		return err
	default:
		return apierr.Invalid(param, "%s must be a string or an array, found %s", param, s.kind())
	}
}

// tokenID renders one integer token id; it counts as exactly one token.
func (p *parser) tokenID(param string) error {
	s := &p.s
	if s.kind() != "number" {
		return apierr.Invalid(param, "token ids must be integers, found %s", s.kind())
	}
	raw, err := s.number()
	if err != nil {
		return err
	}
	for _, c := range raw {
		if c < '0' || c > '9' {
			return apierr.Invalid(param, "token ids must be non-negative integers")
		}
	}
	before := len(p.s.out)
	p.s.out = append(append(p.s.out, raw...), ',')
	p.tokenBytes += len(p.s.out) - before
	p.promptTokens++
	return nil
}

// ApplyResidencyHeader merges an X-Data-Residency header value into the
// request. A header that contradicts the body's metadata.data_residency is
// a 400: the client asked for two jurisdictions.
func (r *Request) ApplyResidencyHeader(value string) error {
	value = strings.ToLower(strings.TrimSpace(value))
	if value == "" {
		return nil
	}
	if r.Residency != "" && r.Residency != value {
		return apierr.Invalid("metadata.data_residency", "X-Data-Residency %q contradicts metadata.data_residency %q", value, r.Residency)
	}
	r.Residency = value
	return nil
}

// parseWait reads a wait flag: true/false, 1/0, yes/no; "" is false.
func parseWait(v string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "false", "0", "no":
		return false, nil
	case "true", "1", "yes":
		return true, nil
	}
	return false, fmt.Errorf("wait must be true or false, not %q", v)
}

// ApplyWaitHeader merges an X-SkyWalker-Wait header into the request: a
// client that asks to wait anywhere is held rather than refused.
func (r *Request) ApplyWaitHeader(value string) error {
	w, err := parseWait(value)
	if err != nil {
		return apierr.Invalid("X-SkyWalker-Wait", "%v", err)
	}
	r.Wait = r.Wait || w
	return nil
}
