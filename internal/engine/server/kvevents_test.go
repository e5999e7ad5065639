package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"skywalker/internal/kvevents"
)

// TestKVEventsConfigIsReadAsVLLMReadsIt: --kv-events-config takes vLLM's
// JSON; an unknown field, a publisher other than zmq or broken JSON is
// refused with a reason; vLLM's default endpoint fills a missing one.
func TestKVEventsConfigIsReadAsVLLMReadsIt(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       KVEventsConfig
		err        string
	}{
		{"vLLM's example", `{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557","replay_endpoint":"tcp://*:5558","topic":"kv","buffer_steps":100}`,
			KVEventsConfig{Enable: true, Publisher: "zmq", Endpoint: "tcp://*:5557", ReplayEndpoint: "tcp://*:5558", Topic: "kv", BufferSteps: 100}, ""},
		{"the default endpoint", `{"enable_kv_cache_events":true}`, KVEventsConfig{Enable: true, Endpoint: "tcp://*:5557"}, ""},
		{"off", `{"enable_kv_cache_events":false}`, KVEventsConfig{}, ""},
		{"an unknown field", `{"enable_kv_cache_events":true,"port":5}`, KVEventsConfig{}, "unknown field"},
		{"another publisher", `{"enable_kv_cache_events":true,"publisher":"nats"}`, KVEventsConfig{}, "only zmq"},
		{"not JSON", `enable`, KVEventsConfig{}, "kv-events-config"},
	} {
		got, err := ParseKVEventsConfig(tc.text)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err %v, want one saying %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}

func FuzzKVEventsConfig(f *testing.F) {
	f.Add(`{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557"}`)
	f.Fuzz(func(t *testing.T, text string) {
		c, err := ParseKVEventsConfig(text)
		if err == nil && c.Enable && c.Endpoint == "" {
			t.Errorf("%q enabled events with no endpoint", text)
		}
	})
}

// TestTheEnginePublishesItsCacheAsVLLMDoes: an engine with KV events lists
// where it publishes at /kv_event_sources (bind-all, as vLLM does); one
// without lists none. Its prefix units become blocks of its own block
// size with hashes of their own, chained parent to child; a partial tail
// is not stored.
func TestTheEnginePublishesItsCacheAsVLLMDoes(t *testing.T) {
	for _, enable := range []bool{true, false} {
		cfg := Config{Model: "m", KVEvents: KVEventsConfig{Enable: enable, Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0", Topic: "kv"}}
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/kv_event_sources", nil))
		var list struct {
			Sources []struct {
				Endpoint, ReplayEndpoint, Topic string
			} `json:"sources"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil || rec.Code != 200 {
			t.Fatalf("enable=%v: %d %s (%v)", enable, rec.Code, rec.Body, err)
		}
		if enable && (len(list.Sources) != 1 || !strings.HasPrefix(list.Sources[0].Endpoint, "tcp://*:") || list.Sources[0].Topic != "kv") ||
			!enable && len(list.Sources) != 0 {
			t.Errorf("enable=%v: sources %s", enable, rec.Body)
		}
		s.closeKV()
	}

	units := []kvevents.Event{{Kind: kvevents.Stored, Hashes: []uint64{7, 8}, Parent: 6, HasParent: true, BlockSize: 128, Tokens: 128 + 40}}
	blocks := toEngineBlocks(units, 16)
	if len(blocks) != 1 || len(blocks[0].Hashes) != 8+2 || blocks[0].Tokens != 160 || blocks[0].BlockSize != 16 {
		t.Fatalf("one unit and 40 tokens as 16-token blocks: %+v; want 10 blocks, 160 tokens", blocks)
	}
	if b := blocks[0]; !b.HasParent || b.Parent != engineBlock(6, 7) || b.Hashes[0] != engineBlock(7, 0) || b.Hashes[8] != engineBlock(8, 0) {
		t.Errorf("the chain: parent %x, first %x; want the parent unit's last block and the unit's first", b.Parent, b.Hashes[0])
	}
	removed := toEngineBlocks([]kvevents.Event{{Kind: kvevents.Removed, Hashes: []uint64{7}, BlockSize: 128}}, 16)
	if len(removed) != 1 || len(removed[0].Hashes) != 8 {
		t.Errorf("a removed unit: %+v, want its 8 blocks", removed)
	}
}
