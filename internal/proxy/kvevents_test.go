package proxy

import (
	"reflect"
	"strings"
	"testing"

	"skywalker/internal/kvevents/kvzmq"
)

// TestKVEventSourcesAreReadOrRefused: vLLM's /kv_event_sources answer is
// read with bind-all hosts replaced by the replica's; anything else is
// refused with a reason.
func TestKVEventSourcesAreReadOrRefused(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       []kvzmq.Source
		err        string
	}{
		{"two ranks, bind-all", `{"sources":[{"data_parallel_rank":0,"endpoint":"tcp://*:5557","replay_endpoint":"tcp://0.0.0.0:5558","topic":"kv"},` +
			`{"data_parallel_rank":1,"endpoint":"tcp://10.0.0.9:5567","topic":"kv"}]}`,
			[]kvzmq.Source{{Endpoint: "tcp://10.0.0.7:5557", ReplayEndpoint: "tcp://10.0.0.7:5558", Topic: "kv"}, {Endpoint: "tcp://10.0.0.9:5567", Topic: "kv", Rank: 1}}, ""},
		{"none", `{"sources":[]}`, nil, ""},
		{"not JSON", `sources`, nil, "invalid character"},
		{"not ZeroMQ over TCP", `{"sources":[{"endpoint":"ipc:///tmp/kv"}]}`, nil, "want tcp://"},
		{"a negative rank", `{"sources":[{"endpoint":"tcp://*:1","data_parallel_rank":-1}]}`, nil, "rank -1"},
		{"too many", `{"sources":[` + strings.Repeat(`{"endpoint":"tcp://*:1"},`, 300) + `{"endpoint":"tcp://*:1"}]}`, nil, "over 256"},
	} {
		got, err := parseKVSources(strings.NewReader(tc.body), "10.0.0.7")
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err %v, want one saying %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}

func FuzzKVEventSources(f *testing.F) {
	f.Add(`{"sources":[{"data_parallel_rank":0,"endpoint":"tcp://*:5557","replay_endpoint":"tcp://[::]:5558","topic":"kv"}]}`)
	f.Add(`{"sources":[{"endpoint":"tcp://h"}]}`)
	f.Fuzz(func(t *testing.T, body string) {
		sources, err := parseKVSources(strings.NewReader(body), "10.0.0.7")
		for _, s := range sources {
			if err != nil || !strings.HasPrefix(s.Endpoint, "tcp://") || s.Rank < 0 {
				t.Errorf("read %+v from %q (err %v)", s, body, err)
			}
		}
	})
}

// TestTheRelayCountsOutputTokensOfEitherAPI: the usage a chat, Responses
// or Messages stream reports is what the demand records (a chat stream
// without usage: its token chunks), and each stream's end is seen.
func TestTheRelayCountsOutputTokensOfEitherAPI(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       int
	}{
		{"chat", "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":7}}\n\ndata: [DONE]\n\n", 7},
		{"responses", "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":9,\"output_tokens\":6,\"total_tokens\":15}}}\n\n", 6},
		{"messages", "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3,\"output_tokens\":1,\"cache_read_input_tokens\":512}}}\n\n" +
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\"}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":5}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", 5},
		{"chat without usage", "data: {\"role\"}\n\n" + strings.Repeat("data: {\"tok\"}\n\n", 4) + "data: {\"finish\"}\n\ndata: [DONE]\n\n", 4},
	} {
		c := relayCounter{sse: true}
		for i := 0; i < len(tc.body); i += 5 { // in pieces
			c.count([]byte(tc.body[i:min(i+5, len(tc.body))]))
		}
		if got := c.outputTokens(); got != tc.want || (!c.done && tc.name != "responses") { // a Responses stream ends with its body
			t.Errorf("%s: %d output tokens (done %v), want %d", tc.name, got, c.done, tc.want)
		}
		if tc.name == "messages" && (!c.cachedSeen || c.cached != 512) {
			t.Errorf("messages: cache reads %d (seen %v), want 512", c.cached, c.cachedSeen)
		}
	}
}
