package demo

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"skywalker/internal/testwait"
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

// TestABackgroundResponseThroughTheDemo: the official OpenAI SDK creates a
// background response through the demo's mesh and retrieves it until it
// completes. While queued or in progress its output is an empty list,
// never null: the official npm SDK iterates it (`rsp.output is not
// iterable` otherwise).
func TestABackgroundResponseThroughTheDemo(t *testing.T) {
	ctx := context.Background()
	c, err := Start(ctx, "skywalker", []int{0, 0, 0}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	oai := openai.NewClient(option.WithBaseURL(c.Regions[1].URL+"/v1"), option.WithAPIKey("unused"))
	created, err := oai.Responses.New(ctx, responses.ResponseNewParams{Model: Model, Background: openai.Bool(true),
		MaxOutputTokens: openai.Int(64), Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("tell me a story")}})
	if err != nil {
		t.Fatal(err)
	}
	checkOutputIsAList := func(raw string) {
		t.Helper()
		var shape struct {
			Output json.RawMessage `json:"output"`
		}
		if err := json.Unmarshal([]byte(raw), &shape); err != nil || len(shape.Output) == 0 || shape.Output[0] != '[' {
			t.Errorf("output is %s, want a list (%v): %s", shape.Output, err, raw)
		}
	}
	if created.Status != responses.ResponseStatusQueued && created.Status != responses.ResponseStatusInProgress {
		t.Fatalf("a background response is %q at creation", created.Status)
	}
	checkOutputIsAList(created.RawJSON())
	var got *responses.Response
	testwait.Eventually(t, 60*time.Second, "the background response ends", func() (bool, string) {
		got, err = oai.Responses.Get(ctx, created.ID, responses.ResponseGetParams{})
		if err != nil {
			return false, err.Error()
		}
		checkOutputIsAList(got.RawJSON())
		return got.Status != responses.ResponseStatusQueued && got.Status != responses.ResponseStatusInProgress, string(got.Status)
	})
	// 64 tokens of a story: it ends at max_output_tokens, incomplete (as
	// vLLM and OpenAI say it), or completed.
	if got.Status != responses.ResponseStatusIncomplete && got.Status != responses.ResponseStatusCompleted || got.OutputText() == "" || got.Usage.OutputTokens != 64 {
		t.Errorf("ended %q with %q and %d output tokens, want 64", got.Status, got.OutputText(), got.Usage.OutputTokens)
	}
}
