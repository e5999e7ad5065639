package server

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"unicode"

	"github.com/cespare/xxhash/v2"

	"skywalker/internal/apierr"
	"skywalker/internal/request"
)

// The endpoints that generate nothing, as vLLM serves them: embeddings,
// rerank and score run a prefill on the engine (one output token's worth
// of work) and answer from the input alone — unit-norm vectors hashed from
// the input's tokens, scores from the words query and document share — and
// tokenize, detokenize and count_tokens answer at once from the tokenizer.
// The tokenizer is the simulator's: a token is up to 4 bytes of the text
// (request.BytesPerToken), its id those bytes little-endian, so detokenize
// gives back exactly what tokenize took.

// DefaultEmbeddingDims is the length of an embedding when the request sets
// no dimensions (a small embedding model's).
const DefaultEmbeddingDims = 384

// tokenize cuts text into the simulator's tokens.
func tokenize(text string) []int {
	ids := make([]int, 0, (len(text)+request.BytesPerToken-1)/request.BytesPerToken)
	for len(text) > 0 {
		n := min(len(text), request.BytesPerToken)
		var b [4]byte
		copy(b[:], text[:n])
		ids = append(ids, int(binary.LittleEndian.Uint32(b[:])))
		text = text[n:]
	}
	return ids
}

// detokenize is tokenize's inverse.
func detokenize(ids []int) string {
	var out []byte
	for _, id := range ids {
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], uint32(id))
		out = append(out, bytes.TrimRight(b[:], "\x00")...)
	}
	return string(out)
}

// embed is a deterministic unit vector of dims from ids: each token adds
// a pseudo-random direction hashed from its id.
func embed(ids []int, dims int) []float32 {
	sum := make([]float64, dims)
	var key [16]byte
	for _, id := range ids {
		binary.LittleEndian.PutUint64(key[:8], uint64(id))
		for d := range dims {
			binary.LittleEndian.PutUint64(key[8:], uint64(d))
			sum[d] += float64(xxhash.Sum64(key[:]))/math.MaxUint64*2 - 1
		}
	}
	var norm float64
	for _, v := range sum {
		norm += v * v
	}
	out := make([]float32, dims)
	if norm == 0 {
		out[0] = 1
		return out
	}
	norm = math.Sqrt(norm)
	for d, v := range sum {
		out[d] = float32(v / norm)
	}
	return out
}

// overlap is the share of the query's words the document has.
func overlap(query, doc string) float64 {
	words := func(s string) []string {
		return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	}
	q, d := words(query), words(doc)
	if len(q) == 0 {
		return 0
	}
	shared := 0
	for _, w := range q {
		if slices.Contains(d, w) {
			shared++
		}
	}
	return float64(shared) / float64(len(q))
}

// texts reads a string, an array of strings, or (for embeddings) token
// ids or arrays of them; each element is one input, as ids.
func texts(raw json.RawMessage) ([][]int, []string, error) {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return [][]int{tokenize(one)}, []string{one}, nil
	}
	var many []json.RawMessage
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, nil, err
	}
	var ids []int
	if json.Unmarshal(raw, &ids) == nil {
		return [][]int{ids}, []string{detokenize(ids)}, nil
	}
	var outIDs [][]int
	var outText []string
	for _, m := range many {
		var s string
		var doc struct{ Text string }
		switch {
		case json.Unmarshal(m, &s) == nil:
		case json.Unmarshal(m, &ids) == nil:
			s = detokenize(ids)
		case json.Unmarshal(m, &doc) == nil:
			s = doc.Text
		default:
			return nil, nil, fmt.Errorf("an input must be a string, token ids or an object with text")
		}
		outIDs, outText = append(outIDs, tokenize(s)), append(outText, s)
	}
	return outIDs, outText, nil
}

// pooled parses and admits a pooling request, runs its prefill on the
// engine, and returns its body and the model it was served as; false when
// it answered the request already.
func (s *Server) pooled(w http.ResponseWriter, r *http.Request, kind request.Kind) ([]byte, *request.Request, string, bool) {
	req, body, err := request.ParseFrom(kind, r.Body, r.ContentLength, nil, s.cfg.Parse)
	if err != nil {
		apierr.Write(w, err)
		return nil, nil, "", false
	}
	served, stallAt, ok := s.accept(w, r, req, apierr.OpenAI)
	if !ok {
		return nil, nil, "", false
	}
	a, err := s.start(req, nil, req.PromptTokens)
	if err != nil {
		apierr.Write(w, apierr.Invalid("input", "%v", err))
		return nil, nil, "", false
	}
	if !s.awaitDone(r, a.st, stallAt) {
		return nil, nil, "", false
	}
	s.metrics.finished("stop", 1)
	return body, req, served, true
}

func writeBody(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// embeddings serves /v1/embeddings.
func (s *Server) embeddings(w http.ResponseWriter, r *http.Request) {
	body, req, served, ok := s.pooled(w, r, request.Embeddings)
	if !ok {
		return
	}
	var in struct {
		Input          json.RawMessage `json:"input"`
		EncodingFormat string          `json:"encoding_format"`
		Dimensions     int             `json:"dimensions"`
	}
	_ = json.Unmarshal(body, &in) // the parser accepted it
	inputs, _, err := texts(in.Input)
	if err != nil {
		apierr.Write(w, apierr.Invalid("input", "%v", err))
		return
	}
	dims := DefaultEmbeddingDims
	if in.Dimensions > 0 {
		dims = in.Dimensions
	}
	data := make([]map[string]any, len(inputs))
	tokens := 0
	for i, ids := range inputs {
		tokens += len(ids)
		vec := embed(ids, dims)
		var v any = vec
		if in.EncodingFormat == "base64" {
			raw := make([]byte, 4*len(vec))
			for j, f := range vec {
				binary.LittleEndian.PutUint32(raw[4*j:], math.Float32bits(f))
			}
			v = base64.StdEncoding.EncodeToString(raw)
		}
		data[i] = map[string]any{"index": i, "object": "embedding", "embedding": v}
	}
	writeBody(w, map[string]any{"id": fmt.Sprintf("embd-%x", s.nextID.Add(1)), "object": "list", "created": s.clock.start.Unix(),
		"model": served, "data": data, "usage": map[string]int{"prompt_tokens": max(tokens, req.PromptTokens), "total_tokens": max(tokens, req.PromptTokens)}})
}

// scorePairs reads a rerank or score body's two sides.
func scorePairs(body []byte, rerank bool) (query []string, docs []string, topN int, err error) {
	var in map[string]json.RawMessage
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, nil, 0, err
	}
	first := func(keys ...string) json.RawMessage {
		for _, k := range keys {
			if v, ok := in[k]; ok {
				return v
			}
		}
		return nil
	}
	qKeys, dKeys := []string{"text_1", "queries", "data_1"}, []string{"text_2", "documents", "items", "data_2"}
	if rerank {
		qKeys, dKeys = []string{"query"}, []string{"documents"}
		_ = json.Unmarshal(in["top_n"], &topN)
	}
	if _, query, err = texts(first(qKeys...)); err != nil {
		return nil, nil, 0, err
	}
	if _, docs, err = texts(first(dKeys...)); err != nil {
		return nil, nil, 0, err
	}
	return query, docs, topN, nil
}

// rerank serves /rerank, /v1/rerank and /v2/rerank: the documents by
// relevance to the query, the most relevant first, top_n of them.
func (s *Server) rerank(w http.ResponseWriter, r *http.Request) {
	body, req, served, ok := s.pooled(w, r, request.Rerank)
	if !ok {
		return
	}
	query, docs, topN, err := scorePairs(body, true)
	if err != nil || len(query) != 1 {
		apierr.Write(w, apierr.Invalid("query", "query must be one string or object: %v", err))
		return
	}
	type result struct {
		Index    int               `json:"index"`
		Document map[string]string `json:"document"`
		Score    float64           `json:"relevance_score"`
	}
	results := make([]result, len(docs))
	for i, d := range docs {
		results[i] = result{Index: i, Document: map[string]string{"text": d}, Score: overlap(query[0], d)}
	}
	slices.SortStableFunc(results, func(a, b result) int { return cmp.Compare(b.Score, a.Score) })
	if topN > 0 && topN < len(results) {
		results = results[:topN]
	}
	writeBody(w, map[string]any{"id": fmt.Sprintf("rerank-%x", s.nextID.Add(1)), "model": served, "results": results,
		"usage": map[string]int{"total_tokens": req.PromptTokens}})
}

// score serves /score and /v1/score: one query against each document
// (1:N), or queries and documents pairwise (N:N).
func (s *Server) score(w http.ResponseWriter, r *http.Request) {
	body, req, served, ok := s.pooled(w, r, request.Score)
	if !ok {
		return
	}
	queries, docs, _, err := scorePairs(body, false)
	if err != nil || (len(queries) != 1 && len(queries) != len(docs)) {
		apierr.Write(w, apierr.Invalid("text_1", "text_1 must be one text, or as many texts as text_2 (%d): %v", len(docs), err))
		return
	}
	data := make([]map[string]any, len(docs))
	for i, d := range docs {
		q := queries[0]
		if len(queries) > 1 {
			q = queries[i]
		}
		data[i] = map[string]any{"index": i, "object": "score", "score": overlap(q, d)}
	}
	writeBody(w, map[string]any{"id": fmt.Sprintf("score-%x", s.nextID.Add(1)), "object": "list", "created": s.clock.start.Unix(),
		"model": served, "data": data, "usage": map[string]int{"prompt_tokens": req.PromptTokens, "total_tokens": req.PromptTokens}})
}

// tokenizer parses a tokenize, detokenize or count_tokens body and checks
// its model; false when it answered the request already.
func (s *Server) tokenizer(w http.ResponseWriter, r *http.Request, kind request.Kind) ([]byte, *request.Request, bool) {
	req, body, err := request.ParseFrom(kind, r.Body, r.ContentLength, nil, s.cfg.Parse)
	if err != nil {
		apierr.WriteAs(w, err, kind.Shape())
		return nil, nil, false
	}
	if _, ok := s.model(w, req, kind.Shape()); !ok {
		return nil, nil, false
	}
	return body, req, true
}

// tokenizeText serves /tokenize: a prompt, or chat messages' text.
func (s *Server) tokenizeText(w http.ResponseWriter, r *http.Request) {
	body, _, ok := s.tokenizer(w, r, request.Tokenize)
	if !ok {
		return
	}
	var in struct {
		Prompt   string `json:"prompt"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	_ = json.Unmarshal(body, &in)
	text := in.Prompt
	for _, m := range in.Messages {
		_, parts, _ := texts(m.Content)
		text += m.Role + ": " + strings.Join(parts, "\n") + "\n"
	}
	ids := tokenize(text)
	writeBody(w, map[string]any{"count": len(ids), "max_model_len": s.eng.Config().MaxModelLen, "tokens": ids, "token_strs": nil})
}

// detokenizeText serves /detokenize.
func (s *Server) detokenizeText(w http.ResponseWriter, r *http.Request) {
	body, _, ok := s.tokenizer(w, r, request.Detokenize)
	if !ok {
		return
	}
	var in struct {
		Tokens []int `json:"tokens"`
	}
	_ = json.Unmarshal(body, &in)
	writeBody(w, map[string]string{"prompt": detokenize(in.Tokens)})
}

// countTokens serves Anthropic's /v1/messages/count_tokens: the prompt
// tokens the request would be charged as input.
func (s *Server) countTokens(w http.ResponseWriter, r *http.Request) {
	_, req, ok := s.tokenizer(w, r, request.CountTokens)
	if !ok {
		return
	}
	writeBody(w, map[string]int{"input_tokens": req.PromptTokens})
}
