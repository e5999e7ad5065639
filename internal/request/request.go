package request

import (
	"encoding/binary"
	"encoding/json"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/zeebo/xxh3"
)

// BytesPerToken is the estimate of prompt bytes per token used when a body's
// tokens are not counted by a tokenizer (about 4 for English text under
// Llama-3 and GPT tokenizers).
const BytesPerToken = 4

// DefaultBlockBytes is the default prefix block size in rendered bytes: 512
// bytes, so about 128 tokens per block.
const DefaultBlockBytes = 512

// DefaultSeed seeds the block hash chain. Every proxy and engine of one
// deployment must use the same seed, or their digests will never match.
const DefaultSeed uint64 = 0x534b_5957_414c_4b52 // "SKYWALKR"

// Request is what a routing policy knows about one inference request.
type Request struct {
	ID     string // unique per request; assigned by the driver
	Region string // ingress region: where the client connected

	Model   string
	modelAt [2]int // the model's JSON string in the body, quotes included; zero if none
	// Base is the base model whose pool serves the request (the model it
	// names, or a LoRA adapter's parent) and Adapter the LoRA adapter it
	// names, if any (see SetPool): "" and "" in a fleet of one unnamed
	// model (the simulator's single-model scenarios).
	Base, Adapter string
	salt          uint64 // what the blocks are salted with (PoolSalt)

	PromptTokens int // estimated prompt tokens
	MaxTokens    int // requested output limit; 0 when the client gave none

	// Blocks are chained prefix hashes: Blocks[i] stands for the whole prompt
	// up to the end of block i. Only complete blocks are hashed, because only
	// complete blocks are reusable from a KV cache.
	Blocks      []uint64
	BlockTokens int // tokens covered by one block

	Residency string // jurisdiction the request must be served in, lower case; "" for anywhere
	// Session is the client's session or user key — prompt_cache_key,
	// else session_id, else user or metadata.session_id — for consistent
	// hashing; may be empty.
	Session    string
	cacheKey   bool // Session is the body's prompt_cache_key
	sessionKey bool // Session is the body's session_id
	// Affinity is the client's explicit session key for session affinity:
	// the body's prompt_cache_key, else its session_id (as vLLM reads
	// it), else the session header (SetAffinityHeader). Empty: none.
	Affinity string

	// PreviousResponse is a Responses request's previous_response_id, as
	// the client sent it (previousAt: its JSON string in the body); Home
	// is where that response lives, once the driver has decoded it: the
	// request must go there (see Home).
	PreviousResponse string
	previousAt       [2]int
	Home             Home
	// Resent: a Responses input carries an earlier turn's output (an
	// assistant message, a function call, reasoning): the client resends
	// its conversation whole, so the request can start its chain over
	// when the previous response is gone. StartOver: the driver allows it
	// to (the operator does, and Resent) — policy.Homing then routes it as
	// a new request instead of refusing it, and it is sent without its
	// previous_response_id (WithoutPrevious).
	Resent, StartOver bool
	// StartedOver: the chain's home engine had lost the previous response
	// and the request was sent there again as a new chain (set by the
	// region core, region.Attempt.Answered).
	StartedOver bool
	// Store and Background are a Responses request's store and background.
	Store, Background bool
	// Priority is the body's vLLM priority field, passed to the engine as
	// sent; the balancer orders by Class, never by it.
	Priority int
	// Class is the priority class (X-SkyWalker-Priority, metadata.priority).
	Class    Class
	classSet bool // the body named a class
	// Tenant groups requests for fair queuing (from a configurable header;
	// "" is one shared flow).
	Tenant string
	// Owner is who what the request stores (a Responses chain) belongs to:
	// an authenticated identity (a trusted tenant header, an API key's
	// hash), "" for none.
	Owner string
	// Wait: the client asked to be held rather than refused when the
	// request cannot start within its objective (X-SkyWalker-Wait,
	// metadata.wait).
	Wait bool

	Stream       bool
	IncludeUsage bool // stream_options.include_usage

	Arrival  time.Time // when the request reached its ingress balancer
	Deadline time.Time // zero: the balancer's default wait bound applies

	// Forwarded marks a request another region already routed here; it must
	// be served locally and never forwarded again (one hop at most).
	Forwarded bool
	// ServeHere marks a request of this region whose forward failed: the
	// region core sets it when it routes the request again, and it is then
	// served here, never forwarded (its peer was tried). Unlike Forwarded
	// the request is still this region's own: its route reason is the
	// local rule's, and it counts in this region's demand.
	ServeHere bool
}

// SetAffinityHeader takes the session header's value (x-session-id, or
// the configured one) as the affinity key, unless the body gave a
// prompt_cache_key or a session_id.
func (r *Request) SetAffinityHeader(value string) {
	if value = strings.TrimSpace(value); value != "" && !r.cacheKey && !r.sessionKey {
		r.Affinity = value
	}
}

// Home is where a Responses chain lives: the region and the replica (its
// name in that region's pool) whose engine holds the previous response.
// A request with a Home goes there or nowhere. The zero Home is none.
type Home struct {
	Region, Replica string
}

// IsZero reports whether h names no home.
func (h Home) IsZero() bool { return h.Replica == "" }

// StaysHere reports whether the request must be served in the region that
// holds it: it was forwarded in, or its own forward failed.
func (r *Request) StaysHere() bool { return r.Forwarded || r.ServeHere }

// AllowedIn reports whether the request may be served in a region of the
// given jurisdiction.
func (r *Request) AllowedIn(jurisdiction string) bool {
	return r.Residency == "" || strings.EqualFold(r.Residency, jurisdiction)
}

// CachedTokens converts a count of matched leading blocks into prompt tokens,
// never more than the prompt itself.
func (r *Request) CachedTokens(blocks int) int {
	return min(blocks*r.BlockTokens, r.PromptTokens)
}

// TraceRecord is one request of a trace whose prefix blocks are given as ids
// (the Mooncake trace: equal leading ids mean a reusable KV-cache prefix).
type TraceRecord struct {
	InputTokens  int
	OutputTokens int
	BlockIDs     []uint64
	BlockTokens  int // tokens per block id: 512 in the Mooncake trace
	Session      string
}

// FromTrace builds a Request from a trace record. The ids are chain-hashed
// with seed, so two records share block hashes exactly as far as their id
// lists agree, and trace requests flow through the same prefix index and
// digests as parsed ones.
func FromTrace(rec TraceRecord, seed uint64) *Request {
	blocks := make([]uint64, len(rec.BlockIDs))
	parent := seed
	for i, id := range rec.BlockIDs {
		parent = ChainBlockID(parent, id, seed)
		blocks[i] = parent
	}
	return &Request{
		PromptTokens: rec.InputTokens,
		MaxTokens:    rec.OutputTokens,
		Blocks:       blocks,
		BlockTokens:  rec.BlockTokens,
		Session:      rec.Session,
	}
}

// ChainBlockID extends a hash chain (whose empty parent is seed) by one
// block known only by an id, as FromTrace does for every id.
func ChainBlockID(parent, id, seed uint64) uint64 {
	var buf [8]byte
	binary.LittleEndian.PutUint64(buf[:], id)
	return chainHash(parent, seed, buf[:])
}

// chainHash extends a chain of trace block ids: the parent is folded into
// the xxhash64 seed, so the result stands for the whole prefix. (Rendered
// bytes are chained with XXH3 instead, see blockChain; ids are 8 bytes,
// where XXH3 gains nothing, and every simulated result depends on them.)
func chainHash(parent, seed uint64, block []byte) uint64 {
	var d xxhash.Digest
	d.ResetWithSeed(parent ^ seed)
	_, _ = d.Write(block)
	return d.Sum64()
}

// blockChain hashes a rendering into chained blocks as it grows: each
// complete block is hashed with XXH3, and that hash with XXH3 seeded by the
// parent's hash (and the chain's seed), so a block's hash stands for the
// whole prompt up to it.
type blockChain struct {
	blockBytes   int
	seed, parent uint64
	hashed       int // bytes of the rendering already hashed
	blocks       []uint64
}

// hash appends the hashes of the blocks rendered has completed since the
// last call; rendered must extend what was passed before.
func (c *blockChain) hash(rendered []byte) {
	for len(rendered)-c.hashed >= c.blockBytes {
		var h [8]byte // the block's own hash, then chained: a seeded XXH3 over 8 bytes is cheap, over a block it is not
		binary.LittleEndian.PutUint64(h[:], xxh3.Hash(rendered[c.hashed:c.hashed+c.blockBytes]))
		c.parent = xxh3.HashSeed(h[:], c.parent^c.seed)
		c.blocks = append(c.blocks, c.parent)
		c.hashed += c.blockBytes
	}
}

// HashBlocks cuts rendered prompt bytes into blockBytes-sized blocks and
// appends the chained hash of every complete block to dst, as Parse does.
func HashBlocks(dst []uint64, rendered []byte, blockBytes int, seed uint64) []uint64 {
	c := blockChain{blockBytes: blockBytes, seed: seed, parent: seed, blocks: dst}
	c.hash(rendered)
	return c.blocks
}

// PoolSalt is what the blocks of a request for base model base and LoRA
// adapter adapter are salted with: zero for neither, else a hash of both,
// so that two models, or two adapters of one model, never share a cached
// prefix (vLLM folds the LoRA id into its block hashes too) while every
// proxy and every region salts alike.
func PoolSalt(base, adapter string) uint64 {
	if base == "" && adapter == "" {
		return 0
	}
	return xxh3.HashString(base + "\x00" + adapter)
}

// SetPool names the pool that serves the request — its base model and
// LoRA adapter — and salts its blocks by them (PoolSalt), replacing any
// earlier salt. The salt is XORed into every chained hash: block i still
// stands for the whole prompt up to it, now under that model.
func (r *Request) SetPool(base, adapter string) {
	salt := PoolSalt(base, adapter)
	if d := salt ^ r.salt; d != 0 {
		for i := range r.Blocks {
			r.Blocks[i] ^= d
		}
	}
	r.Base, r.Adapter, r.salt = base, adapter, salt
}

// RewriteModel returns body with the request's model replaced by model
// (an alias resolved to the name the engines serve); body must be the one
// the request was parsed from. A body without a model string is returned
// as it is. The request's Model becomes model.
func (r *Request) RewriteModel(body []byte, model string) []byte {
	out, ok := replaceString(body, &r.modelAt, model, &r.previousAt)
	if ok {
		r.Model = model
	}
	return out
}

// RewritePrevious returns body with the request's previous_response_id
// replaced by id (the engine's own id for the proxy's); body must be the
// one the request was parsed from, as RewriteModel left it. A body
// without one is returned as it is.
func (r *Request) RewritePrevious(body []byte, id string) []byte {
	out, _ := replaceString(body, &r.previousAt, id, &r.modelAt)
	return out
}

// WithoutPrevious returns a copy of body with the request's
// previous_response_id set to null: the request as a new chain, for a
// chain that starts over (StartOver). body must be the one the request
// was parsed from, as RewriteModel left it, before RewritePrevious. A body
// without one is returned as it is.
func (r *Request) WithoutPrevious(body []byte) []byte {
	start, end := r.previousAt[0], r.previousAt[1]
	if end <= start || end > len(body) || body[start] != '"' {
		return body
	}
	out := make([]byte, 0, len(body)-(end-start)+4)
	return append(append(append(out, body[:start]...), "null"...), body[end:]...)
}

// replaceString replaces the JSON string at *at in body with value,
// moving *other (another string's place) if it lies after.
func replaceString(body []byte, at *[2]int, value string, other *[2]int) ([]byte, bool) {
	start, end := at[0], at[1]
	if end <= start || end > len(body) || body[start] != '"' {
		return body, false
	}
	quoted, _ := json.Marshal(value) // a string always marshals
	out := make([]byte, 0, len(body)-(end-start)+len(quoted))
	out = append(append(append(out, body[:start]...), quoted...), body[end:]...)
	*at = [2]int{start, start + len(quoted)}
	if shift := len(quoted) - (end - start); other[0] >= end {
		other[0] += shift
		other[1] += shift
	}
	return out, true
}
