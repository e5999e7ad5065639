// Package httpserve runs an HTTP handler until a context ends and then
// shuts it down gracefully: the one serving loop the engine server and the
// proxy share.
package httpserve

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Options say how Run serves and drains; the zero value is usable.
type Options struct {
	// IdleTimeout closes keep-alive connections idle this long; default
	// DefaultIdleTimeout.
	IdleTimeout time.Duration
	// Drain is how long requests in flight may take to finish once ctx
	// ends; default 5 s.
	Drain time.Duration
	// Begin runs when draining starts, before the listener closes: stop
	// admitting, announce it.
	Begin func()
	// Expire runs Grace before Drain ends, so that what cannot finish in
	// time is answered (say, 503 and a Retry-After) rather than cut off.
	Expire func()
	// LameDuck is how long, once Begin ran, the listener stays open and
	// idle connections are kept, so that a client sending on a kept-alive
	// connection gets the handler's answer (say, 503 with "Connection:
	// close") instead of a connection closed under it; part of Drain.
	// Default a tenth of Drain, at most 5 s.
	LameDuck time.Duration
	// Grace is how long before the end of Drain Expire runs; default a
	// fifth of Drain, at least a second (or half of a shorter Drain: the
	// server notices idle connections only every half second) and at most
	// 2 s.
	Grace time.Duration
}

// DefaultIdleTimeout is how long an idle keep-alive connection is kept.
const DefaultIdleTimeout = 60 * time.Second

// Run serves handler on l (and on each of more: a proxy's TLS listener for
// its peers) until ctx ends; then it drains as o says: it calls Begin,
// serves on for LameDuck, stops accepting, waits for the requests in
// flight, calls Expire Grace before the drain deadline, and closes
// whatever remains at the deadline. If a listener fails first, every
// connection is closed at once and Run returns its error.
func Run(ctx context.Context, l net.Listener, handler http.Handler, o Options, more ...net.Listener) error {
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.Drain <= 0 {
		o.Drain = 5 * time.Second
	}
	if o.LameDuck <= 0 {
		o.LameDuck = min(o.Drain/10, 5*time.Second)
	}
	if o.Grace <= 0 {
		o.Grace = min(max(o.Drain/5, min(o.Drain/2, time.Second)), 2*time.Second)
	}
	hs := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: o.IdleTimeout}
	errc := make(chan error, 1+len(more))
	for _, l := range append([]net.Listener{l}, more...) {
		go func() { errc <- hs.Serve(l) }()
	}
	select {
	case err := <-errc:
		// A listener failed or was closed (a crash, in tests): the server
		// is gone, and so is every connection, as a client of a crashed
		// process would see it.
		_ = hs.Close()
		return err
	case <-ctx.Done():
	}
	if o.Begin != nil {
		o.Begin()
	}
	deadline := time.Now().Add(o.Drain)
	if o.Expire != nil {
		expire := time.AfterFunc(o.Drain-o.Grace, o.Expire)
		defer expire.Stop()
	}
	time.Sleep(o.LameDuck)
	shutdown, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if err := hs.Shutdown(shutdown); err != nil {
		_ = hs.Close()
		return fmt.Errorf("drain: %w", err)
	}
	return nil
}
