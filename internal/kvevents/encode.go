package kvevents

import (
	"bytes"

	"github.com/vmihailenco/msgpack/v5"
)

// Shape is how a batch is laid out on the wire.
type Shape uint8

// The shapes vLLM has published (see DecodeBatch).
const (
	// MapShape: maps, events tagged by "type" (vLLM since mid-2026).
	MapShape Shape = iota
	// ArrayShape: arrays, events tagged by their first element
	// (msgspec array_like: vLLM until mid-2026, SGLang).
	ArrayShape
)

// EncodeBatch writes b as vLLM's publisher does in shape: the engine
// simulator's side of the wire (skywalker engine --kv-events-config).
// BlockStored carries token ids as zeros (their count is what matters
// here), lora_id null.
func EncodeBatch(b Batch, shape Shape) []byte {
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	rank := func() {
		if b.HasRank {
			_ = e.EncodeInt(int64(b.Rank))
		} else {
			_ = e.EncodeNil()
		}
	}
	if shape == ArrayShape {
		_ = e.EncodeArrayLen(3)
		_ = e.EncodeFloat64(b.TS)
		_ = e.EncodeArrayLen(len(b.Events))
		for i := range b.Events {
			encodeEvent(e, &b.Events[i], shape)
		}
		rank()
		return buf.Bytes()
	}
	_ = e.EncodeMapLen(3)
	_ = e.EncodeString("ts")
	_ = e.EncodeFloat64(b.TS)
	_ = e.EncodeString("events")
	_ = e.EncodeArrayLen(len(b.Events))
	for i := range b.Events {
		encodeEvent(e, &b.Events[i], shape)
	}
	_ = e.EncodeString("data_parallel_rank")
	rank()
	return buf.Bytes()
}

func encodeEvent(e *msgpack.Encoder, ev *Event, shape Shape) {
	optString := func(s string) {
		if s == "" {
			_ = e.EncodeNil()
		} else {
			_ = e.EncodeString(s)
		}
	}
	hashes := func() {
		_ = e.EncodeArrayLen(len(ev.Hashes))
		for _, h := range ev.Hashes {
			_ = e.EncodeUint64(h)
		}
	}
	type field struct {
		name  string
		write func()
	}
	var fields []field
	switch ev.Kind {
	case Stored:
		fields = []field{
			{"block_hashes", hashes},
			{"parent_block_hash", func() {
				if ev.HasParent {
					_ = e.EncodeUint64(ev.Parent)
				} else {
					_ = e.EncodeNil()
				}
			}},
			{"token_ids", func() {
				_ = e.EncodeArrayLen(ev.Tokens)
				for range ev.Tokens {
					_ = e.EncodeInt(0)
				}
			}},
			{"block_size", func() { _ = e.EncodeInt(int64(ev.BlockSize)) }},
			{"lora_id", func() { _ = e.EncodeNil() }},
			{"medium", func() { optString(ev.Medium) }},
			{"lora_name", func() { optString(ev.LoRAName) }},
		}
	case Removed:
		fields = []field{{"block_hashes", hashes}, {"medium", func() { optString(ev.Medium) }}}
	}
	if shape == ArrayShape {
		_ = e.EncodeArrayLen(1 + len(fields))
		_ = e.EncodeString(ev.Kind.String())
		for _, f := range fields {
			f.write()
		}
		return
	}
	_ = e.EncodeMapLen(1 + len(fields))
	_ = e.EncodeString("type")
	_ = e.EncodeString(ev.Kind.String())
	for _, f := range fields {
		_ = e.EncodeString(f.name)
		f.write()
	}
}
