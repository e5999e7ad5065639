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

// Run serves handler on l until ctx ends; then it calls onDrain (if not
// nil), stops accepting, and waits up to drain for requests in flight,
// closing whatever remains after that.
func Run(ctx context.Context, l net.Listener, handler http.Handler, drain time.Duration, onDrain func()) error {
	hs := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(l) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	if onDrain != nil {
		onDrain()
	}
	shutdown, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	if err := hs.Shutdown(shutdown); err != nil {
		_ = hs.Close()
		return fmt.Errorf("drain: %w", err)
	}
	return nil
}
