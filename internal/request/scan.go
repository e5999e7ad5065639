package request

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math/bits"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// scanner walks a JSON document in place, without building a tree, while
// the document arrives: when it runs out of bytes it reads the next chunk
// from src (see more), so a body is parsed, rendered and hashed as it is
// received and routing can start microseconds after its last byte.
//
// It is strict: it rejects what RFC 8259 rejects, including raw control
// characters in strings and invalid UTF-8 (FuzzScannerAgreesWithEncodingJSON
// holds it to encoding/json's grammar). Strings are walked eight bytes at a
// time (see stopMask) and the rendering is written a word at a time with
// them, so plain runs cost neither a call nor a copy of their own.
type scanner struct {
	data  []byte // what has arrived; data[pos:] is still to be scanned
	pos   int
	depth int

	src     io.Reader // nil when data is the whole document
	limit   int       // most bytes src may supply
	want    int       // the size src declared (0: not declared); data grows to it at once
	readErr error     // sticky: io.EOF once src has ended, or why reading failed

	// out is the canonical rendering, appended to as strings are decoded.
	// While src is read, its first dropped bytes are let go once hashed
	// (see compact): a body held while it arrives costs its own bytes, not
	// its rendering's too.
	out     []byte
	dropped int
	chain   *blockChain // hashes complete blocks of out before each read; may be nil
}

// compactAt is how much hashed rendering more lets go of at once: renderings
// shorter than this are never compacted (nor, when they have instructions
// or tools to put first, rendered twice: see parse).
const compactAt = 1 << 20

// compact lets go of the rendering's bytes that are hashed (all of them
// when nothing is hashed), keeping their count in dropped.
func (s *scanner) compact() {
	done := len(s.out)
	if s.chain != nil {
		done = s.chain.hashed
	}
	if done < compactAt {
		return
	}
	s.out = s.out[:copy(s.out, s.out[done:])]
	s.dropped += done
	if s.chain != nil {
		s.chain.hashed = 0
	}
}

// maxDepth bounds nesting so hostile input cannot exhaust the stack.
const maxDepth = 64

// readChunk is the least spare room more reads into; maxRead the most
// one read takes.
const (
	readChunk = 32 << 10
	maxRead   = 256 << 10
)

// syntaxError is a malformed-JSON error with the byte offset where it was found.
type syntaxError struct {
	offset int
	msg    string
}

func (e *syntaxError) Error() string {
	return fmt.Sprintf("malformed JSON at byte %d: %s", e.offset, e.msg)
}

func (s *scanner) fail(format string, args ...any) error {
	return &syntaxError{offset: s.pos, msg: fmt.Sprintf(format, args...)}
}

// more reads the next chunk of the document into data and reports whether
// any bytes arrived; false means the document has ended (readErr is io.EOF)
// or cannot be read (readErr says why). Before it blocks it hashes the
// blocks the rendering has completed, so hashing keeps pace with arrival.
func (s *scanner) more() bool {
	if s.src == nil || s.readErr != nil {
		return false
	}
	if s.chain != nil {
		s.chain.hash(s.out)
	}
	s.compact()
	for {
		if spare := cap(s.data) - len(s.data); spare < readChunk {
			switch {
			case s.want > len(s.data):
				// A declared body (its memory is reserved before it is
				// read) grows to its size at once, with room to see its
				// end: no copies, no slack.
				s.data = slices.Grow(s.data, s.want+1-len(s.data))
			case s.want > 0 && spare > 0:
				// All that was declared is in: the room left sees the end.
			default:
				s.data = slices.Grow(s.data, max(readChunk, cap(s.data))) // doubles: an undeclared body costs what arrived
			}
		}
		// One byte past the limit tells an oversized body; at most maxRead
		// at a time keeps what a read renders (and hashes) small.
		room := min(cap(s.data), s.limit+1, len(s.data)+maxRead)
		n, err := s.src.Read(s.data[len(s.data):room])
		s.data = s.data[:len(s.data)+n]
		if len(s.data) > s.limit {
			s.readErr = tooLarge(s.limit)
			return false
		}
		if err != nil {
			s.readErr = err
			return n > 0
		}
		if n > 0 {
			return true
		}
	}
}

// avail makes at least n bytes from pos available if the document has them.
func (s *scanner) avail(n int) bool {
	for len(s.data)-s.pos < n {
		if !s.more() {
			return false
		}
	}
	return true
}

func (s *scanner) skipSpace() {
	for {
		for s.pos < len(s.data) {
			switch s.data[s.pos] {
			case ' ', '\t', '\n', '\r':
				s.pos++
			default:
				return
			}
		}
		if !s.more() {
			return
		}
	}
}

// peek returns the next non-space byte without consuming it, or 0 at the end.
func (s *scanner) peek() byte {
	s.skipSpace()
	if s.pos >= len(s.data) {
		return 0
	}
	return s.data[s.pos]
}

func (s *scanner) expect(c byte) error {
	if s.peek() != c {
		if s.pos >= len(s.data) {
			return s.fail("unexpected end of input, want %q", c)
		}
		return s.fail("want %q, found %q", c, s.data[s.pos])
	}
	s.pos++
	return nil
}

// atEnd reports whether only whitespace remains.
func (s *scanner) atEnd() bool {
	s.skipSpace()
	return s.pos == len(s.data)
}

// kind describes the next value for type errors: "string", "number", ...
func (s *scanner) kind() string {
	switch s.peek() {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	case 0:
		return "end of input"
	default:
		return "number"
	}
}

// rawString consumes a string, checking it, and returns the bytes between
// its quotes, escapes not decoded, and whether it contains any escape. The
// bytes stay valid after later reads (data only ever grows).
func (s *scanner) rawString() ([]byte, bool, error) {
	return s.scanString(false)
}

// appendString consumes a string and appends its decoded value to the
// rendering.
func (s *scanner) appendString() error {
	_, _, err := s.scanString(true)
	return err
}

// scanString consumes a string, rejecting raw control characters, invalid
// escapes and invalid UTF-8, and returns its body as written and whether it
// holds an escape; with render, the decoded value is appended to out.
//
// The string is walked a word at a time: every word is stored into out's
// spare room before it is tested, so a word without a stop byte (see
// stopMask) is rendered by moving out's length on.
func (s *scanner) scanString(render bool) ([]byte, bool, error) {
	if err := s.expect('"'); err != nil {
		return nil, false, err
	}
	start, i := s.pos, s.pos
	escaped := false
	d, out := s.data, s.out // locals: the word loop keeps them in registers
	for {
		if render && cap(out)-len(out) < len(d)-i+8 {
			out = slices.Grow(out, len(d)-i+8) // the decoded value is never longer than the rest
		}
		if render {
			read, wrote, esc := copyRun(out[len(out):cap(out)], d[i:])
			out, i, escaped = out[:len(out)+wrote], i+read, escaped || esc
		} else {
			i += plainLen(d[i:])
		}
		for i < len(d) && !isStop(d[i]) { // the tail shorter than a word
			if render {
				out = append(out, d[i])
			}
			i++
		}
		if i == len(d) {
			s.out = out
			if !s.more() {
				s.pos = i
				return nil, false, s.fail("unterminated string")
			}
			d, out = s.data, s.out
			continue
		}
		c := d[i]
		if c == '"' {
			s.pos, s.out = i+1, out
			return d[start:i], escaped, nil
		}
		if i+12 > len(d) { // an escape or a rune may straddle the chunk's end
			s.pos, s.out = i, out
			s.avail(12)
			d, out = s.data, s.out
		}
		switch {
		case c == '\\':
			escaped = true
			if i+1 < len(d) {
				if e := simpleEscape[d[i+1]]; e != 0 {
					if render {
						out = append(out, e)
					}
					i += 2
					continue
				}
			}
			before := len(out)
			var n int
			var err error
			if out, n, err = unescapeOne(out, d[i:]); err != nil {
				s.pos, s.out = i, out
				return nil, false, s.fail("%v", err)
			}
			if !render {
				out = out[:before]
			}
			i += n
		case c < 0x20:
			s.pos, s.out = i, out
			return nil, false, s.fail("control character %#02x in string", c)
		default: // the first byte of a multi-byte UTF-8 sequence
			n := runeLen(d[i:])
			if n == 0 {
				s.pos, s.out = i, out
				return nil, false, s.fail("invalid UTF-8 in string")
			}
			if render {
				out = append(out, d[i:i+n]...)
			}
			i += n
		}
	}
}

// copyRun decodes the string body at the start of src into dst (which
// must have room for src and 8 bytes more) a word at a time, and returns
// how many bytes it read and wrote and whether it met an escape. Each word
// is stored before it is tested, so a word without a stop byte costs no
// branch of its own and no separate copy; the common stops — a one-byte
// escape, a valid multi-byte rune — are taken in stride. It stops, for the
// caller, at a quote, a control byte, a \u or invalid escape, invalid
// UTF-8, and within 12 bytes of src's end (an escape or a rune may be cut).
func copyRun(dst, src []byte) (read, wrote int, escaped bool) {
	r, w := 0, 0
	for r+12 <= len(src) && w+8 <= len(dst) {
		v := binary.LittleEndian.Uint64(src[r:])
		binary.LittleEndian.PutUint64(dst[w:], v)
		m := stopMask(v)
		if m == 0 {
			r, w = r+8, w+8
			continue
		}
		k := bits.TrailingZeros64(m) >> 3
		r, w = r+k, w+k
		switch c := src[r]; {
		case c == '\\':
			e := simpleEscape[src[r+1]]
			if e == 0 {
				return r, w, escaped
			}
			dst[w] = e
			r, w, escaped = r+2, w+1, true
		case c >= 0x80:
			n := runeLen(src[r:])
			if n == 0 {
				return r, w, escaped
			}
			copy(dst[w:w+n], src[r:r+n])
			r, w = r+n, w+n
		default: // a quote or a control byte
			return r, w, escaped
		}
	}
	return r, w, escaped
}

// plainLen is copyPlain without the copy.
func plainLen(src []byte) int {
	n := 0
	for len(src) >= 8 {
		if m := stopMask(binary.LittleEndian.Uint64(src)); m != 0 {
			return n + bits.TrailingZeros64(m)>>3
		}
		src, n = src[8:], n+8
	}
	return n
}

// runeLen returns the length of the valid UTF-8 sequence at the start of d,
// whose first byte is not ASCII, or 0 if it is not valid UTF-8 (overlong
// forms and surrogates included), as utf8.DecodeRune decides.
func runeLen(d []byte) int {
	c := d[0]
	switch {
	case c >= 0xc2 && c <= 0xdf:
		if len(d) >= 2 && d[1]&0xc0 == 0x80 {
			return 2
		}
	case c >= 0xe0 && c <= 0xef:
		lo, hi := byte(0x80), byte(0xbf)
		if c == 0xe0 {
			lo = 0xa0
		} else if c == 0xed {
			hi = 0x9f
		}
		if len(d) >= 3 && d[1] >= lo && d[1] <= hi && d[2]&0xc0 == 0x80 {
			return 3
		}
	case c >= 0xf0 && c <= 0xf4:
		lo, hi := byte(0x80), byte(0xbf)
		if c == 0xf0 {
			lo = 0x90
		} else if c == 0xf4 {
			hi = 0x8f
		}
		if len(d) >= 4 && d[1] >= lo && d[1] <= hi && d[2]&0xc0 == 0x80 && d[3]&0xc0 == 0x80 {
			return 4
		}
	}
	return 0
}

// simpleEscape maps the byte after a backslash to the byte it stands for,
// for every escape but \u; zero means not a simple escape.
var simpleEscape = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

const (
	swarOnes = 0x0101010101010101
	swarHigh = 0x8080808080808080
)

// stopMask marks (the high bit of the byte) where the 8-byte word v stops a
// plain run of string bytes: a quote, a backslash, a control byte (below
// 0x20) or a non-ASCII byte (the start of UTF-8 to check). Only the lowest
// mark is exact: a borrow can mark a byte above it.
func stopMask(v uint64) uint64 {
	q := v ^ (swarOnes * '"')
	b := v ^ (swarOnes * '\\')
	return ((v - swarOnes*0x20) | v | ((q - swarOnes) &^ q) | ((b - swarOnes) &^ b)) & swarHigh
}

// isStop is stopMask for one byte.
func isStop(c byte) bool { return c == '"' || c == '\\' || c < 0x20 || c >= 0x80 }

// str consumes a string and returns its decoded value.
func (s *scanner) str() (string, error) {
	raw, escaped, err := s.rawString()
	if err != nil || !escaped {
		return string(raw), err
	}
	out, err := unescape(nil, raw)
	if err != nil {
		return "", s.fail("%v", err)
	}
	return string(out), nil
}

// unescape appends the decoded form of a JSON string body to dst.
func unescape(dst, raw []byte) ([]byte, error) {
	for len(raw) > 0 {
		b := bytes.IndexByte(raw, '\\')
		if b < 0 {
			return append(dst, raw...), nil
		}
		dst = append(dst, raw[:b]...)
		var n int
		var err error
		if dst, n, err = unescapeOne(dst, raw[b:]); err != nil {
			return dst, err
		}
		raw = raw[b+n:]
	}
	return dst, nil
}

// unescapeOne decodes the escape at the start of raw (which begins with a
// backslash), appends it to dst and returns how many bytes it took.
func unescapeOne(dst, raw []byte) ([]byte, int, error) {
	if len(raw) < 2 {
		return dst, 0, fmt.Errorf("truncated escape")
	}
	switch c := raw[1]; c {
	case '"', '\\', '/':
		return append(dst, c), 2, nil
	case 'b':
		return append(dst, '\b'), 2, nil
	case 'f':
		return append(dst, '\f'), 2, nil
	case 'n':
		return append(dst, '\n'), 2, nil
	case 'r':
		return append(dst, '\r'), 2, nil
	case 't':
		return append(dst, '\t'), 2, nil
	case 'u':
		r, n, err := decodeU(raw)
		if err != nil {
			return dst, 0, err
		}
		return utf8.AppendRune(dst, r), n, nil
	default:
		return dst, 0, fmt.Errorf("invalid escape \\%c", c)
	}
}

// decodeU decodes \uXXXX (and a following low surrogate) at the start of raw.
func decodeU(raw []byte) (rune, int, error) {
	r1, ok := hex4(raw)
	if !ok {
		return 0, 0, fmt.Errorf("invalid \\u escape")
	}
	if utf16.IsSurrogate(r1) && len(raw) >= 12 && raw[6] == '\\' && raw[7] == 'u' {
		if r2, ok := hex4(raw[6:]); ok {
			if r := utf16.DecodeRune(r1, r2); r != utf8.RuneError {
				return r, 12, nil
			}
		}
	}
	if utf16.IsSurrogate(r1) {
		return utf8.RuneError, 6, nil
	}
	return r1, 6, nil
}

func hex4(raw []byte) (rune, bool) {
	if len(raw) < 6 {
		return 0, false
	}
	var r rune
	for _, c := range raw[2:6] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// at returns the document's byte at index i, reading on if it has not
// arrived yet, or -1 past the end.
func (s *scanner) at(i int) int {
	for i >= len(s.data) {
		if !s.more() {
			return -1
		}
	}
	return int(s.data[i])
}

// number consumes a number and returns its text, checked against the JSON grammar.
func (s *scanner) number() ([]byte, error) {
	s.skipSpace()
	start, i := s.pos, s.pos
	digits := func() int {
		n := 0
		for c := s.at(i); c >= '0' && c <= '9'; c = s.at(i) {
			i++
			n++
		}
		return n
	}
	if s.at(i) == '-' {
		i++
	}
	if s.at(i) == '0' {
		i++
	} else if digits() == 0 {
		s.pos = i
		return nil, s.fail("invalid number")
	}
	if s.at(i) == '.' {
		i++
		if digits() == 0 {
			s.pos = i
			return nil, s.fail("invalid number: no digits after '.'")
		}
	}
	if c := s.at(i); c == 'e' || c == 'E' {
		i++
		if c := s.at(i); c == '+' || c == '-' {
			i++
		}
		if digits() == 0 {
			s.pos = i
			return nil, s.fail("invalid number: no digits in exponent")
		}
	}
	s.pos = i
	return s.data[start:i], nil
}

// literal consumes true, false or null.
func (s *scanner) literal(word string) error {
	s.skipSpace()
	s.avail(len(word))
	if !bytes.HasPrefix(s.data[s.pos:], []byte(word)) {
		return s.fail("invalid literal, want %s", word)
	}
	s.pos += len(word)
	return nil
}

// null consumes a null if one is next and reports whether it did.
func (s *scanner) null() (bool, error) {
	if s.peek() != 'n' {
		return false, nil
	}
	return true, s.literal("null")
}

// boolean consumes true or false.
func (s *scanner) boolean() (bool, bool) {
	switch s.peek() {
	case 't':
		return true, s.literal("true") == nil
	case 'f':
		return false, s.literal("false") == nil
	}
	return false, false
}

// integer consumes a number that must be a whole number that fits an int.
func (s *scanner) integer() (int, bool) {
	raw, err := s.number()
	if err != nil {
		return 0, false
	}
	n, err := strconv.Atoi(string(raw))
	return n, err == nil
}

// skip consumes one value of any type, checking its grammar.
func (s *scanner) skip() error {
	switch s.peek() {
	case '"':
		_, _, err := s.rawString()
		return err
	case '{':
		return s.object(func([]byte) error { return s.skip() })
	case '[':
		return s.array(func(int) error { return s.skip() })
	case 't':
		return s.literal("true")
	case 'f':
		return s.literal("false")
	case 'n':
		return s.literal("null")
	case 0:
		return s.fail("unexpected end of input, want a value")
	default:
		_, err := s.number()
		return err
	}
}

// rawValue consumes one value and returns its bytes as written.
func (s *scanner) rawValue() ([]byte, error) {
	s.skipSpace()
	start := s.pos
	if err := s.skip(); err != nil {
		return nil, err
	}
	return s.data[start:s.pos], nil
}

// object consumes an object, calling member for each key with the scanner
// positioned at the value; member must consume exactly that value.
func (s *scanner) object(member func(key []byte) error) error {
	if err := s.expect('{'); err != nil {
		return err
	}
	if s.depth++; s.depth > maxDepth {
		return s.fail("nesting deeper than %d", maxDepth)
	}
	defer func() { s.depth-- }()
	if s.peek() == '}' {
		s.pos++
		return nil
	}
	for {
		key, escaped, err := s.rawString()
		if err != nil {
			return err
		}
		if escaped {
			if key, err = unescape(nil, key); err != nil {
				return s.fail("%v", err)
			}
		}
		if err := s.expect(':'); err != nil {
			return err
		}
		if err := member(key); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.pos++
		case '}':
			s.pos++
			return nil
		case 0:
			return s.fail("unexpected end of input in object")
		default:
			return s.fail("want ',' or '}' in object, found %q", s.data[s.pos])
		}
	}
}

// array consumes an array, calling elem for each element with the scanner
// positioned at it; elem must consume exactly that element.
func (s *scanner) array(elem func(i int) error) error {
	if err := s.expect('['); err != nil {
		return err
	}
	if s.depth++; s.depth > maxDepth {
		return s.fail("nesting deeper than %d", maxDepth)
	}
	defer func() { s.depth-- }()
	if s.peek() == ']' {
		s.pos++
		return nil
	}
	for i := 0; ; i++ {
		if err := elem(i); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.pos++
		case ']':
			s.pos++
			return nil
		case 0:
			return s.fail("unexpected end of input in array")
		default:
			return s.fail("want ',' or ']' in array, found %q", s.data[s.pos])
		}
	}
}
