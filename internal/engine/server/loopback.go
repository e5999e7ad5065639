package server

import (
	"context"
	"fmt"
	"net"
)

// ServeLoopback runs a server on a free loopback port until ctx ends and
// returns its base URL: simulated replicas for the demo and for tests that
// need real listeners.
func ServeLoopback(ctx context.Context, cfg Config) (*Server, string, error) {
	s, err := New(cfg)
	if err != nil {
		return nil, "", err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", fmt.Errorf("engine loopback listener: %w", err)
	}
	go func() { _ = s.Serve(ctx, l) }()
	return s, "http://" + l.Addr().String(), nil
}
