package proxy_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"skywalker/internal/engine/server"
	"skywalker/internal/node"
	"skywalker/internal/node/nodetest"
	"skywalker/internal/proxy"
)

// A fleet of a chat model in every region and an embedding (and rerank)
// model in eu-west only.
func endpointEngines(region string) []server.Config {
	chat := nodetest.EngineConfig(20)
	chat.Model = "llama-8b"
	if region != "eu-west" {
		return []server.Config{chat}
	}
	embed := nodetest.EngineConfig(20)
	embed.Model = "embedder"
	return []server.Config{chat, embed}
}

func startEndpointCluster(t *testing.T) *node.Cluster {
	c := nodetest.Start(t, nodetest.Options{RegionEngines: endpointEngines, Proxy: func(cfg *proxy.Config) {
		cfg.Profile = "llama3-8b-a100"
		cfg.ModelEndpoints = map[string]string{"embedder": "pooling", "llama-8b": "generate"}
	}})
	ap := c.Region("ap-east")
	nodetest.Eventually(t, nodetest.Converge, "ap-east lists embedder, which only eu-west serves", func() (bool, string) {
		resp, err := http.Get(ap.URL + "/v1/models")
		if err != nil {
			return false, err.Error()
		}
		var list struct{ Data []struct{ ID string } }
		err = json.NewDecoder(resp.Body).Decode(&list)
		resp.Body.Close()
		return err == nil && strings.Contains(fmtIDs(list.Data), "embedder"), fmtIDs(list.Data)
	})
	return c
}

func fmtIDs(cards []struct{ ID string }) string {
	ids := make([]string, len(cards))
	for i, c := range cards {
		ids[i] = c.ID
	}
	return strings.Join(ids, ",")
}

// TestAnthropicClientThroughTheMesh drives the proxies with the official
// Anthropic Go SDK: a message and a stream served at the ingress, an
// EU-resident message sent to ap-east and served by eu-west,
// count_tokens, and an unknown model as Anthropic's 404.
func TestAnthropicClientThroughTheMesh(t *testing.T) {
	c := startEndpointCluster(t)
	ctx := context.Background()
	client := anthropic.NewClient(anthropicoption.WithBaseURL(c.Region("ap-east").URL), anthropicoption.WithAPIKey("unused"),
		anthropicoption.WithMaxRetries(0))
	params := anthropic.MessageNewParams{Model: "llama-8b", MaxTokens: 6,
		System:   []anthropic.TextBlockParam{{Text: "Answer in one word."}},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Which region answers this?"))}}
	var raw *http.Response
	msg, err := client.Messages.New(ctx, params, anthropicoption.WithResponseInto(&raw))
	if err != nil {
		t.Fatal(err)
	}
	if msg.Usage.OutputTokens != 6 || len(msg.Content) != 1 || raw.Header.Get("X-SkyWalker-Region") != "ap-east" {
		t.Errorf("message %+v served by %q", msg, raw.Header.Get("X-SkyWalker-Region"))
	}

	stream := client.Messages.NewStreaming(ctx, params, anthropicoption.WithHeader("X-Data-Residency", "eu"), anthropicoption.WithResponseInto(&raw))
	var acc anthropic.Message
	for stream.Next() {
		if err := acc.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if acc.Usage.OutputTokens != 6 || len(acc.Content) != 1 || acc.Content[0].Text == "" {
		t.Errorf("stream accumulated %+v", acc)
	}
	if raw.Header.Get("X-SkyWalker-Region") != "eu-west" || raw.Header.Get("X-SkyWalker-Ingress-Region") != "ap-east" {
		t.Errorf("an EU-resident message served by %q via %q", raw.Header.Get("X-SkyWalker-Region"), raw.Header.Get("X-SkyWalker-Ingress-Region"))
	}

	count, err := client.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: "llama-8b", Messages: params.Messages,
		System: anthropic.MessageCountTokensParamsSystemUnion{OfTextBlockArray: params.System}})
	if err != nil {
		t.Fatal(err)
	}
	if want := msg.Usage.InputTokens + msg.Usage.CacheReadInputTokens; count.InputTokens != want {
		t.Errorf("count_tokens %d, the message was charged %d", count.InputTokens, want)
	}

	params.Model = "not-served"
	_, err = client.Messages.New(ctx, params)
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || !strings.Contains(apiErr.RawJSON(), `"not_found_error"`) {
		t.Errorf("unknown model: %v, want Anthropic's 404 not_found_error", err)
	}
	params.Model, params.MaxTokens = "llama-8b", 0
	_, err = client.Messages.New(ctx, params)
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(apiErr.RawJSON(), `"invalid_request_error"`) ||
		!strings.Contains(apiErr.RawJSON(), "max_tokens") {
		t.Errorf("no max_tokens: %v, want Anthropic's 400 invalid_request_error about max_tokens", err)
	}
}

// TestEmbeddingsRerankThroughTheMesh: the official OpenAI client's
// embeddings, in both encodings, sent to a region that does not serve
// the model are forwarded to the one that does; rerank and tokenize
// likewise; a request whose residency forbids that region is not served
// there.
func TestEmbeddingsRerankThroughTheMesh(t *testing.T) {
	c := startEndpointCluster(t)
	ctx := context.Background()
	client := openai.NewClient(option.WithBaseURL(c.Region("ap-east").URL+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	params := openai.EmbeddingNewParams{Model: "embedder",
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"a first text", "and a second"}}}
	var raw *http.Response
	floats, err := client.Embeddings.New(ctx, params, option.WithResponseInto(&raw))
	if err != nil {
		t.Fatal(err)
	}
	if len(floats.Data) != 2 || len(floats.Data[0].Embedding) != server.DefaultEmbeddingDims || raw.Header.Get("X-SkyWalker-Region") != "eu-west" {
		t.Errorf("embeddings: %d vectors served by %q", len(floats.Data), raw.Header.Get("X-SkyWalker-Region"))
	}
	params.EncodingFormat = openai.EmbeddingNewParamsEncodingFormatBase64
	encoded, err := client.Embeddings.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	for i := range floats.Data {
		f, b := floats.Data[i].Embedding, encoded.Data[i].Embedding
		if len(b) != len(f) || math.Abs(b[0]-f[0]) > 1e-6 || math.Abs(b[len(b)-1]-f[len(f)-1]) > 1e-6 {
			t.Errorf("input %d: base64 decodes to %d values unlike the floats", i, len(b))
		}
	}

	_, err = client.Embeddings.New(ctx, params, option.WithHeader("X-Data-Residency", "ap"))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode < 400 {
		t.Errorf("an ap-resident embedding of a model only eu-west serves: %v, want refused", err)
	}

	// Which model serves which endpoint (SKYWALKER_MODEL_ENDPOINTS): in
	// /v1/models, and a request for another endpoint refused at once.
	resp, err := http.Get(c.Region("ap-east").URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Data []struct {
			ID        string   `json:"id"`
			Endpoints []string `json:"skywalker_endpoints"`
		} `json:"data"`
	}
	err = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, card := range list.Data {
		embeds, chats := slices.Contains(card.Endpoints, "/v1/embeddings"), slices.Contains(card.Endpoints, "/v1/messages")
		if (card.ID == "embedder") != embeds || (card.ID == "llama-8b") != chats {
			t.Errorf("/v1/models lists %s with endpoints %v", card.ID, card.Endpoints)
		}
	}
	_, err = client.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "llama-8b",
		Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("x")}})
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(apiErr.Message, "does not serve embeddings") {
		t.Errorf("embeddings of a generative model: %v, want a 400 saying it does not serve them", err)
	}

	for _, path := range []string{"/v1/rerank", "/rerank", "/v2/rerank", "/score", "/v1/score", "/tokenize"} {
		body := `{"model":"embedder","query":"capital of France","documents":["Paris is the capital of France","Brasilia"]}`
		switch path {
		case "/score", "/v1/score":
			body = `{"model":"embedder","text_1":"capital of France","text_2":["Paris is the capital of France","Brasilia"]}`
		case "/tokenize":
			body = `{"model":"embedder","prompt":"hello, world"}`
		}
		resp, err := http.Post(c.Region("us-east").URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var out map[string]any
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || resp.Header.Get("X-SkyWalker-Region") != "eu-west" {
			t.Errorf("%s from us-east: %d %v served by %q: %v", path, resp.StatusCode, out, resp.Header.Get("X-SkyWalker-Region"), err)
		}
	}
}
