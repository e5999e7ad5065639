package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

// countingClient is the official Anthropic client against addr, with its
// retries, counting the attempts it makes. It keeps the last Retry-After
// the proxy sent and hides it from the SDK, which would otherwise wait
// that long (up to a minute) before each retry instead of its own short
// backoff.
func countingClient(addr string, attempts *atomic.Int32, retryAfter *atomic.Value) anthropic.Client {
	return anthropic.NewClient(option.WithBaseURL("http://"+addr), option.WithAPIKey("unused"), option.WithMaxRetries(2),
		option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
			attempts.Add(1)
			resp, err := next(r)
			if err == nil {
				retryAfter.Store(resp.Header.Get("Retry-After"))
				resp.Header.Del("Retry-After")
			}
			return resp, err
		}))
}

var oneMessage = anthropic.MessageNewParams{Model: "m", MaxTokens: 200,
	Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))}}

// TestAnthropicClientRetriesTheProxysRefusals: the proxy's own refusals
// of a Messages request are Anthropic's — a 429 rate_limit_error with
// retry-after when it cannot start within its objective, a 529
// overloaded_error when no replica can take it — and the official SDK
// retries each.
func TestAnthropicClientRetriesTheProxysRefusals(t *testing.T) {
	t.Parallel() // it waits on time, not on the CPU: beside the others
	t.Run("429", func(t *testing.T) {
		url, release := heldBackend(t)
		addr := serveOne(t, []string{url}, func(c *Config) {
			c.MaxInFlight, c.Profile, c.TTFTObjective = 1, "llama3-8b-l4", 10*time.Second
		})
		// One long stream takes the only slot for about a minute.
		resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"stream":true,"max_tokens":1000,"messages":[{"role":"user","content":"a long one"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if _, err := resp.Body.Read(make([]byte, 64)); err != nil {
			t.Fatalf("the long stream did not start: %v", err)
		}
		var attempts atomic.Int32
		var retryAfter atomic.Value
		client := countingClient(addr, &attempts, &retryAfter)
		_, err = client.Messages.New(context.Background(), oneMessage)
		var apiErr *anthropic.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || !strings.Contains(apiErr.RawJSON(), `"rate_limit_error"`) ||
			retryAfter.Load() == "" {
			t.Fatalf("got %v, want a 429 rate_limit_error with retry-after", err)
		}
		if attempts.Load() != 3 {
			t.Errorf("the SDK made %d attempts, want 3 (it retries a 429)", attempts.Load())
		}
		release()
		_, _ = io.Copy(io.Discard, resp.Body)

	})
	t.Run("529", func(t *testing.T) {
		addr := serveOne(t, []string{"http://127.0.0.1:1"}, func(c *Config) { c.MaxWait = 200 * time.Millisecond })
		var attempts atomic.Int32
		var retryAfter atomic.Value
		client := countingClient(addr, &attempts, &retryAfter)
		_, err := client.Messages.New(context.Background(), oneMessage)
		var apiErr *anthropic.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 529 || !strings.Contains(apiErr.RawJSON(), `"overloaded_error"`) || retryAfter.Load() == "" {
			t.Fatalf("got %v, want a 529 overloaded_error", err)
		}
		if attempts.Load() != 3 {
			t.Errorf("the SDK made %d attempts, want 3 (it retries a 529)", attempts.Load())
		}
	})
}
