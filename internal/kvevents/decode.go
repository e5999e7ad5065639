package kvevents

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// Kind is what an event says happened.
type Kind uint8

// The event kinds vLLM and SGLang publish; Unknown is any other (skipped).
const (
	Unknown Kind = iota
	Stored
	Removed
	Cleared
)

func (k Kind) String() string {
	return [...]string{"unknown", "BlockStored", "BlockRemoved", "AllBlocksCleared"}[k]
}

// Event is one KV-cache event, as much of it as SkyWalker uses.
type Event struct {
	Kind Kind
	// Hashes are the blocks stored or removed, in order (a stored run is a
	// chain: each block's parent is the one before it, the first's is
	// Parent). A hash published as bytes (vLLM's sha256 block hashes) is
	// its last eight bytes, big-endian, as vLLM's consumers read it.
	Hashes []uint64
	// Parent is the block a stored run continues, if HasParent.
	Parent    uint64
	HasParent bool
	// Tokens is how many token ids the stored run carried, and BlockSize
	// the tokens per block.
	Tokens, BlockSize int
	Medium            string // "GPU", "CPU", ... ("" when not said: the GPU)
	LoRAName          string
}

// Batch is one KVEventBatch.
type Batch struct {
	TS     float64
	Events []Event
	// Rank is the data-parallel rank that published it (HasRank false when
	// the batch does not say).
	Rank    int
	HasRank bool
}

// MaxBatchBytes bounds a batch payload the decoder reads.
const MaxBatchBytes = 16 << 20

// maxDepth bounds the nesting of values skipped (unknown fields).
const maxDepth = 32

// ErrBadBatch is wrapped by every decoding error.
var ErrBadBatch = errors.New("bad KV event batch")

// DecodeBatch reads a msgpack KVEventBatch in either of the shapes vLLM
// has published: an array [ts, events, data_parallel_rank] of events that
// are arrays [tag, fields...] (msgspec array_like, vLLM until mid-2026,
// SGLang), or a map {"ts", "events", "data_parallel_rank"} of events that
// are maps tagged by "type" (vLLM since). Events are read one at a time;
// fields and event types it does not know are skipped, not refused. It
// never panics on any input.
func DecodeBatch(payload []byte) (Batch, error) {
	if len(payload) > MaxBatchBytes {
		return Batch{}, fmt.Errorf("%w: %d bytes, over %d", ErrBadBatch, len(payload), MaxBatchBytes)
	}
	br := bytes.NewReader(payload)
	r := reader{d: msgpack.NewDecoder(br), in: br}
	b, err := r.batch()
	if err != nil {
		return Batch{}, fmt.Errorf("%w: %v", ErrBadBatch, err)
	}
	return b, nil
}

// reader decodes one batch. The decoder reads in without buffering (a
// bytes.Reader is a ByteScanner), so in.Len() is the bytes left: no length
// read from the input is believed past them.
type reader struct {
	d  *msgpack.Decoder
	in *bytes.Reader
}

func (r *reader) batch() (Batch, error) {
	var b Batch
	c, err := r.d.PeekCode()
	if err != nil {
		return b, err
	}
	if isMap(c) {
		n, err := r.mapLen()
		if err != nil {
			return b, err
		}
		for range n {
			key, err := r.d.DecodeString()
			if err != nil {
				return b, fmt.Errorf("batch key: %v", err)
			}
			switch key {
			case "ts":
				b.TS, err = r.float()
			case "events":
				b.Events, err = r.events()
			case "data_parallel_rank":
				b.Rank, b.HasRank, err = r.optionalInt()
			default:
				err = r.skip(0)
			}
			if err != nil {
				return b, fmt.Errorf("batch %s: %v", key, err)
			}
		}
		return b, nil
	}
	n, err := r.arrayLen()
	if err != nil {
		return b, fmt.Errorf("batch: %v", err)
	}
	if n < 2 {
		return b, fmt.Errorf("batch: an array of %d fields, want ts and events", n)
	}
	if b.TS, err = r.float(); err != nil {
		return b, fmt.Errorf("batch ts: %v", err)
	}
	if b.Events, err = r.events(); err != nil {
		return b, err
	}
	if n > 2 {
		if b.Rank, b.HasRank, err = r.optionalInt(); err != nil {
			return b, fmt.Errorf("batch data_parallel_rank: %v", err)
		}
	}
	for i := 3; i < n; i++ {
		if err := r.skip(0); err != nil {
			return b, err
		}
	}
	return b, nil
}

func (r *reader) events() ([]Event, error) {
	n, err := r.arrayLen()
	if err != nil {
		return nil, fmt.Errorf("events: %v", err)
	}
	out := make([]Event, 0, n)
	for i := range n {
		e, err := r.event()
		if err != nil {
			return nil, fmt.Errorf("event %d: %v", i, err)
		}
		if e.Kind != Unknown {
			out = append(out, e)
		}
	}
	return out, nil
}

// The fields of each event type, in the order of the array shape
// (msgspec array_like: declaration order after the tag).
var arrayFields = map[string][]string{
	"BlockStored":      {"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name"},
	"BlockRemoved":     {"block_hashes", "medium"},
	"AllBlocksCleared": {},
}

func kindOf(tag string) Kind {
	switch tag {
	case "BlockStored":
		return Stored
	case "BlockRemoved":
		return Removed
	case "AllBlocksCleared":
		return Cleared
	}
	return Unknown
}

func (r *reader) event() (Event, error) {
	var e Event
	c, err := r.d.PeekCode()
	if err != nil {
		return e, err
	}
	if isMap(c) {
		n, err := r.mapLen()
		if err != nil {
			return e, err
		}
		// The tag may come after fields: read them all, then judge.
		for range n {
			key, err := r.d.DecodeString()
			if err != nil {
				return e, fmt.Errorf("key: %v", err)
			}
			if key == "type" {
				tag, err := r.d.DecodeString()
				if err != nil {
					return e, fmt.Errorf("type: %v", err)
				}
				e.Kind = kindOf(tag)
				continue
			}
			if err := r.field(&e, key); err != nil {
				return e, fmt.Errorf("%s: %v", key, err)
			}
		}
		return e, nil
	}
	n, err := r.arrayLen()
	if err != nil {
		return e, err
	}
	if n == 0 {
		return e, errors.New("an empty event")
	}
	tag, err := r.d.DecodeString()
	if err != nil {
		return e, fmt.Errorf("tag: %v", err)
	}
	e.Kind = kindOf(tag)
	names := arrayFields[tag]
	for i := 1; i < n; i++ {
		if i-1 >= len(names) { // a field of a later release
			if err := r.skip(0); err != nil {
				return e, err
			}
			continue
		}
		if err := r.field(&e, names[i-1]); err != nil {
			return e, fmt.Errorf("%s %s: %v", tag, names[i-1], err)
		}
	}
	return e, nil
}

// field reads one named field of an event.
func (r *reader) field(e *Event, name string) error {
	var err error
	switch name {
	case "block_hashes":
		e.Hashes, err = r.hashes()
	case "parent_block_hash":
		var ok bool
		e.Parent, ok, err = r.optionalHash()
		e.HasParent = ok
	case "token_ids":
		e.Tokens, err = r.countArray()
	case "block_size":
		e.BlockSize, _, err = r.optionalInt()
	case "medium":
		e.Medium, err = r.optionalString()
	case "lora_name":
		e.LoRAName, err = r.optionalString()
	default:
		err = r.skip(0)
	}
	return err
}

// arrayLen is an array's length, checked against the bytes left (each
// element takes at least one).
func (r *reader) arrayLen() (int, error) {
	n, err := r.d.DecodeArrayLen()
	if err != nil {
		return 0, err
	}
	if left := r.in.Len(); n < 0 || n > left {
		return 0, fmt.Errorf("an array of %d elements in %d bytes", n, left)
	}
	return n, nil
}

func (r *reader) mapLen() (int, error) {
	n, err := r.d.DecodeMapLen()
	if err != nil {
		return 0, err
	}
	if left := r.in.Len(); n < 0 || 2*n > left {
		return 0, fmt.Errorf("a map of %d entries in %d bytes", n, left)
	}
	return n, nil
}

func (r *reader) hashes() ([]uint64, error) {
	n, err := r.arrayLen()
	if err != nil {
		return nil, err
	}
	out := make([]uint64, n)
	for i := range out {
		h, ok, err := r.optionalHash()
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, errors.New("a null block hash")
		}
		out[i] = h
	}
	return out, nil
}

// optionalHash reads a block hash: an integer (its 64 bits), or bytes
// (their last eight, big-endian); ok is false for nil.
func (r *reader) optionalHash() (h uint64, ok bool, err error) {
	c, err := r.d.PeekCode()
	if err != nil {
		return 0, false, err
	}
	switch {
	case c == msgpcode.Nil:
		return 0, false, r.d.DecodeNil()
	case msgpcode.IsBin(c) || msgpcode.IsString(c):
		b, err := r.bytes()
		if err != nil {
			return 0, false, err
		}
		var tail [8]byte
		copy(tail[8-min(len(b), 8):], b[max(len(b)-8, 0):])
		return binary.BigEndian.Uint64(tail[:]), true, nil
	case c == msgpcode.Uint64:
		v, err := r.d.DecodeUint64()
		return v, err == nil, err
	}
	v, err := r.d.DecodeInt64()
	return uint64(v), err == nil, err
}

// bytes reads a bin or str value whose length fits what is left (the
// library's DecodeBytes allocates whatever length the input declares).
func (r *reader) bytes() ([]byte, error) {
	n, err := r.d.DecodeBytesLen()
	if err != nil {
		return nil, err
	}
	if left := r.in.Len(); n < 0 || n > left {
		return nil, fmt.Errorf("%d bytes declared, %d left", n, left)
	}
	b := make([]byte, n)
	return b, r.d.ReadFull(b)
}

func (r *reader) optionalInt() (int, bool, error) {
	c, err := r.d.PeekCode()
	if err != nil {
		return 0, false, err
	}
	if c == msgpcode.Nil {
		return 0, false, r.d.DecodeNil()
	}
	v, err := r.d.DecodeInt64()
	if err != nil {
		return 0, false, err
	}
	if v < math.MinInt32 || v > math.MaxInt32 {
		return 0, false, fmt.Errorf("%d out of range", v)
	}
	return int(v), true, nil
}

func (r *reader) optionalString() (string, error) {
	c, err := r.d.PeekCode()
	if err != nil {
		return "", err
	}
	if c == msgpcode.Nil {
		return "", r.d.DecodeNil()
	}
	return r.d.DecodeString()
}

func (r *reader) float() (float64, error) {
	c, err := r.d.PeekCode()
	if err != nil {
		return 0, err
	}
	if c == msgpcode.Float || c == msgpcode.Double {
		return r.d.DecodeFloat64()
	}
	v, err := r.d.DecodeInt64()
	return float64(v), err
}

// countArray reads an array of scalars and returns its length (token ids:
// only how many matter here).
func (r *reader) countArray() (int, error) {
	c, err := r.d.PeekCode()
	if err != nil {
		return 0, err
	}
	if c == msgpcode.Nil {
		return 0, r.d.DecodeNil()
	}
	n, err := r.arrayLen()
	if err != nil {
		return 0, err
	}
	for range n {
		if err := r.skip(1); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// isMap reports whether c begins a msgpack map (fixmap, map 16, map 32).
func isMap(c byte) bool { return msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32 }

// skip skips one value of any type, refusing nesting deeper than maxDepth
// (the library's own Skip recurses without bound).
func (r *reader) skip(depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("values nested over %d deep", maxDepth)
	}
	c, err := r.d.PeekCode()
	if err != nil {
		return err
	}
	switch {
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		n, err := r.arrayLen()
		if err != nil {
			return err
		}
		for range n {
			if err := r.skip(depth + 1); err != nil {
				return err
			}
		}
		return nil
	case isMap(c):
		n, err := r.mapLen()
		if err != nil {
			return err
		}
		for range 2 * n {
			if err := r.skip(depth + 1); err != nil {
				return err
			}
		}
		return nil
	}
	return r.d.Skip() // a scalar, a string, bytes or an extension: no nesting
}
