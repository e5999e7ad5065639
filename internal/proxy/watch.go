package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"skywalker/internal/apierr"
	"skywalker/internal/region"
	"skywalker/internal/request"
)

// The body watcher: a response that reaches the client is watched to its
// end — its first byte, its tokens and cached tokens, a stall, a break
// midway (and mid-stream failover) — and its attempt is ended by how it
// went. The attempt loop that produced it is relay.go.

// watch takes over a response that will reach the client: the body is
// wrapped to see its end (or its failure), count output tokens, and, for
// an event stream, end a broken stream with an error event. cancel ends
// the attempt's context: when the exchange ends, or when the stream
// stalls for StallTimeout.
func (x *exchange) watch(resp *http.Response) {
	x.stall = time.AfterFunc(x.s.cfg.StallTimeout, func() { x.cancel(errStalled) })
	x.status = resp.StatusCode
	x.servedBy = x.s.cfg.Region
	if p := x.target.Peer; p != nil {
		x.servedBy = p.Region
	}
	x.counter.sse = bytes.HasPrefix([]byte(resp.Header.Get("Content-Type")), []byte("text/event-stream"))
	wb := &watchedBody{x: x, body: resp.Body}
	if x.s.cfg.MidStreamFailover && x.counter.sse && (x.kind == request.Chat || x.kind == request.Messages) {
		wb.events = &alignedEvents{src: resp.Body, messages: x.kind == request.Messages}
		wb.body = wb.events
	}
	resp.Body = newReadAhead(x, wb)
}

// holdStall stops the stall clock while the client is behind (the
// read-ahead buffer is full); restartStall starts it again once the pump
// reads the upstream again. Both run on the pump's goroutine, as the
// clock's resets on each chunk do.
func (x *exchange) holdStall() {
	if x.stall != nil {
		x.stall.Stop()
	}
}

func (x *exchange) restartStall() {
	if x.stall != nil {
		x.stall.Reset(x.s.cfg.StallTimeout)
	}
}

// endContext ends the context of the attempt that reached the client.
func (x *exchange) endContext() {
	if x.cancel != nil {
		x.stopExpire()
		x.cancel(nil)
	}
}

// endAttempt ends the current attempt, which is not retried (how is
// Served, BrokeMidStream or Released): the replica's slot or the
// forward's count at the peer is given back, with how it went and the
// cached tokens the engine reported (for a forward: a check of the
// peer's digest).
func (x *exchange) endAttempt(how region.Outcome) {
	o := x.target
	x.target = routed{}
	if o.Attempt == nil {
		return
	}
	if how == region.BrokeMidStream {
		x.endAttemptSpan(x.broken)
	} else {
		x.endAttemptSpan(nil)
	}
	x.s.router.settle(o.Attempt, how, x.counter.cached, how == region.Served && x.counter.cachedSeen)
}

// watchedBody is an upstream body on its way to the client.
type watchedBody struct {
	x       *exchange
	body    io.ReadCloser
	events  *alignedEvents // whole events only, for mid-stream failover; nil when off
	failed  error          // the upstream broke mid-body
	tail    []byte
	closed  bool
	settled bool // the attempt has ended (see settle)
}

func (b *watchedBody) Read(p []byte) (int, error) {
	if len(b.tail) > 0 { // the error event that ends a broken stream
		n := copy(p, b.tail)
		b.tail = b.tail[n:]
		if len(b.tail) == 0 {
			return n, io.EOF
		}
		return n, nil
	}
	if b.failed != nil {
		return 0, io.EOF
	}
	n, err := b.body.Read(p)
	x := b.x
	if err != nil && err != io.EOF && x.attemptCtx != nil {
		switch context.Cause(x.attemptCtx) {
		case errStalled:
			err = fmt.Errorf("%w: no chunk for %v", errStalled, x.s.cfg.StallTimeout)
		case errDrained:
			err = errDrained
		}
	}
	if n > 0 {
		if x.stall != nil {
			x.stall.Reset(x.s.cfg.StallTimeout)
		}
		if x.firstByte.IsZero() {
			x.firstByte = time.Now() // the core heard it as the attempt was answered (Router.Answered)
			x.firstTokenEvent()
		}
		x.counter.count(p[:n])
	}
	switch {
	case err == io.EOF, x.counter.done:
		// The engine is done (the body's end, or [DONE]; whatever broke
		// after [DONE], the client closing first say, is no failure). Its
		// slot frees now, before these last bytes reach the client: a
		// client that sends its next turn the moment it has this answer
		// must find the replica free, not busy with the answer it holds.
		x.complete = true
		b.settle()
	case err != nil && x.ctx.Err() == nil && err != errDrained && b.events != nil && x.continueElsewhere(b.events) == nil:
		return n, nil // the stream goes on from another target
	case err != nil && x.ctx.Err() == nil:
		// The upstream broke, or the proxy is about to exit, not the
		// client: never fake a clean end.
		b.failed, x.broken = err, err
		if x.counter.sse {
			e := apierr.New(apierr.Upstream, "the upstream stream failed midway: %v", err)
			if err == errDrained {
				e = &apierr.Error{Code: apierr.Unavailable, Message: errDrained.Error(), RetryAfter: time.Second}
			}
			b.tail = streamError(x.kind, e)
			return n, nil
		}
	}
	return n, err
}

// Close ends the attempt: served in full, failed by the upstream, or let
// go because the client left.
func (b *watchedBody) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	err := b.body.Close()
	x := b.x
	if x.stall != nil && !x.stall.Stop() && context.Cause(x.attemptCtx) == errStalled {
		x.s.metrics.upstreamTimeouts.WithLabelValues("stall").Inc()
	}
	x.endContext()
	b.settle()
	return err
}

// settle ends the attempt once, by how it went: served in full, failed by
// the upstream, or let go (the client left, or a client error passed
// through).
func (b *watchedBody) settle() {
	if b.settled {
		return
	}
	b.settled = true
	x := b.x
	if x.complete && x.stall != nil {
		x.stall.Stop() // an engine slow to close after [DONE] has not stalled
	}
	switch {
	case x.complete && x.status < 300:
		x.endAttempt(region.Served)
	case x.broken != nil && x.broken != errDrained:
		x.endAttempt(region.BrokeMidStream)
	default:
		x.endAttempt(region.Released)
	}
}

// streamError is the event that ends a broken stream, in the endpoint's
// shape: Anthropic's error event for Messages, a data event with OpenAI's
// error object for the rest.
func streamError(kind request.Kind, e *apierr.Error) []byte {
	if kind.Shape() == apierr.Anthropic {
		return append(append([]byte("event: error\ndata: "), e.Render(apierr.Anthropic)...), '\n', '\n')
	}
	return append(append([]byte("data: "), e.JSON()...), '\n', '\n')
}

// relayCounter estimates output tokens from what streams by: one per SSE
// data event (vLLM sends one token per chunk), or the usage the body
// reports.
type relayCounter struct {
	sse        bool
	chunks     int // SSE data events
	usage      int // completion_tokens, if the body reported usage
	cached     int // usage.prompt_tokens_details.cached_tokens (Messages: cache_read_input_tokens), when cachedSeen
	cachedSeen bool
	done       bool   // the event stream's data: [DONE] (Messages: message_stop) went by
	tail       []byte // carry-over for patterns split across reads
}

var (
	dataPrefix      = []byte("data: {")
	doneEvent       = []byte("data: [DONE]")
	messageStop     = []byte("event: message_stop")
	completionField = []byte(`"completion_tokens":`)
	outputField     = []byte(`"output_tokens":`) // the Responses API's usage
	cachedField     = []byte(`"cached_tokens":`)
	cacheReadField  = []byte(`"cache_read_input_tokens":`) // Anthropic's usage
)

func (o *relayCounter) count(b []byte) {
	chunk := append(o.tail, b...)
	if o.sse {
		o.chunks += bytes.Count(chunk, dataPrefix) - bytes.Count(o.tail, dataPrefix)
		o.done = o.done || bytes.Contains(chunk, doneEvent) || bytes.Contains(chunk, messageStop)
	}
	if n, ok := lastNumberAfter(chunk, completionField); ok {
		o.usage = n
	} else if n, ok := lastNumberAfter(chunk, outputField); ok {
		o.usage = n
	}
	if n, ok := lastNumberAfter(chunk, cachedField); ok {
		o.cached, o.cachedSeen = n, true
	} else if n, ok := lastNumberAfter(chunk, cacheReadField); ok {
		o.cached, o.cachedSeen = n, true
	}
	keep := min(len(chunk), 64)
	o.tail = append(o.tail[:0], chunk[len(chunk)-keep:]...)
}

// lastNumberAfter reads the integer after the last field in chunk, if it
// is complete (followed by something other than a digit).
func lastNumberAfter(chunk, field []byte) (int, bool) {
	i := bytes.LastIndex(chunk, field)
	if i < 0 {
		return 0, false
	}
	rest := bytes.TrimLeft(chunk[i+len(field):], " ")
	end := 0
	for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
		end++
	}
	if end == 0 || end >= len(rest) {
		return 0, false
	}
	n, err := strconv.Atoi(string(rest[:end]))
	return n, err == nil
}

// outputTokens is the best estimate of tokens generated.
func (o *relayCounter) outputTokens() int {
	if o.usage > 0 {
		return o.usage
	}
	// A usage chunk would have set usage; data: [DONE] is not a data: {
	// event. What is left over the tokens is the role chunk and the
	// finish chunk.
	return max(o.chunks-2, 0)
}
