package httpserve

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

func TestRunDrainsInFlightRequestsThenReturns(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		time.Sleep(200 * time.Millisecond) // in flight when shutdown begins
		_, _ = io.WriteString(w, "done")
	})
	ctx, cancel := context.WithCancel(context.Background())
	var drained atomic.Bool
	errc := make(chan error, 1)
	go func() {
		errc <- Run(ctx, l, handler, Options{Drain: 5 * time.Second, Begin: func() { drained.Store(true) }})
	}()
	body := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + l.Addr().String())
		if err != nil {
			body <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body <- string(b)
	}()
	<-started
	cancel()
	if got := <-body; got != "done" {
		t.Errorf("in-flight request got %q, want it finished", got)
	}
	if err := <-errc; err != nil || !drained.Load() {
		t.Errorf("Run returned %v, drain callback called: %v", err, drained.Load())
	}
}
