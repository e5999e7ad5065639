package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"skywalker/internal/engine"
	"skywalker/internal/profile"
	"skywalker/internal/testwait"
)

// responsesEngine serves the Responses API, its store on or off.
func responsesEngine(t *testing.T, store bool) string {
	t.Helper()
	p, _ := profile.Lookup("llama3-8b-a100")
	_, url := start(t, Config{Model: "m", Engine: engine.Config{Profile: p}, TimeScale: 50, ResponsesStore: store})
	return url
}

// postFor is post's status and body.
func postFor(t *testing.T, url, body string) (int, []byte) {
	t.Helper()
	resp, b := post(t, url, body)
	return resp.StatusCode, []byte(b)
}

// TestResponsesChainOnlyInTheProcessThatStoredThem: with the store on, a
// response continues by previous_response_id (its conversation's cached
// prefix reused) and reads back by GET; another process, or one without
// the store, answers the same id with vLLM's 404.
func TestResponsesChainOnlyInTheProcessThatStoredThem(t *testing.T) {
	home, other, storeless := responsesEngine(t, true), responsesEngine(t, true), responsesEngine(t, false)
	system := strings.Repeat("You plan train journeys across Europe. ", 60)
	code, b := postFor(t, home+"/v1/responses", fmt.Sprintf(`{"model":"m","instructions":%q,"input":"Paris to Vienna?","max_output_tokens":8}`, system))
	var first struct {
		ID, Status, Object string
		Output             []struct {
			Content []struct{ Text string }
		}
		Usage struct {
			InputTokens        int `json:"input_tokens"`
			InputTokensDetails struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"input_tokens_details"`
			OutputTokens int `json:"output_tokens"`
		}
	}
	if err := json.Unmarshal(b, &first); code != 200 || err != nil || !strings.HasPrefix(first.ID, "resp_") || first.Object != "response" ||
		first.Status != "incomplete" || first.Usage.OutputTokens != 8 || len(first.Output) != 1 || first.Output[0].Content[0].Text == "" {
		t.Fatalf("first turn: %d %s (%v)", code, b, err)
	}
	code, b = postFor(t, home+"/v1/responses", fmt.Sprintf(`{"model":"m","input":"And back?","previous_response_id":%q,"max_output_tokens":4}`, first.ID))
	var second = first
	if err := json.Unmarshal(b, &second); code != 200 || err != nil || second.Usage.InputTokens <= first.Usage.InputTokens+first.Usage.OutputTokens ||
		second.Usage.InputTokensDetails.CachedTokens == 0 {
		t.Errorf("second turn: %d %s (%v); want the conversation as its prompt, its prefix cached", code, b, err)
	}
	for _, srv := range []string{other, storeless} {
		code, b = postFor(t, srv+"/v1/responses", fmt.Sprintf(`{"input":"And back?","previous_response_id":%q}`, first.ID))
		if code != 404 || !bytes.Contains(b, []byte("Response with id '"+first.ID+"' not found.")) {
			t.Errorf("elsewhere: %d %s, want vLLM's 404", code, b)
		}
	}
	resp, err := http.Get(home + "/v1/responses/" + first.ID)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Contains(b, []byte(first.ID)) {
		t.Errorf("GET: %d %s", resp.StatusCode, b)
	}
	if code, b := postFor(t, storeless+"/v1/responses", `{"input":"x","background":true}`); code != 400 || !bytes.Contains(b, []byte("VLLM_ENABLE_RESPONSES_API_STORE")) {
		t.Errorf("background without the store: %d %s, want vLLM's 400", code, b)
	}
}

// TestResponsesStreamAsVLLMDoes: created and in_progress before the first
// token, one delta per token, completed last with the usage; numbered.
func TestResponsesStreamAsVLLMDoes(t *testing.T) {
	srv := responsesEngine(t, true)
	resp, err := http.Post(srv+"/v1/responses", "application/json", strings.NewReader(`{"input":"hi","stream":true,"max_output_tokens":5}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var types []string
	sc := bufio.NewScanner(resp.Body)
	seq := 0
	for sc.Scan() {
		line := sc.Text()
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			var ev struct {
				Type           string
				SequenceNumber int `json:"sequence_number"`
			}
			if err := json.Unmarshal([]byte(data), &ev); err != nil || ev.SequenceNumber != seq {
				t.Fatalf("event %q (%v), want sequence number %d", data, err, seq)
			}
			seq++
			types = append(types, ev.Type)
		}
	}
	want := "response.created response.in_progress response.output_item.added response.content_part.added " + strings.Repeat("response.output_text.delta ", 5) +
		"response.output_text.done response.content_part.done response.output_item.done response.incomplete"
	if got := strings.Join(types, " "); got != want {
		t.Errorf("events:\n got %s\nwant %s", got, want)
	}
}

// TestABackgroundResponseIsCancelled: a background response is queued,
// can be read while it runs, and cancelled; a synchronous one cannot be.
func TestABackgroundResponseIsCancelled(t *testing.T) {
	srv := responsesEngine(t, true)
	code, b := postFor(t, srv+"/v1/responses", `{"input":"write a long story","background":true,"max_output_tokens":100000}`)
	var r struct{ ID, Status string }
	if err := json.Unmarshal(b, &r); code != 200 || err != nil || r.Status != "queued" {
		t.Fatalf("background: %d %s", code, b)
	}
	code, b = postFor(t, srv+"/v1/responses/"+r.ID+"/cancel", ``)
	if err := json.Unmarshal(b, &r); code != 200 || err != nil || r.Status != "cancelled" {
		t.Errorf("cancel: %d %s", code, b)
	}
	testwait.Eventually(t, 10*time.Second, "the cancelled response stays cancelled", func() (bool, string) {
		resp, err := http.Get(srv + "/v1/responses/" + r.ID)
		if err != nil {
			return false, err.Error()
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return bytes.Contains(b, []byte(`"status":"cancelled"`)), string(b)
	})
	_, b = postFor(t, srv+"/v1/responses", `{"input":"x","max_output_tokens":1}`)
	_ = json.Unmarshal(b, &r)
	if code, b := postFor(t, srv+"/v1/responses/"+r.ID+"/cancel", ``); code != 400 || !bytes.Contains(b, []byte("synchronous")) {
		t.Errorf("cancel a synchronous response: %d %s", code, b)
	}
	if code, _ := postFor(t, srv+"/v1/responses/resp_nope/cancel", ``); code != 404 {
		t.Errorf("cancel an unknown response: %d", code)
	}
}
