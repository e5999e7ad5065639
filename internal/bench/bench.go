// Package bench is a load generator for live OpenAI-compatible endpoints:
// it replays a workload (the simulator's generators or a trace) in real
// time, sends each request to its region's endpoint with streaming, and
// measures what a client sees: time to first token, inter-token latency,
// end-to-end time, cached tokens and which region served it. Samples are
// summarised by internal/results, exactly as the simulator's are, so a live
// run and a simulated run print the same table.
package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"skywalker/internal/request"
	"skywalker/internal/results"
	"skywalker/internal/workload"
)

// Config is one load run.
type Config struct {
	// Endpoints maps a region to its endpoint's base URL (the part before
	// /v1/chat/completions). Requests of regions without one go to Default.
	Endpoints map[string]string
	Default   string
	Model     string
	// API is how each request is sent: APIChat (default), APIMessages or
	// APIEmbeddings.
	API    string
	Source workload.Source
	// Speedup divides arrival offsets (2 = twice the workload's rate).
	Speedup     float64
	MaxInFlight int         // client-side cap on concurrent requests; default 1024
	SLO         request.SLO // TTFT objective for goodput and attainment
	Label       string      // the result's policy column
	Client      *http.Client
	// OnSample, if set, receives every finished request (from many
	// goroutines at once).
	OnSample func(Sample)
}

// Sample is one request as the client saw it.
type Sample struct {
	Ingress      string
	Served       string // X-SkyWalker-Region, or the ingress if absent
	Start        time.Time
	TTFT         time.Duration
	E2E          time.Duration
	ITL          time.Duration // mean gap between content chunks
	PromptTokens int
	OutputTokens int
	CachedTokens int
	Status       int
	Code         string // the OpenAI-style error's code on a non-200 answer ("overloaded", "shed", ...)
	Model        string // the model it asked for
	Err          error
}

// OK reports whether the request completed.
func (s Sample) OK() bool { return s.Err == nil && s.Status == 200 }

// Run replays the source until it is exhausted and every request is done,
// or ctx ends.
func Run(ctx context.Context, cfg Config) (*results.Result, []Sample, error) {
	if cfg.API == "" {
		cfg.API = APIChat
	}
	if !slices.Contains(APIs, cfg.API) {
		return nil, nil, fmt.Errorf("bench: API %q: want one of %s", cfg.API, strings.Join(APIs, ", "))
	}
	if cfg.Speedup <= 0 {
		cfg.Speedup = 1
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 1024
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	}
	var (
		mu      sync.Mutex
		samples []Sample
		wg      sync.WaitGroup
		slots   = make(chan struct{}, cfg.MaxInFlight)
	)
	begin := time.Now()
	for {
		a, ok := cfg.Source.Next()
		if !ok {
			break
		}
		at := begin.Add(time.Duration(float64(a.At) / cfg.Speedup))
		select {
		case <-ctx.Done():
			wg.Wait()
			return Summarize(cfg.Label, cfg.SLO, samples), samples, ctx.Err()
		case <-time.After(time.Until(at)):
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return Summarize(cfg.Label, cfg.SLO, samples), samples, ctx.Err()
		}
		base := cfg.Endpoints[a.Region]
		if base == "" {
			base = cfg.Default
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			s := send(ctx, cfg, base, a)
			if cfg.OnSample != nil {
				cfg.OnSample(s)
			}
			mu.Lock()
			samples = append(samples, s)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return Summarize(cfg.Label, cfg.SLO, samples), samples, nil
}

// Prompt renders a request's prompt as text whose prefix structure matches
// its blocks: each block becomes 512 bytes of words drawn from a generator
// seeded by the block's chained hash (so equal prefixes give equal text,
// and the endpoint's own hashing sees the sharing), then filler for the
// tokens past the last whole block.
func Prompt(req *request.Request) string {
	var b strings.Builder
	blockBytes := req.BlockTokens * request.BytesPerToken
	for _, h := range req.Blocks {
		writeWords(&b, h, blockBytes)
	}
	rest := req.PromptTokens*request.BytesPerToken - b.Len()
	if rest > 0 {
		writeWords(&b, hashString(req.ID), rest)
	}
	return b.String()
}

var vocabulary = strings.Fields("the of and to in a is that for it as was with be by on not he this are or his from at which but have an " +
	"they you were their one all we can her has there been if more when will would who so no model cache region token prefix latency " +
	"queue replica balance route serve batch block prompt reply night peak demand offload")

func writeWords(b *strings.Builder, seed uint64, n int) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9E3779B97F4A7C15))
	start := b.Len()
	for b.Len()-start < n {
		w := vocabulary[rng.IntN(len(vocabulary))]
		if rem := n - (b.Len() - start); len(w)+1 > rem {
			b.WriteString(strings.Repeat(".", rem))
			break
		}
		b.WriteString(w)
		b.WriteByte(' ')
	}
}

func hashString(s string) uint64 {
	var h uint64 = 1469598103934665603
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * 1099511628211
	}
	return h
}

type chatRequest struct {
	Model         string            `json:"model,omitempty"`
	Messages      []message         `json:"messages"`
	MaxTokens     int               `json:"max_tokens"`
	Stream        bool              `json:"stream"`
	StreamOptions map[string]bool   `json:"stream_options,omitempty"`
	User          string            `json:"user,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
}

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// The APIs a run can send its requests through (Config.API).
const (
	APIChat       = "chat"       // POST /v1/chat/completions, streamed (the default)
	APIMessages   = "messages"   // POST /v1/messages (Anthropic), streamed
	APIEmbeddings = "embeddings" // POST /v1/embeddings: the prompt embedded; TTFT is the whole answer's time
)

// APIs lists them, for flags and errors.
var APIs = []string{APIChat, APIMessages, APIEmbeddings}

// body is the request a workload request becomes in api, and its path.
func body(api, model string, req *request.Request) (path string, payload []byte) {
	prompt := Prompt(req)
	switch api {
	case APIMessages:
		b := chatRequest{Model: model, Messages: []message{{Role: "user", Content: prompt}}, MaxTokens: max(req.MaxTokens, 1), Stream: true}
		b.Metadata = map[string]string{}
		if req.Session != "" {
			b.Metadata["user_id"] = req.Session
		}
		if req.Residency != "" {
			b.Metadata["data_residency"] = req.Residency
		}
		payload, _ = json.Marshal(b)
		return "/v1/messages", payload
	case APIEmbeddings:
		b := map[string]any{"model": model, "input": prompt}
		if req.Residency != "" {
			b["metadata"] = map[string]string{"data_residency": req.Residency}
		}
		payload, _ = json.Marshal(b)
		return "/v1/embeddings", payload
	}
	b := chatRequest{Model: model, Messages: []message{{Role: "user", Content: prompt}}, MaxTokens: max(req.MaxTokens, 1),
		Stream: true, StreamOptions: map[string]bool{"include_usage": true}, User: req.Session}
	if req.Residency != "" {
		b.Metadata = map[string]string{"data_residency": req.Residency}
	}
	payload, _ = json.Marshal(b)
	return "/v1/chat/completions", payload
}

// send sends one request and measures it.
func send(ctx context.Context, cfg Config, base string, a workload.Arrival) Sample {
	req := a.Request
	model := cfg.Model
	if req.Model != "" { // a workload of several models names each request's
		model = req.Model
	}
	s := Sample{Ingress: a.Region, Served: a.Region, Start: time.Now(), PromptTokens: req.PromptTokens, Model: model}
	path, payload := body(cfg.API, model, req)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(base, "/")+path, bytes.NewReader(payload))
	if err != nil {
		s.Err = err
		return s
	}
	hr.Header.Set("Content-Type", "application/json")
	resp, err := cfg.Client.Do(hr)
	if err != nil {
		s.Err = err
		return s
	}
	defer resp.Body.Close()
	s.Status = resp.StatusCode
	if r := resp.Header.Get("X-SkyWalker-Region"); r != "" {
		s.Served = r
	}
	if resp.StatusCode != http.StatusOK {
		s.Code, s.Err = statusError(resp)
		return s
	}
	if cfg.API == APIEmbeddings {
		var out struct {
			Data []json.RawMessage `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || len(out.Data) == 0 {
			s.Err = fmt.Errorf("an embeddings answer without data: %v", err)
			return s
		}
		s.E2E = time.Since(s.Start)
		s.TTFT = s.E2E
		return s
	}
	return readStream(resp.Body, s)
}

// streamEvent is what a chat chunk or a Messages event carries that the
// client measures.
type streamEvent struct {
	Type    string `json:"type"` // Messages
	Choices []struct {
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
	Delta struct {
		Text string `json:"text"`
	} `json:"delta"`
	Message struct {
		Usage *messageUsage `json:"usage"`
	} `json:"message"`
	Usage *struct {
		CompletionTokens int `json:"completion_tokens"`
		Details          *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
		messageUsage
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

type messageUsage struct {
	OutputTokens         int `json:"output_tokens"`
	CacheReadInputTokens int `json:"cache_read_input_tokens"`
}

// readStream reads a chat or Messages event stream into s: the first
// token, the gaps between tokens, output and cached tokens.
func readStream(r io.Reader, s Sample) Sample {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var last time.Time
	var gaps time.Duration
	chunks := 0
	for sc.Scan() {
		data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: "))
		if !ok || bytes.Equal(data, []byte("[DONE]")) {
			continue
		}
		var ev streamEvent
		if err := json.Unmarshal(data, &ev); err != nil {
			continue
		}
		if ev.Error != nil {
			s.Err = errors.New(ev.Error.Message)
			return s
		}
		tokens := 0
		for _, c := range ev.Choices {
			if c.Delta.Content != "" {
				tokens++
			}
		}
		if ev.Type == "content_block_delta" && ev.Delta.Text != "" {
			tokens++
		}
		now := time.Now()
		for range tokens {
			if s.TTFT == 0 {
				s.TTFT = now.Sub(s.Start)
			} else {
				gaps += now.Sub(last)
			}
			last = now
			chunks++
		}
		if u := ev.Message.Usage; u != nil { // message_start
			s.CachedTokens = u.CacheReadInputTokens
		}
		if u := ev.Usage; u != nil {
			s.OutputTokens = max(u.CompletionTokens, u.OutputTokens)
			if u.Details != nil {
				s.CachedTokens = u.Details.CachedTokens
			}
		}
	}
	if err := sc.Err(); err != nil {
		s.Err = err
		return s
	}
	s.E2E = time.Since(s.Start)
	if s.OutputTokens == 0 {
		s.OutputTokens = chunks
	}
	if chunks > 1 {
		s.ITL = gaps / time.Duration(chunks-1)
	}
	return s
}

// statusError is a non-200 answer as an error carrying the OpenAI-style
// message, when the body has one, and the error's code.
func statusError(resp *http.Response) (string, error) {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e struct {
		Error struct {
			Message string `json:"message"`
			Code    any    `json:"code"` // a string here; some servers send a number
			Type    string `json:"type"`
		} `json:"error"`
	}
	msg := strings.TrimSpace(string(body))
	if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
		msg = e.Error.Message
	}
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	code, _ := e.Error.Code.(string)
	if code == "" {
		code = e.Error.Type // Anthropic's shape names only its type
	}
	if msg == "" {
		return code, fmt.Errorf("status %d", resp.StatusCode)
	}
	return code, fmt.Errorf("status %d: %s", resp.StatusCode, msg)
}

// Route splits a workload by whether its region has an endpoint: the
// arrivals to replay, and how many of each endpoint-less region's requests
// were left out (none when a default endpoint takes every region).
func Route(src workload.Source, endpoints map[string]string, def string) ([]workload.Arrival, map[string]int) {
	var kept []workload.Arrival
	unrouted := map[string]int{}
	for {
		a, ok := src.Next()
		if !ok {
			return kept, unrouted
		}
		if endpoints[a.Region] == "" && def == "" {
			unrouted[a.Region]++
			continue
		}
		kept = append(kept, a)
	}
}

// FailureError says a run failed more requests than it may: how many, and
// the first distinct errors with their counts.
type FailureError struct {
	Failed, Total int
	MaxShare      float64
	First         []string // "connection refused (3×)", in order of first occurrence
}

func (e *FailureError) Error() string {
	return fmt.Sprintf("%d of %d requests failed (%.1f%%, more than the allowed %.1f%%); first errors:\n  %s",
		e.Failed, e.Total, 100*float64(e.Failed)/float64(max(e.Total, 1)), 100*e.MaxShare, strings.Join(e.First, "\n  "))
}

// Check returns a *FailureError when more than maxShare of the samples
// failed, nil otherwise (and for no samples).
func Check(samples []Sample, maxShare float64) error {
	const shown = 5
	failed := 0
	counts := map[string]int{}
	var order []string
	for _, s := range samples {
		if s.OK() {
			continue
		}
		failed++
		msg := "unknown failure"
		if s.Err != nil {
			msg = s.Err.Error()
		}
		if counts[msg] == 0 {
			order = append(order, msg)
		}
		counts[msg]++
	}
	if len(samples) == 0 || float64(failed) <= maxShare*float64(len(samples)) {
		return nil
	}
	e := &FailureError{Failed: failed, Total: len(samples), MaxShare: maxShare}
	for _, msg := range order[:min(len(order), shown)] {
		e.First = append(e.First, fmt.Sprintf("%s (%d×)", msg, counts[msg]))
	}
	return e
}

// Record converts a sample to the shared summary's form, with times as
// offsets from begin.
func (s Sample) Record(begin time.Time) results.Sample {
	r := results.Sample{Ingress: s.Ingress, Served: s.Served, Start: s.Start.Sub(begin), TTFT: s.TTFT,
		PromptTokens: s.PromptTokens, OutputTokens: s.OutputTokens, CachedTokens: s.CachedTokens, Model: s.Model}
	r.End = r.Start + s.E2E
	switch {
	case s.Err != nil && s.Status == 0:
		r.Dropped = "connection_error"
	case s.Err != nil && s.Status == http.StatusOK:
		r.Dropped = "failed_midstream"
	case s.Status == http.StatusTooManyRequests && s.Code != "":
		r.Dropped = s.Code // overloaded, queue_full (refused) or shed: counted as such
	case s.Status != http.StatusOK && s.Code != "":
		r.Dropped = "status_" + strconv.Itoa(s.Status) + "_" + s.Code
	case s.Status != http.StatusOK:
		r.Dropped = "status_" + strconv.Itoa(s.Status)
	}
	return r
}

// Summarize turns samples into a Result labelled label, judging TTFT
// against slo: the same summary the simulator prints.
func Summarize(label string, slo request.SLO, samples []Sample) *results.Result {
	c := results.NewCollector(slo)
	var begin time.Time
	for _, s := range samples {
		if begin.IsZero() || s.Start.Before(begin) {
			begin = s.Start
		}
	}
	for _, s := range samples {
		c.Add(s.Record(begin))
	}
	return c.Result(label)
}
