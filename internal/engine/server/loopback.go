package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Loopback is a simulated engine serving on a loopback port: the replicas
// of the demo's and the tests' clusters.
type Loopback struct {
	URL    string
	Server *Server
	http   *http.Server
	stop   context.CancelFunc
}

// StartLoopback runs a server for cfg on a free loopback port until Kill.
func StartLoopback(cfg Config) (*Loopback, error) {
	s, err := New(cfg)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("engine loopback listener: %w", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	go s.Run(ctx)
	hs := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(l) }()
	return &Loopback{URL: "http://" + l.Addr().String(), Server: s, http: hs, stop: stop}, nil
}

// Kill closes the engine's listener and every connection at once, as a
// crashed process would. It may be called more than once.
func (e *Loopback) Kill() {
	_ = e.http.Close()
	e.stop()
}

// ServeLoopback is StartLoopback until ctx ends, returning the server and
// its base URL.
func ServeLoopback(ctx context.Context, cfg Config) (*Server, string, error) {
	e, err := StartLoopback(cfg)
	if err != nil {
		return nil, "", err
	}
	context.AfterFunc(ctx, e.Kill)
	return e.Server, e.URL, nil
}
