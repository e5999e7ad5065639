package proxy

import (
	"bytes"
	"context"
	"net/http/httptest"
	"testing"

	"skywalker/internal/overhead"
)

// lockBudget is how many times a request served by a local replica may
// take the router's lock: route it, hear its answer and first byte, end
// it — the core's work, not the relay's bookkeeping.
const lockBudget = 4

// A served request takes the router's lock at most lockBudget times
// (counted by Router.lock; nothing else runs: the server's loops are not
// started).
func TestAServedRequestTakesTheRouterLockWithinItsBudget(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Region, cfg.WorkerPool = "locks", []string{"http://replica:8000"}
	srv, err := New(cfg, Options{Transport: cannedTransport{}})
	if err != nil {
		t.Fatal(err)
	}
	urls, _ := initialReplicas(context.Background(), cfg)
	if err := srv.router.SetReplicas(urls); err != nil {
		t.Fatal(err)
	}
	h := srv.Handler()
	serve := func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/chat/completions", bytes.NewReader(overhead.ChatBody(4<<10, false))))
		if rec.Code != 200 {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	}
	serve() // the first request may learn what later ones reuse
	before := srv.router.lockCount.Load()
	serve()
	if n := srv.router.lockCount.Load() - before; n > lockBudget || n == 0 {
		t.Errorf("a served request took the router's lock %d times, the budget is %d", n, lockBudget)
	} else {
		t.Logf("a served request took the router's lock %d times", n)
	}
}
