package mesh

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"skywalker/internal/digest"
	"skywalker/internal/region"
)

// Wire formats. Every message starts with "SW", a format version and a
// type. Strings are a length byte and bytes; integers are uvarints. Every
// decoder checks lengths against the input before using them and never
// panics (FuzzDecode).
const (
	// wireVersion 2 added QueuedTokens, Offloading and PrefillTokens to
	// load summaries; version 3 a flags field (flagDraining); version 4
	// the cache fields FreeCacheTokens and HitShare (in millionths);
	// version 5 the sender's incarnation after the sequence number, so
	// that a restarted node is heard at once; version 6 the sender's wall
	// clock at sending (Unix milliseconds, last), so that peers measure
	// its clock's offset; version 7 the load of each model the node
	// serves (a count, then per model its name and the load fields);
	// version 8 the engines' hardware and learned speed (Load.Hardware,
	// Speed in thousandths, SpeedMeasured), the aggregate's then each
	// model's, last. Messages are sent as version 8; nodes of a release before 5 refuse
	// them, which to them is the same as the node falling silent, so a
	// mesh is upgraded whole (README, Deployment). Versions 1 to 6 are
	// still read (the fields they lack zero: no eviction is priced for
	// such a peer, its incarnation is 0, its clock is taken to agree, and
	// it lists no models: it is forwarded only the models this node
	// serves; before 8 it names no hardware, and its speed is taken as
	// its prefill profile says).
	wireVersion    = 8
	minWireVersion = 1
	flagDraining   = 1 << 0

	msgLoad   = 1 // a node's load summary
	msgDigest = 2 // a node's full prefix digest
	msgDelta  = 3 // the words of a digest that changed since a generation (read, no longer sent)
	msgBits   = 4 // the bits a digest gained since a generation
	msgWant   = 5 // "send me your whole digest": a node that lacks it pulls it
	// msgDispatches: what a node dispatched (and what ended), for the
	// other nodes of its region only (region/siblings.go).
	msgDispatches = 6

	// MaxMessageBytes bounds every message a peer may send us: a full
	// digest of the largest legal filter plus headers.
	MaxMessageBytes = 17 << 20
)

// ErrBadMessage is wrapped by every decode error.
var ErrBadMessage = errors.New("bad mesh message")

// loadMsg is a load summary on the wire.
type loadMsg struct {
	Node string
	// Incarnation identifies the sending process (its start time): a
	// higher one is a restart, whose sequence starts over.
	Incarnation uint64
	Seq         uint64 // increases with every summary from the process
	Load        region.Load
	SentAt      time.Time // the sender's wall clock, to the millisecond; zero before version 6
}

// deltaMsg carries the words of a node's digest that changed between two
// generations.
type deltaMsg struct {
	Node    string
	Base    uint64 // generation the delta applies to
	Gen     uint64 // generation after applying it
	Indexes []uint32
	Words   []uint64
}

// bitsMsg carries the bits a node's digest gained between two
// generations (digest.AddedSince), as ascending positions stored as gaps:
// about 2 bytes a bit, a fifth of a word delta's size.
type bitsMsg struct {
	Node      string
	Base      uint64 // generation the bits apply to
	Gen       uint64 // generation after applying them
	Positions []uint64
}

type writer struct{ b []byte }

func (w *writer) header(typ byte) { w.headerVersion(typ, wireVersion) }
func (w *writer) headerVersion(typ, version byte) {
	w.b = append(w.b, 'S', 'W', version, typ)
}
func (w *writer) str(s string) {
	if len(s) > 255 {
		s = s[:255]
	}
	w.b = append(w.b, byte(len(s)))
	w.b = append(w.b, s...)
}
func (w *writer) uvarint(v uint64) { w.b = binary.AppendUvarint(w.b, v) }
func (w *writer) u64(v uint64)     { w.b = binary.LittleEndian.AppendUint64(w.b, v) }

func encodeLoad(m loadMsg) []byte {
	w := writer{b: make([]byte, 0, 96)}
	var flags uint64
	if m.Load.Draining {
		flags |= flagDraining
	}
	w.header(msgLoad)
	w.str(m.Node)
	w.uvarint(m.Seq)
	w.uvarint(m.Incarnation)
	l := m.Load
	w.loadFields(l, flags)
	if !m.SentAt.IsZero() {
		w.uvarint(uint64(max(m.SentAt.UnixMilli(), 0)))
	} else {
		w.uvarint(0)
	}
	w.uvarint(uint64(min(len(l.Models), maxModels)))
	for _, ml := range l.Models[:min(len(l.Models), maxModels)] {
		w.str(ml.Model)
		w.loadFields(ml, 0)
	}
	w.speedFields(l)
	for _, ml := range l.Models[:min(len(l.Models), maxModels)] {
		w.speedFields(ml)
	}
	return w.b
}

// speedScale is the resolution of a load's speed on the wire.
const speedScale = 1000

// speedFields writes a load's hardware and learned speed (version 8).
func (w *writer) speedFields(l region.Load) {
	w.str(l.Hardware)
	w.uvarint(uint64(math.Round(min(max(l.Speed, 0), maxWireSpeed) * speedScale)))
	measured := uint64(0)
	if l.SpeedMeasured {
		measured = 1
	}
	w.uvarint(measured)
}

// maxWireSpeed bounds a speed read off the wire (the region core learns
// at most 64).
const maxWireSpeed = 1000

// maxModels bounds the models one load summary lists.
const maxModels = 64

// loadFields writes the fields of one load, the aggregate's or a model's.
func (w *writer) loadFields(l region.Load, flags uint64) {
	for _, v := range []int64{int64(l.QueueWait), int64(l.Queued), int64(l.Replicas), int64(l.Slots), int64(l.Outstanding),
		int64(l.Prefill.Fixed), int64(l.Prefill.PerToken)} {
		w.uvarint(uint64(max(v, 0)))
	}
	w.u64(math.Float64bits(l.Prefill.PerTokenSquared))
	w.uvarint(uint64(max(l.QueuedTokens, 0)))
	w.uvarint(uint64(max(l.Offloading, 0)))
	w.uvarint(uint64(max(l.PrefillTokens, 0)))
	w.uvarint(flags)
	w.uvarint(uint64(max(l.FreeCacheTokens, 0)))
	w.uvarint(uint64(math.Round(min(max(l.HitShare, 0), 1) * hitShareScale)))
}

func encodeDigest(node string, digest []byte) []byte {
	w := writer{b: make([]byte, 0, len(digest)+len(node)+8)}
	w.header(msgDigest)
	w.str(node)
	w.b = append(w.b, digest...)
	return w.b
}

func encodeDelta(m deltaMsg) []byte {
	w := writer{b: make([]byte, 0, 32+10*len(m.Words))}
	w.header(msgDelta)
	w.str(m.Node)
	w.uvarint(m.Base)
	w.uvarint(m.Gen)
	w.uvarint(uint64(len(m.Words)))
	prev := uint32(0)
	for i, idx := range m.Indexes {
		w.uvarint(uint64(idx - prev)) // ascending: store gaps
		prev = idx
		w.u64(m.Words[i])
	}
	return w.b
}

func encodeBits(m bitsMsg) []byte {
	w := writer{b: make([]byte, 0, 32+2*len(m.Positions))}
	w.header(msgBits)
	w.str(m.Node)
	w.uvarint(m.Base)
	w.uvarint(m.Gen)
	w.uvarint(uint64(len(m.Positions)))
	prev := uint64(0)
	for _, p := range m.Positions {
		w.uvarint(p - prev) // ascending: store gaps
		prev = p
	}
	return w.b
}

// encodeWant asks for the sender's whole digest; node is the asker.
func encodeWant(node string) []byte {
	w := writer{}
	w.header(msgWant)
	w.str(node)
	return w.b
}

// Dispatch records: a count, then each record's model, replica, number
// and flags (1: ended); a dispatch then has its block tokens, cached
// blocks, sending time (Unix nanoseconds) and blocks (a count, then 8
// bytes each).
const (
	flagEnded = 1 << 0
	// maxDispatchBytes is what one message of dispatches carries at most
	// (more go in further messages).
	maxDispatchBytes = 256 << 10
)

// encodeDispatches encodes told in messages of at most maxDispatchBytes
// (a record larger than that alone in its own).
func encodeDispatches(node string, told []region.SiblingDispatch) [][]byte {
	var out [][]byte
	for len(told) > 0 {
		body := writer{}
		n := 0
		for n < len(told) && (n == 0 || len(body.b)+dispatchSize(told[n]) <= maxDispatchBytes) {
			d := told[n]
			body.str(d.Model)
			body.str(d.Replica)
			body.uvarint(d.ID)
			if d.Ended {
				body.uvarint(flagEnded)
			} else {
				body.uvarint(0)
				body.uvarint(uint64(max(d.BlockTokens, 0)))
				body.uvarint(uint64(max(d.Cached, 0)))
				body.uvarint(uint64(max(d.Sent.UnixNano(), 0)))
				body.uvarint(uint64(len(d.Blocks)))
				for _, h := range d.Blocks {
					body.u64(h)
				}
			}
			n++
		}
		w := writer{}
		w.header(msgDispatches)
		w.str(node)
		w.uvarint(uint64(n))
		w.b = append(w.b, body.b...)
		out = append(out, w.b)
		told = told[n:]
	}
	return out
}

// dispatchSize bounds a record's encoded size.
func dispatchSize(d region.SiblingDispatch) int {
	return 2 + len(d.Model) + len(d.Replica) + 5*10 + 8*len(d.Blocks)
}

// maxBlockTokens bounds a dispatch's block size on the wire.
const maxBlockTokens = 1 << 20

func decodeDispatches(r *reader) (string, []region.SiblingDispatch, error) {
	node := r.str()
	if r.err == nil && node == "" {
		r.fail("empty node name")
	}
	// Each record takes at least five bytes, so the input bounds the count.
	n := r.count((len(r.b) - r.off) / 5)
	var told []region.SiblingDispatch
	for i := 0; i < n && r.err == nil; i++ {
		d := region.SiblingDispatch{Model: r.str(), Replica: r.str(), ID: r.uvarint()}
		switch flags := r.uvarint(); flags {
		case flagEnded:
			d.Ended = true
		case 0:
			d.BlockTokens = r.count(maxBlockTokens)
			d.Cached = r.count(math.MaxInt32)
			sent := r.uvarint()
			if sent > math.MaxInt64 {
				r.fail("sending time out of range")
			}
			d.Sent = time.Unix(0, int64(sent))
			blocks := r.count((len(r.b) - r.off) / 8)
			d.Blocks = make([]uint64, 0, blocks)
			for range blocks {
				d.Blocks = append(d.Blocks, r.u64())
			}
			if d.BlockTokens == 0 || d.Cached > len(d.Blocks) {
				r.fail("a dispatch of %d-token blocks, %d of %d cached", d.BlockTokens, d.Cached, len(d.Blocks))
			}
		default:
			r.fail("unknown dispatch flags %d", flags)
		}
		if d.ID == 0 || d.Replica == "" {
			r.fail("a record without a number or a replica")
		}
		told = append(told, d)
	}
	r.end()
	if r.err != nil {
		return "", nil, r.err
	}
	return node, told, nil
}

type reader struct {
	b       []byte
	off     int
	err     error
	version byte
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", ErrBadMessage, fmt.Sprintf(format, args...))
	}
}

func (r *reader) byte() byte {
	if r.err != nil || r.off >= len(r.b) {
		r.fail("truncated")
		return 0
	}
	c := r.b[r.off]
	r.off++
	return c
}

func (r *reader) str() string {
	n := int(r.byte())
	if r.err != nil || n > len(r.b)-r.off {
		r.fail("truncated string")
		return ""
	}
	s := string(r.b[r.off : r.off+n])
	r.off += n
	return s
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		r.fail("bad varint")
		return 0
	}
	r.off += n
	return v
}

// count reads a uvarint that must fit an int no larger than limit.
func (r *reader) count(limit int) int {
	v := r.uvarint()
	if v > uint64(limit) {
		r.fail("value %d over %d", v, limit)
		return 0
	}
	return int(v)
}

func (r *reader) u64() uint64 {
	if r.err != nil || len(r.b)-r.off < 8 {
		r.fail("truncated")
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b[r.off:])
	r.off += 8
	return v
}

// decodeHeader checks the magic and version and returns the type.
func decodeHeader(b []byte) (byte, *reader, error) {
	if len(b) > MaxMessageBytes {
		return 0, nil, fmt.Errorf("%w: %d bytes, over %d", ErrBadMessage, len(b), MaxMessageBytes)
	}
	if len(b) < 4 || b[0] != 'S' || b[1] != 'W' {
		return 0, nil, fmt.Errorf("%w: bad magic", ErrBadMessage)
	}
	if b[2] < minWireVersion || b[2] > wireVersion {
		return 0, nil, fmt.Errorf("%w: unsupported version %d", ErrBadMessage, b[2])
	}
	return b[3], &reader{b: b, off: 4, version: b[2]}, nil
}

const maxCount = 1 << 40 // bounds durations (ns, ~18 min) and counts on the wire

// maxUnixMilli bounds a wall-clock time on the wire (the year 2286).
const maxUnixMilli = 1 << 53

// hitShareScale is the unit of a load summary's hit share on the wire:
// millionths.
const hitShareScale = 1_000_000

func decodeLoad(r *reader) (loadMsg, error) {
	var m loadMsg
	m.Node = r.str()
	m.Seq = r.uvarint()
	if r.version >= 5 {
		m.Incarnation = r.uvarint()
	}
	l := &m.Load
	l.Draining = r.loadFields(l)&flagDraining != 0
	if r.version >= 6 {
		switch ms := r.uvarint(); {
		case ms > maxUnixMilli:
			r.fail("sending time %d out of range", ms)
		case ms > 0:
			m.SentAt = time.UnixMilli(int64(ms))
		}
	}
	if r.version >= 7 {
		n := r.count(maxModels)
		for range n {
			if r.err != nil {
				break
			}
			ml := region.Load{Model: r.str()}
			r.loadFields(&ml)
			l.Models = append(l.Models, ml)
		}
	}
	if r.version >= 8 {
		r.speedFields(l)
		for i := range l.Models {
			r.speedFields(&l.Models[i])
		}
	}
	r.end()
	if r.err == nil && m.Node == "" {
		r.fail("empty node name")
	}
	return m, r.err
}

// speedFields reads a load's hardware and learned speed (version 8).
func (r *reader) speedFields(l *region.Load) {
	l.Hardware = r.str()
	l.Speed = float64(r.count(maxWireSpeed*speedScale)) / speedScale
	switch r.uvarint() {
	case 0:
	case 1:
		l.SpeedMeasured = true
	default:
		r.fail("bad speed flag")
	}
}

// loadFields reads the fields of one load (as far as the message's
// version has them) and returns its flags.
func (r *reader) loadFields(l *region.Load) (flags uint64) {
	l.QueueWait = time.Duration(r.count(maxCount))
	l.Queued = r.count(maxCount)
	l.Replicas = r.count(1 << 20)
	l.Slots = r.count(1 << 30)
	l.Outstanding = r.count(maxCount)
	l.Prefill.Fixed = time.Duration(r.count(maxCount))
	l.Prefill.PerToken = time.Duration(r.count(maxCount))
	sq := math.Float64frombits(r.u64())
	if r.err == nil && (math.IsNaN(sq) || sq < 0 || sq > 1e6) {
		r.fail("bad prefill coefficient")
	}
	l.Prefill.PerTokenSquared = sq
	if r.version >= 2 {
		l.QueuedTokens = r.count(maxCount)
		l.Offloading = r.count(maxCount)
		l.PrefillTokens = r.count(maxCount)
	}
	if r.version >= 3 {
		flags = r.uvarint()
	}
	if r.version >= 4 {
		l.FreeCacheTokens = r.count(maxCount)
		l.HitShare = float64(r.count(hitShareScale)) / hitShareScale
	}
	return flags
}

// end fails the message if bytes remain after its last field.
func (r *reader) end() {
	if r.err == nil && r.off != len(r.b) {
		r.fail("trailing bytes")
	}
}

// endChange ends a digest change: nothing after it, a node, and a
// generation after the one it applies to.
func (r *reader) endChange(node string, base, gen uint64) {
	r.end()
	if r.err == nil && (node == "" || gen <= base) {
		r.fail("empty node name or generation not increasing")
	}
}

func decodeDelta(r *reader) (deltaMsg, error) {
	var m deltaMsg
	m.Node = r.str()
	m.Base = r.uvarint()
	m.Gen = r.uvarint()
	// Each word takes at least 9 bytes, so the input bounds the count.
	n := r.count((len(r.b) - r.off) / 9)
	idx := uint64(0)
	for i := 0; i < n && r.err == nil; i++ {
		gap := r.uvarint()
		if i > 0 && gap == 0 {
			r.fail("indexes not ascending")
		}
		idx += gap
		if idx > math.MaxUint32 {
			r.fail("index out of range")
		}
		m.Indexes = append(m.Indexes, uint32(idx))
		m.Words = append(m.Words, r.u64())
	}
	r.endChange(m.Node, m.Base, m.Gen)
	return m, r.err
}

func decodeBits(r *reader) (bitsMsg, error) {
	var m bitsMsg
	m.Node = r.str()
	m.Base = r.uvarint()
	m.Gen = r.uvarint()
	// Each position takes at least a byte, so the input bounds the count.
	n := r.count(len(r.b) - r.off)
	pos := uint64(0)
	for i := 0; i < n && r.err == nil; i++ {
		gap := r.uvarint()
		if i > 0 && gap == 0 {
			r.fail("positions not ascending")
		}
		if pos+gap < pos || pos+gap >= digest.MaxBits {
			r.fail("position out of range")
		}
		pos += gap
		m.Positions = append(m.Positions, pos)
	}
	r.endChange(m.Node, m.Base, m.Gen)
	return m, r.err
}

func decodeWant(r *reader) (string, error) {
	node := r.str()
	r.end()
	if r.err == nil && node == "" {
		r.fail("empty node name")
	}
	return node, r.err
}

func encodeMeta(m Meta) []byte {
	w := writer{}
	w.b = append(w.b, wireVersion)
	w.str(m.Region)
	w.str(m.Jurisdiction)
	w.str(m.APIAddr)
	w.str(m.Version)
	return w.b
}

func decodeMeta(b []byte) (Meta, error) {
	r := reader{b: b}
	if v := r.byte(); r.err == nil && (v < minWireVersion || v > wireVersion) {
		r.fail("unsupported meta version %d", v)
	}
	m := Meta{Region: r.str(), Jurisdiction: r.str(), APIAddr: r.str(), Version: r.str()}
	r.end()
	if r.err == nil && m.Region == "" {
		r.fail("empty region")
	}
	return m, r.err
}
