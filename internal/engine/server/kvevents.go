package server

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"

	"skywalker/internal/kvevents"
	"skywalker/internal/kvevents/kvzmq"
)

// KVEventsConfig is vLLM's --kv-events-config, the fields it reads: with
// Enable, the engine publishes what its prefix cache stores and evicts on
// a ZeroMQ PUB socket at Endpoint (and answers replay requests at
// ReplayEndpoint), one batch per engine step.
type KVEventsConfig struct {
	Enable         bool   `json:"enable_kv_cache_events"`
	Publisher      string `json:"publisher"` // "zmq" (the only one served)
	Endpoint       string `json:"endpoint"`
	ReplayEndpoint string `json:"replay_endpoint"`
	Topic          string `json:"topic"`
	BufferSteps    int    `json:"buffer_steps"`
}

// ParseKVEventsConfig reads --kv-events-config's JSON strictly.
func ParseKVEventsConfig(s string) (KVEventsConfig, error) {
	var c KVEventsConfig
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("kv-events-config: %w", err)
	}
	if c.Enable && c.Publisher != "" && c.Publisher != "zmq" {
		return c, fmt.Errorf("kv-events-config: publisher %q: only zmq is served", c.Publisher)
	}
	if c.Enable && c.Endpoint == "" {
		c.Endpoint = "tcp://*:5557" // vLLM's default
	}
	return c, nil
}

// startKVEvents opens the publisher when configured.
func (s *Server) startKVEvents() error {
	c := s.cfg.KVEvents
	if !c.Enable {
		return nil
	}
	p, err := kvzmq.Listen(s.ctx, kvzmq.PublisherConfig{Endpoint: c.Endpoint, ReplayEndpoint: c.ReplayEndpoint, Topic: c.Topic, Buffer: c.BufferSteps})
	if err != nil {
		return err
	}
	s.kv = p
	return nil
}

// publishKVEvents publishes what the engine's last step stored and evicted
// (called without the server's lock). The engine's prefix units (the
// router's 128-token blocks) are published as vLLM publishes its cache:
// blocks of the engine's block size (16 tokens) with hashes of their own —
// opaque to the router, which must learn what they are — chained from
// parent to child. Faults drop batches (kept for replay or not) and
// restart the sequence, for tests.
func (s *Server) publishKVEvents(units []kvevents.Event) {
	if s.kv == nil || len(units) == 0 {
		return
	}
	b := kvevents.Batch{TS: float64(time.Now().UnixNano()) / 1e9, Events: toEngineBlocks(units, s.eng.Config().BlockSize), HasRank: true}
	payload := kvevents.EncodeBatch(b, s.cfg.KVEventsShape)
	s.kvBatches++
	f := s.cfg.Faults
	switch {
	case f.KVRestartAfter > 0 && s.kvBatches == f.KVRestartAfter:
		s.kv.Restart()
		_ = s.kv.Publish(payload)
	case f.KVDropEvery > 0 && s.kvBatches%f.KVDropEvery == 0:
		s.kv.Skip(payload, true)
	case f.KVForgetEvery > 0 && s.kvBatches%f.KVForgetEvery == 0:
		s.kv.Skip(payload, false)
	default:
		_ = s.kv.Publish(payload)
	}
}

// toEngineBlocks splits each prefix unit into engine blocks of blockSize
// tokens (a partial tail is not cached, as in vLLM) with derived hashes.
func toEngineBlocks(units []kvevents.Event, blockSize int) []kvevents.Event {
	blockSize = max(blockSize, 1)
	out := make([]kvevents.Event, 0, len(units))
	for _, u := range units {
		e := kvevents.Event{Kind: u.Kind, Medium: u.Medium, LoRAName: u.LoRAName, BlockSize: blockSize}
		per := max(u.BlockSize/blockSize, 1) // engine blocks per full unit
		switch u.Kind {
		case kvevents.Stored:
			if u.HasParent {
				e.Parent, e.HasParent = engineBlock(u.Parent, per-1), true
			}
			left := u.Tokens
			for _, h := range u.Hashes {
				n := min(left, u.BlockSize) / blockSize
				for k := range n {
					e.Hashes = append(e.Hashes, engineBlock(h, k))
				}
				e.Tokens += n * blockSize
				left -= min(left, u.BlockSize)
			}
			if len(e.Hashes) == 0 {
				continue
			}
		case kvevents.Removed:
			for _, h := range u.Hashes {
				for k := range per {
					e.Hashes = append(e.Hashes, engineBlock(h, k))
				}
			}
		}
		out = append(out, e)
	}
	return out
}

// engineBlock is the hash of the k-th engine block of a prefix unit.
func engineBlock(unit uint64, k int) uint64 {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], unit)
	binary.LittleEndian.PutUint64(b[8:], uint64(k))
	return xxhash.Sum64(b[:])
}

// kvEventSources serves /kv_event_sources as vLLM does: where each
// data-parallel rank publishes (one here).
func (s *Server) kvEventSources(w http.ResponseWriter, _ *http.Request) {
	type source struct {
		Rank           int    `json:"data_parallel_rank"`
		Endpoint       string `json:"endpoint"`
		ReplayEndpoint string `json:"replay_endpoint,omitempty"`
		Topic          string `json:"topic"`
	}
	list := struct {
		Sources []source `json:"sources"`
	}{Sources: []source{}}
	if s.kv != nil {
		src := source{Endpoint: "tcp://*:" + port(s.kv.Addr()), Topic: s.cfg.KVEvents.Topic}
		if a := s.kv.ReplayAddr(); a != "" {
			src.ReplayEndpoint = "tcp://*:" + port(a)
		}
		list.Sources = append(list.Sources, src)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(list)
}

// port is the port of a host:port address.
func port(addr string) string {
	if i := strings.LastIndexByte(addr, ':'); i >= 0 {
		return addr[i+1:]
	}
	return addr
}
