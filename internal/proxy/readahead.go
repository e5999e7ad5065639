package proxy

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Slow readers. A response is read from the upstream at the engine's pace,
// not the client's: readAhead pulls the watched body into a buffer of up
// to ResponseBuffer bytes (all responses together at most
// ResponseBufferBudget), so the engine's last token ends the attempt and
// frees the replica's slot while a slow client is still reading. And a
// client that takes nothing for WriteTimeout is cut (deadlineWriter): a
// client that never reads would otherwise hold its connection, its
// goroutine and, once the buffer is full, the slot again.

// readAhead is a response body read ahead of its reader. The first Read
// starts the pump (after the copier has sent the headers, so the pump
// never runs beside ModifyResponse); Close stops it and waits for it, so
// whatever the pump wrote in the exchange happens before the handler
// accounts for it.
type readAhead struct {
	src   io.ReadCloser // the watched body
	x     *exchange
	limit int           // this response's buffer
	held  *atomic.Int64 // what every response's buffer holds

	mu      sync.Mutex
	cond    sync.Cond
	buf     bytes.Buffer
	err     error // the source's end (io.EOF) or failure, after buf
	started bool
	closed  bool
	done    chan struct{}
}

func newReadAhead(x *exchange, src io.ReadCloser) *readAhead {
	r := &readAhead{src: src, x: x, limit: x.s.cfg.ResponseBuffer, held: &x.s.readAheadHeld, done: make(chan struct{})}
	r.cond.L = &r.mu
	return r
}

// room reports whether the pump may read more: always while the buffer is
// empty (no worse than reading at the client's pace), else while this
// buffer and the total are under their bounds. Called with mu held.
func (r *readAhead) room() bool {
	n := r.buf.Len()
	return n == 0 || (n < r.limit && r.held.Load() < int64(r.x.s.cfg.ResponseBufferBudget))
}

func (r *readAhead) pump() {
	defer close(r.done)
	chunk := relayBufferPool.Get().(*[]byte)
	defer relayBufferPool.Put(chunk)
	for {
		r.mu.Lock()
		behind := !r.room() && !r.closed
		if behind {
			// The client, not the engine, is behind: the stream is quiet
			// because nothing reads it, which is no stall of the engine's.
			r.x.holdStall()
		}
		for !r.room() && !r.closed {
			r.cond.Wait()
		}
		closed := r.closed
		r.mu.Unlock()
		if closed {
			return
		}
		if behind {
			r.x.restartStall()
		}
		n, err := r.src.Read(*chunk)
		r.mu.Lock()
		if r.closed {
			// Close ran while this read was under way and gave back what
			// the buffer held: what the read brought is nobody's.
			r.mu.Unlock()
			return
		}
		if n > 0 {
			r.buf.Write((*chunk)[:n])
			r.held.Add(int64(n))
		}
		if err != nil {
			r.err = err
		}
		r.cond.Broadcast()
		r.mu.Unlock()
		if err != nil {
			return
		}
	}
}

func (r *readAhead) Read(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.started {
		r.started = true
		go r.pump()
	}
	for r.buf.Len() == 0 && r.err == nil && !r.closed {
		r.cond.Wait()
	}
	if r.buf.Len() > 0 {
		n, _ := r.buf.Read(p)
		r.held.Add(-int64(n))
		r.cond.Broadcast()
		return n, nil
	}
	if r.err != nil {
		return 0, r.err
	}
	return 0, io.ErrClosedPipe
}

// Close ends the body: what the client did not take is dropped, the
// upstream exchange is let go if it is still running (the client is gone
// or was cut: the attempt is released, not counted against its target),
// and the watched body settles the attempt.
func (r *readAhead) Close() error {
	r.mu.Lock()
	r.closed = true
	running := r.started && r.err == nil
	r.held.Add(-int64(r.buf.Len()))
	r.buf.Reset()
	r.cond.Broadcast()
	r.mu.Unlock()
	if running {
		r.x.abandon(errClientGone) // unblocks a pump waiting on the upstream
	}
	if r.started {
		<-r.done
	}
	return r.src.Close()
}

// errClientGone ends the exchange's context when the relay stops writing
// to the client (it left, or was cut for not reading).
var errClientGone = errors.New("the client stopped taking the response")

// deadlineWriter gives each write to the client WriteTimeout to complete:
// a client that stops reading fails the write, and the relay ends the
// request as the client's (cancelled). The deadline is set before every
// write and flush, and cleared when the response is done, so a slow
// engine between writes (or a keep-alive connection after the response)
// is never cut by it.
type deadlineWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

func (w *deadlineWriter) arm() { _ = w.rc.SetWriteDeadline(time.Now().Add(w.timeout)) }

func (w *deadlineWriter) Write(p []byte) (int, error) {
	w.arm()
	return w.ResponseWriter.Write(p)
}

func (w *deadlineWriter) WriteHeader(code int) {
	w.arm()
	w.ResponseWriter.WriteHeader(code)
}

// FlushError is what http.ResponseController.Flush calls.
func (w *deadlineWriter) FlushError() error {
	w.arm()
	return w.rc.Flush()
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// done clears the deadline for whatever the connection does next.
func (w *deadlineWriter) done() { _ = w.rc.SetWriteDeadline(time.Time{}) }
