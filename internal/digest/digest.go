package digest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"

	"github.com/bits-and-blooms/bloom/v3"
)

// DefaultFalsePositiveRate is the target false-positive rate at capacity.
const DefaultFalsePositiveRate = 0.01

// Digest is a Bloom filter of block hashes with the identity of the region
// (and node) that published it. A Digest is not safe for concurrent mutation;
// once published it is treated as immutable.
type Digest struct {
	Region     string
	Node       string // publishing node; empty for a merged region digest
	Generation uint64 // increases with every rebuild by the same node
	filter     *bloom.BloomFilter
	fill       float64 // fraction of bits set; < 0 when unknown since the last Add
	adds       uint    // Add calls since the fill was last counted
}

// New returns an empty digest sized so that capacity blocks give at most
// fpRate false positives (fpRate <= 0 means DefaultFalsePositiveRate).
func New(region, node string, generation uint64, capacity uint, fpRate float64) *Digest {
	if fpRate <= 0 || fpRate >= 1 {
		fpRate = DefaultFalsePositiveRate
	}
	m, k := bloom.EstimateParameters(max(capacity, 1), fpRate)
	return &Digest{Region: region, Node: node, Generation: generation, filter: bloom.New(roundWords(m), k), fill: -1}
}

// roundWords rounds a bit count up to whole 64-bit words, so the encoding
// carries no partial word.
func roundWords(m uint) uint { return (m + 63) / 64 * 64 }

// Add inserts one block hash.
func (d *Digest) Add(hash uint64) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], hash)
	d.filter.Add(b[:])
	if d.fill >= 0 { // from counted to estimated: the additions that fill implies
		k, m := float64(d.filter.K()), float64(d.filter.Cap())
		d.adds, d.fill = uint(-m/k*math.Log1p(-min(d.fill, 0.999999))), -1
	}
	d.adds++
}

// Contains reports whether the block is probably present (false positives
// at the configured rate; never false negatives).
func (d *Digest) Contains(hash uint64) bool {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], hash)
	return d.filter.Test(b[:])
}

// Bits and Hashes are the filter parameters m and k.
func (d *Digest) Bits() uint   { return d.filter.Cap() }
func (d *Digest) Hashes() uint { return d.filter.K() }

// FillRatio is the fraction of bits set; a filter far past its capacity
// approaches 1 and matches everything, so publishers rebuild before that.
//
// A digest that others may read (decoded, built, merged, patched) has its
// fill computed when it is made, so readers never write to it; only Add
// leaves it to be computed again.
//
// While a digest is being built (Add since the last count) the ratio is
// estimated from the number of additions, 1 − e^(−k·n/m), which never
// scans the filter and never writes to the digest.
func (d *Digest) FillRatio() float64 {
	if d.fill < 0 {
		k, m := float64(d.filter.K()), float64(d.filter.Cap())
		return 1 - math.Exp(-k*float64(d.adds)/m)
	}
	return d.fill
}

func (d *Digest) countFill() float64 {
	return float64(d.filter.BitSet().Count()) / float64(d.filter.Cap())
}

// seal computes the fill ratio so the digest can be shared read-only.
func (d *Digest) seal() *Digest {
	d.fill = d.countFill()
	return d
}

// maxBisectFill is the fill ratio above which MatchLength stops trusting
// bisection. A filter at its design capacity is half full; at 0.6 full a
// probe's false-positive rate is still a few percent, and the confirmation
// below catches those.
const maxBisectFill = 0.6

// MatchLength returns the number of leading request blocks probably present.
//
// A region caches whole prefixes (its index is prefix-closed), so presence
// is monotone along a request's block chain and the length is found by
// bisection: about log2(n) probes rather than n, 10 for a 100k-token prompt.
// A false positive on a probe past the true length would overshoot, so the
// answer is confirmed by checking the blocks just below it; if any is
// absent, or the filter is so overfull that false positives are common, the
// length is found by a plain scan instead.
func (d *Digest) MatchLength(blocks []uint64) int {
	if d.FillRatio() > maxBisectFill {
		return d.scan(blocks)
	}
	lo, hi := 0, len(blocks) // answer in [lo, hi]
	for lo < hi {
		mid := lo + (hi-lo)/2
		if d.Contains(blocks[mid]) {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	const confirm = 3
	for i := lo - 2; i >= max(0, lo-confirm); i-- {
		if !d.Contains(blocks[i]) {
			return d.scan(blocks)
		}
	}
	return lo
}

func (d *Digest) scan(blocks []uint64) int {
	for i, h := range blocks {
		if !d.Contains(h) {
			return i
		}
	}
	return len(blocks)
}

// Merge ORs other into d, as a region's digest is the union of its nodes'
// digests. Both must have the same parameters.
func (d *Digest) Merge(other *Digest) error {
	if err := d.filter.Merge(other.filter); err != nil {
		return fmt.Errorf("merge digest of %s/%s: %w", other.Region, other.Node, err)
	}
	d.seal()
	return nil
}

// Clone returns an independent copy, ready to be shared read-only.
func (d *Digest) Clone() *Digest {
	c := *d
	c.filter = d.filter.Copy()
	if c.fill < 0 {
		c.seal()
	}
	return &c
}

// Binary format, little endian:
//
//	magic   [4]byte "SWDG"
//	version uint8   (1)
//	region  uint8 length + bytes
//	node    uint8 length + bytes
//	gen     uint64
//	m       uint64  filter bits, a multiple of 64
//	k       uint8   hash functions
//	words   m/64 × uint64
const (
	magic   = "SWDG"
	version = 1
	// MaxBits bounds a decoded filter: 2^27 bits (16 MiB) is a million
	// blocks at well under 1e-9 false positives; nothing legitimate is larger.
	MaxBits = 1 << 27
	maxK    = 32
)

// ErrMalformed is wrapped by every Decode error.
var ErrMalformed = errors.New("malformed digest")

// MarshalBinary encodes the digest.
func (d *Digest) MarshalBinary() ([]byte, error) {
	if len(d.Region) > 255 || len(d.Node) > 255 {
		return nil, fmt.Errorf("encode digest: region or node name longer than 255 bytes")
	}
	words := d.filter.BitSet().Words()
	out := make([]byte, 0, 4+1+2+len(d.Region)+len(d.Node)+8+8+1+8*len(words))
	out = append(out, magic...)
	out = append(out, version, byte(len(d.Region)))
	out = append(out, d.Region...)
	out = append(out, byte(len(d.Node)))
	out = append(out, d.Node...)
	out = binary.LittleEndian.AppendUint64(out, d.Generation)
	out = binary.LittleEndian.AppendUint64(out, uint64(d.filter.Cap()))
	out = append(out, byte(d.filter.K()))
	for _, w := range words {
		out = binary.LittleEndian.AppendUint64(out, w)
	}
	return out, nil
}

// Decode parses an encoded digest. It checks every length against the
// input before allocating, so hostile input cannot make it allocate more
// than the input's own size, and it never panics.
func Decode(b []byte) (*Digest, error) {
	r := reader{b: b}
	if string(r.bytes(4)) != magic {
		return nil, fmt.Errorf("%w: bad magic", ErrMalformed)
	}
	if v := r.byte(); v != version {
		return nil, fmt.Errorf("%w: unsupported version %d", ErrMalformed, v)
	}
	region := string(r.bytes(int(r.byte())))
	node := string(r.bytes(int(r.byte())))
	gen := r.uint64()
	m := r.uint64()
	k := uint(r.byte())
	if r.short {
		return nil, fmt.Errorf("%w: truncated header", ErrMalformed)
	}
	if region == "" {
		return nil, fmt.Errorf("%w: empty region", ErrMalformed)
	}
	if m == 0 || m%64 != 0 || m > MaxBits {
		return nil, fmt.Errorf("%w: filter size %d bits is not a multiple of 64 in (0, %d]", ErrMalformed, m, MaxBits)
	}
	if k == 0 || k > maxK {
		return nil, fmt.Errorf("%w: %d hash functions, want 1..%d", ErrMalformed, k, maxK)
	}
	nwords := int(m / 64)
	if len(r.b)-r.off != 8*nwords {
		return nil, fmt.Errorf("%w: %d bytes of filter, want %d", ErrMalformed, len(r.b)-r.off, 8*nwords)
	}
	words := make([]uint64, nwords)
	for i := range words {
		words[i] = r.uint64()
	}
	return (&Digest{Region: region, Node: node, Generation: gen, filter: bloom.FromWithM(words, uint(m), k)}).seal(), nil
}

type reader struct {
	b     []byte
	off   int
	short bool
}

func (r *reader) bytes(n int) []byte {
	if r.short || n > len(r.b)-r.off {
		r.short = true
		return nil
	}
	out := r.b[r.off : r.off+n]
	r.off += n
	return out
}

func (r *reader) byte() byte {
	if b := r.bytes(1); b != nil {
		return b[0]
	}
	return 0
}

func (r *reader) uint64() uint64 {
	if b := r.bytes(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

// EstimatedFalsePositiveRate is the filter's false-positive rate after n
// insertions.
func (d *Digest) EstimatedFalsePositiveRate(n uint) float64 {
	k, m := float64(d.filter.K()), float64(d.filter.Cap())
	return math.Pow(1-math.Exp(-k*float64(n)/m), k)
}

// BlockSource enumerates a region's cached blocks; *prefix.Index is one.
type BlockSource interface {
	// Blocks returns how many distinct blocks ForEachBlock will visit.
	Blocks() int
	// ForEachBlock calls fn once per distinct cached block.
	ForEachBlock(fn func(hash uint64))
}

// Build returns a digest of every block in src, sized for capacity blocks or
// for src's current size if that is larger, so the false-positive rate
// stays at fpRate.
func Build(src BlockSource, region, node string, generation uint64, capacity uint, fpRate float64) *Digest {
	d := New(region, node, generation, max(capacity, uint(src.Blocks())), fpRate)
	src.ForEachBlock(d.Add)
	return d.seal()
}

// Words returns the filter's bit words. The caller must not modify them.
func (d *Digest) Words() []uint64 { return d.filter.BitSet().Words() }

// AddedSince returns, ascending, the positions of the bits d has set and
// old has not, when d is old with bits added (the same size and hash
// count, and every bit of old still set in d): the whole change between
// two generations of a growing filter. ok is false otherwise (a rebuilt
// or resized filter), and the change must then travel whole.
func (d *Digest) AddedSince(old *Digest) (positions []uint64, ok bool) {
	if old == nil || d.Bits() != old.Bits() || d.Hashes() != old.Hashes() {
		return nil, false
	}
	cw, ow := d.Words(), old.Words()
	for i, w := range cw {
		if ow[i]&^w != 0 {
			return nil, false // a bit was cleared: not a growth of old
		}
		for added := w &^ ow[i]; added != 0; added &= added - 1 {
			positions = append(positions, uint64(i)*64+uint64(bits.TrailingZeros64(added)))
		}
	}
	return positions, true
}

// WithBits returns a copy of d with the bits at positions set, as a
// receiver applies AddedSince; generation is the copy's new generation.
func (d *Digest) WithBits(positions []uint64, generation uint64) (*Digest, error) {
	c := d.Clone()
	w := c.filter.BitSet().Words()
	for _, p := range positions {
		if p/64 >= uint64(len(w)) {
			return nil, fmt.Errorf("digest bits: bit %d out of range (%d bits)", p, 64*len(w))
		}
		w[p/64] |= 1 << (p % 64)
	}
	c.Generation = generation
	return c.seal(), nil
}

// WithWords returns a copy of d whose words at the given indexes are
// replaced, as a receiver applies a delta; generation is the copy's new
// generation. Indexes must be in range.
func (d *Digest) WithWords(indexes []uint32, words []uint64, generation uint64) (*Digest, error) {
	c := d.Clone()
	w := c.filter.BitSet().Words()
	for i, idx := range indexes {
		if int(idx) >= len(w) {
			return nil, fmt.Errorf("digest delta: word %d out of range (%d words)", idx, len(w))
		}
		w[idx] = words[i]
	}
	c.Generation = generation
	return c.seal(), nil
}
