package request

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// scanner walks a JSON document in place, without building a tree. It is
// what lets the proxy parse, render and hash a 400 KB chat body in well under
// a millisecond: string bodies are located with bytes.IndexByte (vectorized)
// and copied, never decoded rune by rune unless they contain escapes.
//
// The scanner checks the grammar of everything it visits, including values it
// skips. It is lenient in one documented way: raw control characters and
// invalid UTF-8 inside strings are passed through rather than rejected; the
// engine behind the proxy validates those.
type scanner struct {
	data  []byte
	pos   int
	depth int
}

// maxDepth bounds nesting so hostile input cannot exhaust the stack.
const maxDepth = 64

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

func (s *scanner) skipSpace() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
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

// rawString consumes a string and returns the bytes between its quotes,
// escapes not decoded, and whether it contains any escape.
func (s *scanner) rawString() ([]byte, bool, error) {
	if err := s.expect('"'); err != nil {
		return nil, false, err
	}
	start := s.pos
	i := start
	for {
		q := bytes.IndexByte(s.data[i:], '"')
		if q < 0 {
			s.pos = len(s.data)
			return nil, false, s.fail("unterminated string")
		}
		q += i
		backslashes := 0
		for j := q - 1; j >= start && s.data[j] == '\\'; j-- {
			backslashes++
		}
		if backslashes%2 == 0 {
			raw := s.data[start:q]
			s.pos = q + 1
			return raw, bytes.IndexByte(raw, '\\') >= 0, nil
		}
		i = q + 1
	}
}

// appendString consumes a string and appends its decoded value to dst.
// The string is walked eight bytes at a time (see nextSpecial); runs
// without escapes are copied whole.
func (s *scanner) appendString(dst []byte) ([]byte, error) {
	if err := s.expect('"'); err != nil {
		return dst, err
	}
	d := s.data
	i := s.pos
	for {
		j := nextSpecial(d, i)
		if j < 0 {
			s.pos = len(d)
			return dst, s.fail("unterminated string")
		}
		dst = append(dst, d[i:j]...)
		switch c := d[j]; {
		case c == '"':
			s.pos = j + 1
			return dst, nil
		case c == '\\':
			if j+1 < len(d) { // the common one-byte escapes, inline
				if e := simpleEscape[d[j+1]]; e != 0 {
					dst = append(dst, e)
					i = j + 2
					continue
				}
			}
			var n int
			var err error
			if dst, n, err = unescapeOne(dst, d[j:]); err != nil {
				s.pos = j
				return dst, s.fail("%v", err)
			}
			i = j + n
		default:
			s.pos = j
			return dst, s.fail("control character %#02x in string", c)
		}
	}
}

// simpleEscape maps the byte after a backslash to the byte it stands for,
// for every escape but \u; zero means not a simple escape.
var simpleEscape = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

const (
	swarOnes = 0x0101010101010101
	swarHigh = 0x8080808080808080
)

// specialMask marks (high bit of the byte) the quote, backslash and control
// bytes of the 8-byte word v; only the lowest mark is guaranteed exact.
func specialMask(v uint64) uint64 {
	q := v ^ (swarOnes * '"')
	b := v ^ (swarOnes * '\\')
	return (((q - swarOnes) &^ q) | ((b - swarOnes) &^ b) | ((v - swarOnes*0x20) &^ v)) & swarHigh
}

// nextSpecial returns the index of the first byte at or after i that ends a
// run of plain string bytes: a quote, a backslash or a control character
// (below 0x20), or -1 if there is none. It tests eight bytes per step with
// SWAR arithmetic: (x - 0x01..) &^ x & 0x80.. marks the zero bytes of x, and
// the lowest mark is exact.
func nextSpecial(d []byte, i int) int {
	for ; i+16 <= len(d); i += 16 {
		if m := specialMask(binary.LittleEndian.Uint64(d[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
		if m := specialMask(binary.LittleEndian.Uint64(d[i+8:])); m != 0 {
			return i + 8 + bits.TrailingZeros64(m)/8
		}
	}
	for ; i+8 <= len(d); i += 8 {
		if m := specialMask(binary.LittleEndian.Uint64(d[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for ; i < len(d); i++ {
		if c := d[i]; c == '"' || c == '\\' || c < 0x20 {
			return i
		}
	}
	return -1
}

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

// validEscapes checks every escape in a string body without decoding it.
func validEscapes(raw []byte) error {
	for {
		b := bytes.IndexByte(raw, '\\')
		if b < 0 {
			return nil
		}
		raw = raw[b:]
		if len(raw) < 2 {
			return fmt.Errorf("truncated escape")
		}
		switch raw[1] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			raw = raw[2:]
		case 'u':
			if _, ok := hex4(raw); !ok {
				return fmt.Errorf("invalid \\u escape")
			}
			raw = raw[6:]
		default:
			return fmt.Errorf("invalid escape \\%c", raw[1])
		}
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

// number consumes a number and returns its text, checked against the JSON grammar.
func (s *scanner) number() ([]byte, error) {
	s.skipSpace()
	start := s.pos
	d := s.data
	i := s.pos
	if i < len(d) && d[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if i < len(d) && d[i] == '0' {
		i++
	} else if digits() == 0 {
		s.pos = i
		return nil, s.fail("invalid number")
	}
	if i < len(d) && d[i] == '.' {
		i++
		if digits() == 0 {
			s.pos = i
			return nil, s.fail("invalid number: no digits after '.'")
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if digits() == 0 {
			s.pos = i
			return nil, s.fail("invalid number: no digits in exponent")
		}
	}
	s.pos = i
	return d[start:i], nil
}

// literal consumes true, false or null.
func (s *scanner) literal(word string) error {
	s.skipSpace()
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
		at := s.pos
		raw, escaped, err := s.rawString()
		if err == nil && escaped {
			if err = validEscapes(raw); err != nil {
				return &syntaxError{offset: at, msg: err.Error()}
			}
		}
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
