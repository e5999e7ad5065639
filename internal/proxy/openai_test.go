package proxy_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// TestOpenAIClientThroughTheMesh drives the proxies with the official
// OpenAI Go client: streaming and not, and an EU-resident request sent to
// us-east that must come back served by eu-west.
func TestOpenAIClientThroughTheMesh(t *testing.T) {
	c := startCluster(t, clusterOpts{})
	ctx := context.Background()
	client := openai.NewClient(option.WithBaseURL(c.Region("us-east").URL+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	params := openai.ChatCompletionNewParams{Model: "m", MaxTokens: openai.Int(6),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Which region answers this?")}}

	var raw *http.Response
	resp, err := client.Chat.Completions.New(ctx, params, option.WithResponseInto(&raw))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Usage.CompletionTokens != 6 || raw.Header.Get("X-SkyWalker-Region") != "us-east" {
		t.Errorf("usage %+v, served by %q", resp.Usage, raw.Header.Get("X-SkyWalker-Region"))
	}

	stream := client.Chat.Completions.NewStreaming(ctx, params)
	var text strings.Builder
	for stream.Next() {
		for _, ch := range stream.Current().Choices {
			text.WriteString(ch.Delta.Content)
		}
	}
	if err := stream.Err(); err != nil || text.Len() == 0 {
		t.Errorf("stream: %q, %v", text.String(), err)
	}

	_, err = client.Chat.Completions.New(ctx, params, option.WithHeader("X-Data-Residency", "eu"), option.WithResponseInto(&raw))
	if err != nil {
		t.Fatal(err)
	}
	if raw.Header.Get("X-SkyWalker-Region") != "eu-west" || raw.Header.Get("X-SkyWalker-Ingress-Region") != "us-east" {
		t.Errorf("an EU-resident request served by %q via %q", raw.Header.Get("X-SkyWalker-Region"), raw.Header.Get("X-SkyWalker-Ingress-Region"))
	}

	_, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "not-served",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
		t.Errorf("unknown model: %v, want a 404 the client understands", err)
	}
}
