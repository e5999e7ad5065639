package server_test

import (
	"context"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"skywalker/internal/engine/server"
)

// TestOpenAIClient drives the engine with the official OpenAI Go client:
// non-streaming, then streaming with usage, and a repeated long prompt
// that must report cached tokens.
func TestOpenAIClient(t *testing.T) {
	_, url := server.StartForTest(t, "llama3-8b-h100", server.Config{Model: "llama3-8b"})
	ctx := context.Background()
	client := openai.NewClient(option.WithBaseURL(url+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))

	system := strings.Repeat("You are a meticulous assistant for a cross-region load balancer. ", 40) // ~2.6 KB
	params := openai.ChatCompletionNewParams{
		Model:     "llama3-8b",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(system), openai.UserMessage("Where should this request go?")},
		MaxTokens: openai.Int(8),
	}

	first, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Choices) != 1 || first.Choices[0].Message.Content == "" || first.Usage.CompletionTokens != 8 {
		t.Fatalf("response %+v", first)
	}
	if first.Usage.PromptTokensDetails.CachedTokens != 0 {
		t.Errorf("a cold prompt reported %d cached tokens", first.Usage.PromptTokensDetails.CachedTokens)
	}

	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := client.Chat.Completions.NewStreaming(ctx, params)
	var text strings.Builder
	var usage openai.CompletionUsage
	for stream.Next() {
		chunk := stream.Current()
		for _, c := range chunk.Choices {
			text.WriteString(c.Delta.Content)
		}
		if chunk.Usage.TotalTokens > 0 {
			usage = chunk.Usage
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if text.Len() == 0 || usage.CompletionTokens != 8 {
		t.Errorf("streamed %q, usage %+v", text.String(), usage)
	}
	if usage.PromptTokensDetails.CachedTokens <= 0 {
		t.Errorf("the repeated prompt reported %d cached tokens, want > 0", usage.PromptTokensDetails.CachedTokens)
	}
	if text.String() != first.Choices[0].Message.Content {
		t.Errorf("same seed, different text: %q vs %q", text.String(), first.Choices[0].Message.Content)
	}

	comp, err := client.Completions.New(ctx, openai.CompletionNewParams{
		Model: "llama3-8b", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("hello")}, MaxTokens: openai.Int(3)})
	if err != nil {
		t.Fatal(err)
	}
	if comp.Usage.CompletionTokens != 3 || comp.Choices[0].Text == "" {
		t.Errorf("completion %+v", comp)
	}

	_, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "other-model",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	var apiErr *openai.Error
	if err == nil || !asError(err, &apiErr) || apiErr.StatusCode != 404 {
		t.Errorf("unknown model: %v, want a 404 the client understands", err)
	}
}
