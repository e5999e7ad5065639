package proxy

import (
	"cmp"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
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
// held by request bodies (see bodyLedger): past a budget, or cut to make
// room for a client under its share, the read fails with a 429.
type pacedBody struct {
	body     io.Reader
	rc       *http.ResponseController
	start    time.Time
	last     time.Time // when the last byte arrived (start before one)
	grace    time.Duration
	rate     float64 // bytes per second
	received int64
	ledger   *bodyLedger
	client   string

	// charged is what the ledger counts for this body: the declared
	// length's reservation, or received × BodyMemoryFactor. Written only
	// under ledger.mu; read without it for the fast path.
	charged atomic.Int64
	// mu orders setting the read deadline against a cut: a cut sets cut
	// and a deadline of now, and a read never sets a later one after it.
	mu  sync.Mutex
	cut atomic.Bool
	// whole: the body has arrived (or failed); it is never cut then.
	whole atomic.Bool
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
	p.mu.Lock()
	if p.cut.Load() {
		p.mu.Unlock()
		return 0, errBodyShare
	}
	_ = p.rc.SetReadDeadline(p.deadline())
	p.mu.Unlock()
	n, err := p.body.Read(b)
	if p.cut.Load() {
		return n, errBodyShare // the deadline error, if any, was the cut's
	}
	if n > 0 {
		p.last = time.Now()
		p.received += int64(n)
		if want := BodyMemoryFactor * p.received; want > p.charged.Load() { // past what was reserved
			if refusal := p.ledger.cover(p, want); refusal != nil && err == nil {
				err = refusal
			}
		}
	}
	return n, err
}

// interrupt ends the body's read now: the next (or the blocked) read fails
// with errBodyShare. Called under the ledger's lock.
func (p *pacedBody) interrupt() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut.Store(true)
	_ = p.rc.SetReadDeadline(time.Now())
}

// BodyMemoryFactor is what the ledger charges a byte of request body for
// while its request lives. A declared body is read into a buffer of its
// size and its rendering is let go of as it is hashed (request.ParseFrom):
// 4 withheld 16 MiB uploads hold ~1.2× their size live (the chaos test
// "withheld uploads" holds it under 1.5×; it was 2.6× when the rendering
// was kept whole and buffers doubled). An undeclared (chunked) body's
// buffer doubles as it grows, up to 2× its size: the charge.
const BodyMemoryFactor = 2

// bodyLedger counts the memory request bodies hold (received and not yet
// done with), in total and per client (the client's IP address), and
// shares the budget fairly between clients:
//
//   - one client holds at most perClient (errClientBodyBudget past it);
//   - while the whole budget is not held, any client may grow into it;
//   - when it is, a client that would stay within its fair share — the
//     budget over the clients holding bodies, itself counted — takes the
//     room it needs from clients over theirs: their uploads still in
//     progress are cut (errBodyShare), the largest holder's largest first,
//     and only while that holder stays over its share. A body already
//     whole is never cut (its request is being served), and nothing is
//     cut unless the cuts free enough. A client over its share waits
//     (errBodyBudget).
//
// So no client holds more than its share while another waits for room,
// and a client alone may use the whole budget. Safe for concurrent use.
type bodyLedger struct {
	budget, perClient int64
	mu                sync.Mutex
	total             int64
	byClient          map[string]int64        // what each client holds
	bodies            map[*pacedBody]struct{} // every body charged: what may be cut, unless whole
}

func newBodyLedger(budget, perClient int) *bodyLedger {
	return &bodyLedger{budget: int64(budget), perClient: int64(perClient), byClient: map[string]int64{}, bodies: map[*pacedBody]struct{}{}}
}

// The refusals of a body the proxy has no room to hold.
var (
	errBodyBudget = &apierr.Error{Code: apierr.Overloaded, RetryAfter: time.Second,
		Message: "the proxy holds as many request bodies as it may (body_budget), and this client holds its share of them; retry shortly"}
	errClientBodyBudget = &apierr.Error{Code: apierr.Overloaded, RetryAfter: time.Second,
		Message: "this client's uploads in progress hold as many bytes as one client may (client_body_budget); retry when they end"}
	errBodyShare = &apierr.Error{Code: apierr.Overloaded, RetryAfter: time.Second,
		Message: "the proxy's body budget (body_budget) is full and this client held more than its share while another waited: this upload was cut; retry shortly"}
)

// cover brings what p is charged up to want bytes if they fit (making
// room as the ledger's rule allows), else says which budget they would
// pass and counts nothing more. A declared length is covered before a
// byte of it is read.
func (l *bodyLedger) cover(p *pacedBody, want int64) *apierr.Error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p.cut.Load() {
		return errBodyShare
	}
	n := want - p.charged.Load()
	if n <= 0 {
		return nil
	}
	held := l.byClient[p.client]
	if held+n > l.perClient {
		return errClientBodyBudget
	}
	if over := l.total + n - l.budget; over > 0 && !l.makeRoom(p.client, held+n, over) {
		return errBodyBudget
	}
	l.byClient[p.client] = held + n
	l.bodies[p] = struct{}{}
	l.total += n
	p.charged.Add(n)
	return nil
}

// makeRoom frees at least need bytes for client, which would then hold
// wouldHold, by cutting uploads in progress of clients over their share
// (see bodyLedger). It cuts nothing and says false unless client stays
// within its share and the cuts free enough.
func (l *bodyLedger) makeRoom(client string, wouldHold, need int64) bool {
	holders := int64(len(l.byClient))
	if _, ok := l.byClient[client]; !ok {
		holders++
	}
	share := l.budget / holders
	if wouldHold > share {
		return false
	}
	var candidates []*pacedBody
	for b := range l.bodies {
		if b.client != client && !b.whole.Load() && l.byClient[b.client] > share {
			candidates = append(candidates, b)
		}
	}
	slices.SortFunc(candidates, func(a, b *pacedBody) int { // the largest holder's largest body first
		if c := cmp.Compare(l.byClient[b.client], l.byClient[a.client]); c != 0 {
			return c
		}
		return cmp.Compare(b.charged.Load(), a.charged.Load())
	})
	kept := map[string]int64{} // what each holder would keep
	var cuts []*pacedBody
	var freed int64
	for _, b := range candidates {
		if freed >= need {
			break
		}
		left, ok := kept[b.client]
		if !ok {
			left = l.byClient[b.client]
		}
		if left <= share {
			continue
		}
		charged := b.charged.Load()
		kept[b.client] = left - charged
		cuts = append(cuts, b)
		freed += charged
	}
	if freed < need {
		return false
	}
	for _, b := range cuts {
		l.uncount(b)
		b.interrupt()
	}
	return true
}

// uncount gives back everything b is charged for and forgets it. Called
// under l.mu.
func (l *bodyLedger) uncount(b *pacedBody) {
	charged := b.charged.Swap(0)
	l.total -= charged
	delete(l.bodies, b)
	if held := l.byClient[b.client] - charged; held > 0 {
		l.byClient[b.client] = held
	} else {
		delete(l.byClient, b.client)
	}
}

// release gives back what p counted against the budgets, when its request
// ends (the body is held until then: retries resend it).
func (l *bodyLedger) release(p *pacedBody) {
	if p.charged.Load() == 0 {
		return // nothing charged, or cut (and uncounted then)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.uncount(p)
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
