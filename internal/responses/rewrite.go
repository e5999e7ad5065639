package responses

import (
	"bytes"
	"io"
)

// idStart is how a response id begins as a JSON string.
var idStart = []byte(`"resp_`)

// maxIDBytes bounds the id a Rewriter maps; longer strings pass as they
// are.
const maxIDBytes = 512

// Rewriter copies an engine's answer (JSON or SSE) with every response id
// in it mapped by mapID: the JSON string value "resp_…" of a key "id",
// "previous_response_id" or "response_id" — the response's own, in the
// answer and in every event that carries the response — never text (a
// delta that reads like an id is a delta's value, and an id inside a
// string has its quotes escaped). It holds back only an id cut by a read,
// so a stream flows as it comes.
type Rewriter struct {
	src   io.ReadCloser
	mapID func(string) string
	buf   [32 << 10]byte
	in    []byte // read, not yet scanned to the end
	out   []byte // ready for the reader
	tail  []byte // the last bytes before in[0], for the key before a value
	err   error
}

// NewRewriter returns a Rewriter over src.
func NewRewriter(src io.ReadCloser, mapID func(engineID string) string) *Rewriter {
	return &Rewriter{src: src, mapID: mapID}
}

// idKeys are the keys whose values are response ids.
var idKeys = [][]byte{[]byte(`"id":`), []byte(`"previous_response_id":`), []byte(`"response_id":`)}

// lookBehind is how far back a key is looked for.
const lookBehind = 40

// afterIDKey reports whether the value starting at in[q] is one of an id
// key's.
func (w *Rewriter) afterIDKey(in []byte, q int) bool {
	var before []byte
	if q >= lookBehind {
		before = in[q-lookBehind : q]
	} else {
		before = append(append(make([]byte, 0, lookBehind+len(w.tail)), w.tail...), in[:q]...)
	}
	before = bytes.TrimRight(before, " \t\r\n")
	for _, k := range idKeys {
		if bytes.HasSuffix(before, k) {
			return true
		}
	}
	return false
}

// remember keeps the last bytes of what was scanned, for afterIDKey.
func (w *Rewriter) remember(scanned []byte) {
	if len(scanned) >= lookBehind {
		w.tail = append(w.tail[:0], scanned[len(scanned)-lookBehind:]...)
		return
	}
	w.tail = append(w.tail, scanned...)
	if len(w.tail) > lookBehind {
		w.tail = append(w.tail[:0], w.tail[len(w.tail)-lookBehind:]...)
	}
}

// Read implements io.Reader.
func (w *Rewriter) Read(p []byte) (int, error) {
	for len(w.out) == 0 {
		if w.err != nil {
			if len(w.in) > 0 {
				w.scan(true)
				continue
			}
			return 0, w.err
		}
		n, err := w.src.Read(w.buf[:])
		w.in = append(w.in, w.buf[:n]...)
		w.err = err
		w.scan(err != nil)
	}
	n := copy(p, w.out)
	w.out = w.out[n:]
	return n, nil
}

// Close closes the source.
func (w *Rewriter) Close() error { return w.src.Close() }

// scan moves what is settled from in to out, mapping ids; with final,
// everything.
func (w *Rewriter) scan(final bool) {
	in, start := w.in, 0
	w.out = w.out[:0]
	for i := 0; i < len(in); {
		q := bytes.IndexByte(in[i:], '"')
		if q < 0 {
			break
		}
		q += i
		rest := in[q:]
		if len(rest) < len(idStart) {
			if !final && bytes.HasPrefix(idStart, rest) {
				w.hold(in, start, q)
				return
			}
			i = q + 1
			continue
		}
		if !bytes.HasPrefix(rest, idStart) || !w.afterIDKey(in, q) {
			i = q + 1
			continue
		}
		end := q + 1
		for end < len(in) && end-q <= maxIDBytes && idByte(in[end]) {
			end++
		}
		switch {
		case end == len(in) && !final && end-q <= maxIDBytes:
			w.hold(in, start, q) // cut by the read: wait for the rest
			return
		case end < len(in) && in[end] == '"' && end-q <= maxIDBytes:
			w.out = append(w.out, in[start:q+1]...)
			w.out = append(w.out, w.mapID(string(in[q+1:end]))...)
			start, i = end, end
		default:
			i = q + 1
		}
	}
	w.out = append(w.out, in[start:]...)
	w.remember(in)
	w.in = w.in[:0]
}

// hold emits in[start:cut] and keeps in[cut:] for the next read.
func (w *Rewriter) hold(in []byte, start, cut int) {
	w.out = append(w.out, in[start:cut]...)
	w.remember(in[:cut])
	w.in = append(w.in[:0], in[cut:]...)
}

func idByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}
