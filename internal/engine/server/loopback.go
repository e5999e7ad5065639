package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"
)

// Loopback is a simulated engine serving on a loopback port: the replicas
// of the demo's and the tests' clusters.
type Loopback struct {
	URL    string
	Server *Server
	cfg    Config
	http   *http.Server
	stop   context.CancelFunc
}

// StartLoopback runs a server for cfg on a free loopback port until Kill.
func StartLoopback(cfg Config) (*Loopback, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("engine loopback listener: %w", err)
	}
	e := &Loopback{URL: "http://" + l.Addr().String(), cfg: cfg}
	if err := e.serve(l); err != nil {
		l.Close()
		return nil, err
	}
	return e, nil
}

// serve runs a new server for e's settings on l.
func (e *Loopback) serve(l net.Listener) error {
	s, err := New(e.cfg)
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(context.Background())
	go s.Run(ctx)
	hs := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(l) }()
	e.Server, e.http, e.stop = s, hs, stop
	return nil
}

// Restart kills the engine and starts a new one with the same settings
// on the same address, as a crashed process that comes back: all it held
// in memory (its KV cache, its stored responses) is gone. Not
// concurrently with Kill or another Restart.
func (e *Loopback) Restart() error {
	e.Kill()
	addr := strings.TrimPrefix(e.URL, "http://")
	var l net.Listener
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if l, err = net.Listen("tcp", addr); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("restart the engine at %s: its address is still taken: %w", addr, err)
	}
	if err := e.serve(l); err != nil {
		l.Close()
		return err
	}
	return nil
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
