package proxy

import (
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"skywalker/internal/apierr"
)

// pacedBody reads a request body under two deadlines, so that a client
// that stops sending, or dribbles, is cut off (the parse fails with a 408)
// instead of holding a goroutine and a buffer, and one that keeps the pace
// is never hurried:
//
//   - an average pace: by start + grace + received/rate, so a dribble is
//     cut once it falls behind rate;
//   - no gap longer than grace between bytes, whatever arrived before: a
//     body sent fast and then withheld at its last byte is cut after
//     grace, not after the allowance its bytes earned (16 MiB at the
//     default rate earned 512 s).
//
// It also charges what it received against the proxy's ledger of memory
// held by request bodies, in total and per client: past either budget, the
// read fails with a 429.
type pacedBody struct {
	body     io.Reader
	rc       *http.ResponseController
	start    time.Time
	last     time.Time // when the last byte arrived (start before one)
	grace    time.Duration
	rate     float64 // bytes per second
	received int64
	charged  int64 // to the ledger: the declared length's reservation, or received × BodyMemoryFactor
	ledger   *bodyLedger
	client   string
}

// deadline is when the next read must have returned.
func (p *pacedBody) deadline() time.Time {
	allowance := float64(p.received) / p.rate * float64(time.Second)
	whole := p.start.Add(p.grace + time.Duration(allowance))
	last := p.last
	if last.IsZero() {
		last = p.start
	}
	if idle := last.Add(p.grace); idle.Before(whole) {
		return idle
	}
	return whole
}

func (p *pacedBody) Read(b []byte) (int, error) {
	_ = p.rc.SetReadDeadline(p.deadline())
	n, err := p.body.Read(b)
	if n > 0 {
		p.last = time.Now()
		p.received += int64(n)
		if owed := BodyMemoryFactor*p.received - p.charged; owed > 0 { // past what was reserved
			p.charged += owed
			if refusal := p.ledger.add(p.client, owed); refusal != nil && err == nil {
				err = refusal
			}
		}
	}
	return n, err
}

// release gives back what the body counted against the budgets, when the
// request ends (its body is held until then: retries resend it).
func (p *pacedBody) release() { p.ledger.add(p.client, -p.charged) }

// BodyMemoryFactor is what a byte of request body costs the proxy in
// memory while the request lives: the byte in the body's buffer, and its
// part of the canonical rendering built as the body arrives (each grown
// by appending). Measured: 8 bodies of 16 MiB held 335 MiB live, 2.6× their
// size; the ledger charges 2×, the growth slack aside.
const BodyMemoryFactor = 2

// bodyLedger counts the memory request bodies hold (received and not yet
// done with), in total and per client (the client's IP address), against
// a budget for each. Safe for concurrent use.
type bodyLedger struct {
	budget, perClient int64
	mu                sync.Mutex
	total             int64
	byClient          map[string]int64
}

func newBodyLedger(budget, perClient int) *bodyLedger {
	return &bodyLedger{budget: int64(budget), perClient: int64(perClient), byClient: map[string]int64{}}
}

// The refusals of a body the proxy has no room to hold.
var (
	errBodyBudget = &apierr.Error{Code: apierr.Overloaded, RetryAfter: time.Second,
		Message: "the proxy holds as many request bodies as it may (body_budget); retry shortly"}
	errClientBodyBudget = &apierr.Error{Code: apierr.Overloaded, RetryAfter: time.Second,
		Message: "this client's uploads in progress hold as many bytes as one client may (client_body_budget); retry when they end"}
)

// reserve counts n bytes for client if they fit, else says which budget
// they would pass and counts nothing: a declared length is refused, or
// held, before a byte of it is read.
func (l *bodyLedger) reserve(client string, n int64) *apierr.Error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if refusal := l.refusal(client, n); refusal != nil {
		return refusal
	}
	l.total += n
	l.byClient[client] += n
	return nil
}

func (l *bodyLedger) refusal(client string, n int64) *apierr.Error {
	switch {
	case l.byClient[client]+n > l.perClient:
		return errClientBodyBudget
	case l.total+n > l.budget:
		return errBodyBudget
	}
	return nil
}

// add counts n bytes (negative: gives them back) and says which budget
// the client is now past, if any.
func (l *bodyLedger) add(client string, n int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total += n
	held := l.byClient[client] + n
	if held <= 0 {
		delete(l.byClient, client)
	} else {
		l.byClient[client] = held
	}
	if refusal := l.refusal(client, 0); refusal != nil {
		return refusal
	}
	return nil
}

// held is the memory request bodies are charged for now.
func (l *bodyLedger) held() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// clientOf is the client a request's body counts against: the address it
// comes from (not a header it could set).
func clientOf(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// abandonBody gives up on the rest of a request body: the server would
// otherwise read (up to 256 KB of) it at the client's pace before sending
// the answer; the connection closes after the answer instead.
func abandonBody(rc *http.ResponseController, r *http.Request) {
	_ = rc.SetReadDeadline(time.Now())
	_ = r.Body.Close()
}
