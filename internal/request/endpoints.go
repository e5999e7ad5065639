package request

import (
	"fmt"
	"slices"
	"strings"

	"skywalker/internal/apierr"
)

// The bodies of the endpoints beyond OpenAI's generation APIs: Anthropic's
// Messages (system and content blocks; its messages are parsed by the chat
// parser), embeddings, rerank and score, tokenize and detokenize. Each
// renders into the same canonical prompt as chat, so a conversation sent
// as Messages hashes into blocks exactly as it grows.

// system renders Anthropic's top-level system prompt (a string or an
// array of text blocks) as the engines render it: a system message ahead
// of the messages, wherever the JSON put it.
func (p *parser) system() error {
	s := &p.s
	if p.sawInstructions {
		return apierr.Invalid("system", "system is given twice")
	}
	p.sawInstructions = true
	var text []byte
	switch s.peek() {
	case 'n':
		return s.literal("null")
	case '"':
		v, err := s.str()
		if err != nil {
			return err
		}
		text = []byte(v)
	case '[':
		err := s.array(func(j int) error {
			param := fmt.Sprintf("system[%d]", j)
			if s.peek() != '{' {
				return apierr.Invalid(param, "each system block must be an object, found %s", s.kind())
			}
			return s.object(func(key []byte) error {
				if string(key) != "text" {
					return s.skip() // type, cache_control, citations
				}
				v, err := p.stringField(param + ".text")
				if j > 0 {
					text = append(text, '\n')
				}
				text = append(text, v...)
				return err
			})
		})
		if err != nil {
			return err
		}
	default:
		return apierr.Invalid("system", "system must be a string or an array of text blocks, found %s", s.kind())
	}
	if len(text) > 0 {
		p.systemFirst(text)
	}
	return nil
}

// systemFirst renders text (a Responses body's instructions, a Messages
// body's system prompt) as the engines render it: a system message ahead
// of everything else.
func (p *parser) systemFirst(text []byte) {
	instr := append(text, unitSep)
	instr = append(instr, "system"...)
	instr = append(instr, unitSep, unitSep, unitSep, recordSep)
	p.front = append(instr, p.front...)
}

// anthropicBlockField renders a field of an Anthropic content block that
// chat's parts do not have: an image's or document's source, a tool_use's
// name and input, a tool_result's tool_use_id and content (a string or
// blocks), thinking. Ids, signatures and cache_control are not the prompt.
func (p *parser) anthropicBlockField(key []byte, param func(string) string) error {
	s := &p.s
	switch string(key) {
	case "source", "input", "data":
		raw, err := s.rawValue()
		p.s.out = append(p.s.out, raw...)
		return err
	case "name", "tool_use_id", "thinking":
		if s.peek() != '"' {
			return apierr.Invalid(param("."+string(key)), "%s must be a string, found %s", key, s.kind())
		}
		return s.appendString()
	case "content": // a tool_result's
		switch s.peek() {
		case '"':
			return s.appendString()
		case '[':
			return s.array(func(k int) error {
				if s.peek() != '{' {
					return apierr.Invalid(param(fmt.Sprintf(".content[%d]", k)), "each block must be an object, found %s", s.kind())
				}
				return s.object(func(key []byte) error {
					switch string(key) {
					case "text":
						if s.peek() != '"' {
							return apierr.Invalid(param(fmt.Sprintf(".content[%d].text", k)), "text must be a string, found %s", s.kind())
						}
						return s.appendString()
					case "source":
						raw, err := s.rawValue()
						p.s.out = append(p.s.out, raw...)
						return err
					}
					return s.skip()
				})
			})
		}
		return apierr.Invalid(param(".content"), "a tool_result's content must be a string or an array of blocks, found %s", s.kind())
	}
	return s.skip()
}

// poolingField reads a field of an embeddings, rerank, score or
// detokenize body: rerank's query and documents (each a string, or an
// object such as {"text": ...} taken as written), score's two sides
// (text_1 and text_2, or queries and documents: a string or an array),
// detokenize's tokens, and embeddings' encoding_format and dimensions,
// checked here so that a bad one is the proxy's 400, not a replica's.
func (p *parser) poolingField(key string) error {
	s := &p.s
	switch {
	case p.kind == Embeddings && key == "encoding_format":
		v, err := p.stringField(key)
		if err == nil && v != "" && v != "float" && v != "base64" {
			return apierr.Invalid(key, "encoding_format must be float or base64, not %q", v)
		}
		return err
	case p.kind == Embeddings && key == "dimensions":
		if null, err := s.null(); null || err != nil {
			return err
		}
		if n, ok := s.integer(); !ok || n < 1 {
			return apierr.Invalid(key, "dimensions must be a positive integer")
		}
		return nil
	case p.kind == Detokenize && key == "tokens":
		if p.sawPrompt {
			return apierr.Invalid(key, "tokens is given twice")
		}
		p.sawPrompt = true
		if s.peek() != '[' {
			return apierr.Invalid(key, "tokens must be an array of token ids, found %s", s.kind())
		}
		return s.array(func(int) error { return p.tokenID(key) })
	case p.kind == Rerank && key == "query", p.kind == Score && (key == "text_1" || key == "queries" || key == "data_1"):
		if p.sawPrompt {
			return apierr.Invalid(key, "the query is given twice")
		}
		p.sawPrompt = true
		return p.scoreSide(key)
	case p.kind == Rerank && key == "documents", p.kind == Score && (key == "text_2" || key == "documents" || key == "items" || key == "data_2"):
		if p.sawPair {
			return apierr.Invalid(key, "the documents are given twice")
		}
		p.sawPair = true
		return p.scoreSide(key)
	}
	return s.skip()
}

// scoreSide renders one side of a rerank or score body: a string, an
// object (a multimodal item, as written), or a non-empty array of them.
func (p *parser) scoreSide(param string) error {
	s := &p.s
	item := func(param string) error {
		switch s.peek() {
		case '"':
			return s.appendString()
		case '{':
			raw, err := s.rawValue()
			p.s.out = append(p.s.out, raw...)
			return err
		}
		return apierr.Invalid(param, "%s must be a string or an object, found %s", param, s.kind())
	}
	defer func() { p.s.out = append(p.s.out, recordSep) }()
	if s.peek() != '[' {
		return item(param)
	}
	count := 0
	err := s.array(func(i int) error {
		count++
		if i > 0 {
			p.s.out = append(p.s.out, unitSep)
		}
		return item(fmt.Sprintf("%s[%d]", param, i))
	})
	if err == nil && count == 0 {
		return apierr.Invalid(param, "%s must not be empty", param)
	}
	return err
}

// Endpoint is one inference endpoint: a POST path and the kind of body it
// takes.
type Endpoint struct {
	Path string
	Kind Kind
}

// Endpoints are the inference endpoints the proxy routes and the
// simulated engine serves, at the paths vLLM, OpenAI and Anthropic use.
var Endpoints = []Endpoint{
	{"/v1/chat/completions", Chat}, {"/v1/completions", Completion}, {"/v1/responses", Responses},
	{"/v1/messages", Messages}, {"/v1/messages/count_tokens", CountTokens},
	{"/v1/embeddings", Embeddings},
	{"/v1/rerank", Rerank}, {"/rerank", Rerank}, {"/v2/rerank", Rerank},
	{"/v1/score", Score}, {"/score", Score},
	{"/tokenize", Tokenize}, {"/detokenize", Detokenize},
}

// Endpoint groups, as vLLM's runners serve them: a generative model's
// endpoints and a pooling model's (both tokenize).
var (
	GenerateKinds = []Kind{Chat, Completion, Responses, Messages, CountTokens, Tokenize, Detokenize}
	PoolingKinds  = []Kind{Embeddings, Rerank, Score, Tokenize, Detokenize}
)

// ParseKinds reads a "+"-separated list of endpoint kinds (chat,
// completion, responses, messages, count_tokens, embeddings, rerank,
// score, tokenize, detokenize) and groups (generate, pooling), e.g.
// "pooling" or "chat+embeddings".
func ParseKinds(list string) ([]Kind, error) {
	var out []Kind
	add := func(ks ...Kind) {
		for _, k := range ks {
			if !slices.Contains(out, k) {
				out = append(out, k)
			}
		}
	}
	for name := range strings.SplitSeq(list, "+") {
		switch name = strings.TrimSpace(name); name {
		case "generate":
			add(GenerateKinds...)
		case "pooling":
			add(PoolingKinds...)
		default:
			i := slices.Index(kindNames[:], name)
			if i < 0 {
				return nil, fmt.Errorf("unknown endpoint %q: want generate, pooling or one of %s", name, strings.Join(kindNames[:], ", "))
			}
			add(Kind(i))
		}
	}
	slices.Sort(out)
	return out, nil
}
