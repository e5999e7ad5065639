package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"skywalker/internal/engine/server"
)

// TestAnthropicClient drives the engine's Messages API with the official
// Anthropic Go SDK: a message, a stream (accumulated by the SDK, cache
// reads on the repeated prompt), count_tokens, and an unknown model.
func TestAnthropicClient(t *testing.T) {
	_, url := server.StartForTest(t, "llama3-8b-h100", server.Config{Model: "llama3-8b"})
	ctx := context.Background()
	client := anthropic.NewClient(anthropicoption.WithBaseURL(url), anthropicoption.WithAPIKey("unused"), anthropicoption.WithMaxRetries(0))
	system := strings.Repeat("You are a meticulous assistant for a cross-region load balancer. ", 40)
	params := anthropic.MessageNewParams{
		Model: "llama3-8b", MaxTokens: 8,
		System:   []anthropic.TextBlockParam{{Text: system}},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Where should this request go?"))},
	}
	msg, err := client.Messages.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.Content) != 1 || msg.Content[0].Text == "" || msg.Usage.OutputTokens != 8 || msg.StopReason != "max_tokens" {
		t.Fatalf("message %+v", msg)
	}
	stream := client.Messages.NewStreaming(ctx, params)
	var acc anthropic.Message
	deltas := 0
	for stream.Next() {
		ev := stream.Current()
		if ev.Type == "content_block_delta" {
			deltas++
		}
		if err := acc.Accumulate(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if deltas != 8 || acc.Usage.OutputTokens != 8 || len(acc.Content) != 1 || acc.Content[0].Text != msg.Content[0].Text {
		t.Errorf("stream: %d deltas, accumulated %+v", deltas, acc)
	}
	if acc.Usage.CacheReadInputTokens <= 0 {
		t.Errorf("the repeated prompt read %d cached tokens, want > 0", acc.Usage.CacheReadInputTokens)
	}
	count, err := client.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: "llama3-8b",
		System:   anthropic.MessageCountTokensParamsSystemUnion{OfString: anthropic.String(system)},
		Messages: params.Messages})
	if err != nil {
		t.Fatal(err)
	}
	if want := msg.Usage.InputTokens + msg.Usage.CacheReadInputTokens; count.InputTokens != want {
		t.Errorf("count_tokens %d, the message was charged %d", count.InputTokens, want)
	}
	params.Model = "other-model"
	_, err = client.Messages.New(ctx, params)
	var apiErr *anthropic.Error
	if !asError(err, &apiErr) || apiErr.StatusCode != 404 || !strings.Contains(apiErr.RawJSON(), `"not_found_error"`) {
		t.Errorf("unknown model: %v, want a 404 not_found_error", err)
	}
}

// TestEmbeddingsBothEncodings: the official OpenAI client gets the same
// unit vectors as floats and as base64, of the dimensions asked.
func TestEmbeddingsBothEncodings(t *testing.T) {
	_, url := server.StartForTest(t, "", server.Config{Model: "embedder"})
	ctx := context.Background()
	client := openai.NewClient(option.WithBaseURL(url+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	params := openai.EmbeddingNewParams{Model: "embedder",
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"the first text", "a second one"}}}
	floats, err := client.Embeddings.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	params.EncodingFormat = openai.EmbeddingNewParamsEncodingFormatBase64
	encoded, err := client.Embeddings.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if len(floats.Data) != 2 || len(encoded.Data) != 2 || floats.Usage.PromptTokens <= 0 {
		t.Fatalf("float %+v base64 %+v", floats, encoded)
	}
	for i := range floats.Data {
		f, b := floats.Data[i].Embedding, encoded.Data[i].Embedding
		if len(f) != server.DefaultEmbeddingDims || len(b) != len(f) {
			t.Fatalf("input %d: %d floats, %d decoded from base64", i, len(f), len(b))
		}
		var norm float64
		for j := range f {
			norm += f[j] * f[j]
			if math.Abs(f[j]-b[j]) > 1e-6 {
				t.Fatalf("input %d: float %v and base64 %v differ at %d", i, f[j], b[j], j)
			}
		}
		if math.Abs(norm-1) > 1e-4 {
			t.Errorf("input %d: norm² %v, want a unit vector", i, norm)
		}
	}
	params.Dimensions = openai.Int(16)
	short, err := client.Embeddings.New(ctx, params)
	if err != nil || len(short.Data[0].Embedding) != 16 {
		t.Errorf("dimensions 16: %v %+v", err, short)
	}
}

func post(t *testing.T, url string, body string, into any) int {
	t.Helper()
	resp, err := http.Post(url, "application/json", bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if into != nil {
		if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
			t.Fatalf("%s: %v", url, err)
		}
	}
	return resp.StatusCode
}

// TestRerankScoreTokenize: vLLM's shapes, at every path vLLM serves them.
func TestRerankScoreTokenize(t *testing.T) {
	_, url := server.StartForTest(t, "", server.Config{Model: "reranker"})
	for _, path := range []string{"/rerank", "/v1/rerank", "/v2/rerank"} {
		var out struct {
			Results []struct {
				Index    int
				Document struct{ Text string }
				Score    float64 `json:"relevance_score"`
			}
		}
		st := post(t, url+path, `{"model":"reranker","query":"capital of France","documents":["Brasilia is in Brazil","Paris is the capital of France","France"],"top_n":2}`, &out)
		if st != 200 || len(out.Results) != 2 || out.Results[0].Index != 1 || out.Results[0].Score <= out.Results[1].Score {
			t.Errorf("%s: %d %+v", path, st, out)
		}
	}
	for _, path := range []string{"/score", "/v1/score"} {
		var out struct {
			Data []struct {
				Index int
				Score float64
			}
		}
		st := post(t, url+path, `{"model":"reranker","text_1":"capital of France","text_2":["Brasilia","the capital of France is Paris"]}`, &out)
		if st != 200 || len(out.Data) != 2 || out.Data[1].Score != 1 || out.Data[0].Score != 0 {
			t.Errorf("%s: %d %+v", path, st, out)
		}
	}
	var tok struct {
		Count  int
		Tokens []int
	}
	if st := post(t, url+"/tokenize", `{"model":"reranker","prompt":"hello, world"}`, &tok); st != 200 || tok.Count != 3 || len(tok.Tokens) != 3 {
		t.Fatalf("tokenize: %d %+v", st, tok)
	}
	ids, _ := json.Marshal(tok.Tokens)
	var detok struct{ Prompt string }
	if st := post(t, url+"/detokenize", `{"model":"reranker","tokens":`+string(ids)+`}`, &detok); st != 200 || detok.Prompt != "hello, world" {
		t.Errorf("detokenize: %d %q", st, detok.Prompt)
	}
	var bad struct{ Error struct{ Param string } }
	if st := post(t, url+"/v1/rerank", `{"model":"reranker","query":"q"}`, &bad); st != 400 || bad.Error.Param != "documents" {
		t.Errorf("a rerank without documents: %d %+v", st, bad)
	}
}
