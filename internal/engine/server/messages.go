package server

import (
	"encoding/json"
	"fmt"
	"strconv"

	"skywalker/internal/engine"
)

// Anthropic's Messages API, as vLLM and SGLang serve it: a stream of
// named events — message_start (with the input and cache-read tokens),
// content_block_start, ping, then one content_block_delta per token,
// content_block_stop, message_delta (stop reason, output tokens) and
// message_stop — or one message object.

// stopReason is Anthropic's name for an OpenAI finish reason.
func stopReason(finish string) string {
	if finish == "length" {
		return "max_tokens"
	}
	return "end_turn"
}

type messageUsage struct {
	InputTokens              int `json:"input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
}

func appendEvent(buf []byte, name string, data any) []byte {
	b, _ := json.Marshal(data) // maps of strings and numbers always marshal
	buf = append(buf, "event: "...)
	buf = append(buf, name...)
	buf = append(buf, "\ndata: "...)
	buf = append(buf, b...)
	return append(buf, "\n\n"...)
}

// appendMessageStart opens a Messages stream, with the first token.
func (o *output) appendMessageStart(buf []byte, seq *engine.Sequence) []byte {
	u := messageUsage{InputTokens: seq.PromptTokens - seq.CachedTokens, OutputTokens: 1, CacheReadInputTokens: seq.CachedTokens}
	buf = appendEvent(buf, "message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": o.id, "type": "message", "role": "assistant", "model": o.model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": u}})
	buf = appendEvent(buf, "content_block_start", map[string]any{"type": "content_block_start", "index": 0,
		"content_block": map[string]any{"type": "text", "text": ""}})
	return append(buf, "event: ping\ndata: {\"type\": \"ping\"}\n\n"...)
}

func (o *output) appendTextDelta(buf []byte, i int) []byte {
	buf = append(buf, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":"...)
	buf = strconv.AppendQuote(buf, o.word(i))
	return append(buf, "}}\n\n"...)
}

func (o *output) appendMessageEnd(buf []byte, finish string, generated int) []byte {
	buf = append(buf, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"...)
	buf = fmt.Appendf(buf, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":%q,\"stop_sequence\":null},\"usage\":{\"output_tokens\":%d}}\n\n",
		stopReason(finish), generated)
	return append(buf, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"...)
}

// wholeMessage is a non-streaming Messages response.
func (o *output) wholeMessage(text, finish string, prompt, generated, cached int) []byte {
	b, _ := json.Marshal(map[string]any{"id": o.id, "type": "message", "role": "assistant", "model": o.model,
		"content":     []map[string]any{{"type": "text", "text": text}},
		"stop_reason": stopReason(finish), "stop_sequence": nil,
		"usage": messageUsage{InputTokens: prompt - cached, OutputTokens: generated, CacheReadInputTokens: cached}})
	return b
}
