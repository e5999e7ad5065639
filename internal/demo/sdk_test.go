package demo

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// TestTheDemoMeshServesEveryEndpoint: the demo's mesh, as a user reaches
// it after `skywalker demo`, serves Anthropic Messages (whole and
// streamed) and count_tokens to the official Anthropic SDK, embeddings in
// both encodings to the official OpenAI SDK, and rerank, score and
// tokenize at vLLM's paths — from every region.
func TestTheDemoMeshServesEveryEndpoint(t *testing.T) {
	ctx := context.Background()
	c, err := Start(ctx, "skywalker", []int{0, 0, 0}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, region := range c.Regions {
		claude := anthropic.NewClient(anthropicoption.WithBaseURL(region.URL), anthropicoption.WithAPIKey("unused"))
		params := anthropic.MessageNewParams{Model: Model, MaxTokens: 8,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Hello from " + region.Region))}}
		msg, err := claude.Messages.New(ctx, params)
		if err != nil || msg.Usage.OutputTokens != 8 {
			t.Fatalf("%s: message: %v %+v", region.Region, err, msg)
		}
		stream := claude.Messages.NewStreaming(ctx, params)
		var acc anthropic.Message
		for stream.Next() {
			if err := acc.Accumulate(stream.Current()); err != nil {
				t.Fatal(err)
			}
		}
		if err := stream.Err(); err != nil || acc.Usage.OutputTokens != 8 {
			t.Fatalf("%s: stream: %v %+v", region.Region, err, acc)
		}
		count, err := claude.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: Model, Messages: params.Messages})
		if err != nil || count.InputTokens <= 0 {
			t.Fatalf("%s: count_tokens: %v %+v", region.Region, err, count)
		}

		oai := openai.NewClient(option.WithBaseURL(region.URL+"/v1"), option.WithAPIKey("unused"))
		for _, format := range []openai.EmbeddingNewParamsEncodingFormat{openai.EmbeddingNewParamsEncodingFormatFloat, openai.EmbeddingNewParamsEncodingFormatBase64} {
			emb, err := oai.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: Model, EncodingFormat: format,
				Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("embed me")}})
			if err != nil || len(emb.Data) != 1 || len(emb.Data[0].Embedding) == 0 {
				t.Fatalf("%s: embeddings (%s): %v %+v", region.Region, format, err, emb)
			}
		}
		for path, body := range map[string]string{
			"/v1/rerank": `{"model":"` + Model + `","query":"a","documents":["a b","c"]}`,
			"/v1/score":  `{"model":"` + Model + `","text_1":"a","text_2":["a b","c"]}`,
			"/tokenize":  `{"model":"` + Model + `","prompt":"hello"}`,
		} {
			resp, err := http.Post(region.URL+path, "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			var out map[string]any
			err = json.NewDecoder(resp.Body).Decode(&out)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 {
				t.Errorf("%s %s: %d %v %v", region.Region, path, resp.StatusCode, out, err)
			}
		}
	}
}
