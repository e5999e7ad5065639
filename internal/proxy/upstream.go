package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"skywalker/internal/apierr"
	"skywalker/internal/request"
)

// hopHeaders are not copied between client and upstream (RFC 9110 §7.6.1).
var hopHeaders = map[string]bool{"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Te": true,
	"Trailer": true, "Transfer-Encoding": true, "Upgrade": true, "Content-Length": true}

// errRetryable marks a failure before the first byte reached the client:
// the request may go to another replica or region.
var errRetryable = errors.New("upstream failed before responding")

// send posts the body to base+path and relays the response to w with
// immediate flushes. It returns whether any byte reached the client, and
// an error wrapping errRetryable when nothing did and another target may
// succeed. A failure mid-stream ends an SSE stream with an error event,
// never a fake [DONE].
func (s *Server) send(w http.ResponseWriter, r *http.Request, base, path string, body []byte, header http.Header,
	delay time.Duration, out *relayResult) (bool, error) {
	ctx := r.Context()
	if delay > 0 && !sleep(ctx, delay) {
		return false, ctx.Err()
	}
	br := &bodyReader{Reader: bytes.NewReader(body), done: make(chan struct{})}
	up, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, br)
	if err != nil {
		return false, err
	}
	up.ContentLength = int64(len(body))
	// The body buffer is recycled when the handler returns: wait until the
	// transport has finished with it (it always closes the body).
	defer br.wait()
	for _, h := range []string{"Content-Type", "Accept", "Authorization", "X-Data-Residency"} {
		if v := r.Header.Get(h); v != "" {
			up.Header.Set(h, v)
		}
	}
	for k, v := range header {
		up.Header[k] = v
	}
	resp, err := s.client.Do(up)
	if err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		return false, errors.Join(errRetryable, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 500 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		return false, errors.Join(errRetryable, errors.New("upstream answered "+resp.Status))
	}
	if delay > 0 && !sleep(ctx, delay) { // the response's first byte crosses back
		return false, ctx.Err()
	}
	h := w.Header()
	for k, v := range resp.Header {
		if !hopHeaders[k] {
			h[k] = v
		}
	}
	out.apply(h)
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	sse := bytes.HasPrefix([]byte(resp.Header.Get("Content-Type")), []byte("text/event-stream"))
	buf := make([]byte, 32<<10)
	first := true
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if first {
				out.firstByte = time.Now()
				first = false
			}
			out.count(buf[:n], sse)
			if _, werr := w.Write(buf[:n]); werr != nil {
				return true, werr // the client went away
			}
			_ = rc.Flush()
		}
		if rerr == io.EOF {
			out.status = resp.StatusCode
			return true, nil
		}
		if rerr != nil {
			if sse {
				e := apierr.New(apierr.Upstream, "the upstream stream failed midway: %v", rerr)
				_, _ = w.Write(append(append([]byte("data: "), e.JSON()...), '\n', '\n'))
				_ = rc.Flush()
			}
			return true, rerr
		}
	}
}

// bodyReader is an upstream request body that reports when the transport
// is done with it.
type bodyReader struct {
	*bytes.Reader
	once sync.Once
	done chan struct{}
}

func (b *bodyReader) Close() error {
	b.once.Do(func() { close(b.done) })
	return nil
}

func (b *bodyReader) wait() {
	select {
	case <-b.done:
	case <-time.After(10 * time.Second): // never expected; do not hang the handler
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// relayResult carries response headers to add and collects what the
// response said about output length.
type relayResult struct {
	headers   map[string]string
	firstByte time.Time
	status    int
	chunks    int    // SSE data events with content
	usage     int    // completion_tokens, if the body reported usage
	tail      []byte // carry-over for patterns split across reads
}

func (o *relayResult) apply(h http.Header) {
	for k, v := range o.headers {
		h.Set(k, v)
	}
}

var (
	dataPrefix      = []byte("data: {")
	completionField = []byte(`"completion_tokens":`)
)

// count estimates output tokens: one per SSE data event (vLLM sends one
// token per chunk), or the usage a non-streaming body reports.
func (o *relayResult) count(b []byte, sse bool) {
	chunk := append(o.tail, b...)
	if sse {
		o.chunks += bytes.Count(chunk, dataPrefix) - bytes.Count(o.tail, dataPrefix)
	}
	if i := bytes.LastIndex(chunk, completionField); i >= 0 {
		rest := bytes.TrimLeft(chunk[i+len(completionField):], " ")
		end := 0
		for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
			end++
		}
		if n, err := strconv.Atoi(string(rest[:end])); err == nil && end < len(rest) {
			o.usage = n
		}
	}
	keep := min(len(chunk), 64)
	o.tail = append(o.tail[:0], chunk[len(chunk)-keep:]...)
}

// outputTokens is the best estimate of tokens generated.
func (o *relayResult) outputTokens() int {
	if o.usage > 0 {
		return o.usage
	}
	return max(o.chunks-3, 0) // role chunk, finish chunk, usage or [DONE]
}

// toReplica streams req to a local replica.
func (s *Server) toReplica(w http.ResponseWriter, r *http.Request, req *request.Request, body []byte, o routed, out *relayResult) (bool, error) {
	rp := o.replica
	start := time.Now()
	out.headers = map[string]string{"X-SkyWalker-Region": s.cfg.Region, "X-SkyWalker-Replica": rp.name,
		"X-SkyWalker-Route-Reason": string(o.Decision.Reason)}
	started, err := s.send(w, r, rp.url.String(), r.URL.Path, body, nil, 0, out)
	s.router.done(rp, time.Since(start), errors.Is(err, errRetryable) || (started && err != nil && r.Context().Err() == nil))
	return started, err
}

// toPeer forwards req once to the chosen peer region's proxy.
func (s *Server) toPeer(w http.ResponseWriter, r *http.Request, req *request.Request, body []byte, o routed, out *relayResult) (bool, error) {
	p := o.peer
	if len(p.APIAddrs) == 0 {
		s.router.forwardDone(p.Region)
		return false, errors.Join(errRetryable, errors.New("peer region "+p.Region+" has no proxy address"))
	}
	addr := p.APIAddrs[int(s.ids.Load())%len(p.APIAddrs)]
	header := http.Header{ForwardHeader: {s.keys.sign(s.cfg.Region, req.ID, time.Now())}}
	if req.Residency != "" {
		header.Set("X-Data-Residency", req.Residency)
	}
	out.headers = map[string]string{"X-SkyWalker-Ingress-Region": s.cfg.Region, "X-SkyWalker-Route-Reason": string(o.Decision.Reason)}
	var delay time.Duration
	if s.opts.PeerDelay != nil {
		delay = s.opts.PeerDelay(p.Region)
	}
	s.metrics.forwarded.WithLabelValues(p.Region).Inc()
	defer s.router.forwardDone(p.Region)
	return s.send(w, r, addr, r.URL.Path, body, header, delay, out)
}
