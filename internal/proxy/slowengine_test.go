package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// oneThreadEngine is an engine like a llama.cpp server on one CPU thread
// with two slots and no /metrics: every request needs prefill of
// compute, and the requests prefilling at once share it (one alone takes
// prefill, two at once take twice as long each); then it streams a few
// tokens.
func oneThreadEngine(t *testing.T, prefill time.Duration) *httptest.Server {
	type job struct {
		done  time.Duration
		ready chan struct{}
	}
	var mu sync.Mutex
	active := map[*job]bool{}
	stop := make(chan struct{})
	go func() {
		const tick = 5 * time.Millisecond
		tk := time.NewTicker(tick)
		defer tk.Stop()
		last := time.Now()
		for {
			select {
			case <-stop:
				return
			case now := <-tk.C:
				mu.Lock()
				if n := len(active); n > 0 {
					share := now.Sub(last) / time.Duration(n)
					for j := range active {
						if j.done += share; j.done >= prefill {
							delete(active, j)
							close(j.ready)
						}
					}
				}
				mu.Unlock()
				last = now
			}
		}
	}()
	e := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			return
		case "/v1/chat/completions":
		default:
			http.NotFound(w, r)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		j := &job{ready: make(chan struct{})}
		mu.Lock()
		active[j] = true
		mu.Unlock()
		select {
		case <-j.ready:
		case <-r.Context().Done():
			mu.Lock()
			delete(active, j)
			mu.Unlock()
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 4 {
			fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\"t%d\"}}]}\n\n", i)
			w.(http.Flusher).Flush()
			time.Sleep(20 * time.Millisecond)
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(func() { e.Close(); close(stop) })
	return e
}

// An engine slower than its profile is waited for, not timed out; and a
// burst it cannot serve in time is refused at once. Engine: 3 s to a
// first token alone, 6 s with two at once, no metrics; every proxy
// setting at its default; 12 cold 2,600-token prompts at once, to a
// proxy that has seen nothing (its estimates are the profile's, ten
// times too fast) and again once it has learned the engine. Each is
// served, or refused at once with a 429 that names its cause; none is
// admitted and then timed out or shed; the learned cap is 1.
func TestASlowEngineIsWaitedForAndABurstRefusedAtOnce(t *testing.T) {
	t.Parallel() // it waits on time, not on the CPU: beside the others
	engine := oneThreadEngine(t, 3*time.Second)
	p := startSolo(t, []string{engine.URL}, nil)
	for _, phase := range []string{"cold", "learned"} {
		served := slowBurst(t, p, phase)
		if served < 1 || phase == "cold" && served < 2 {
			t.Errorf("%s: %d of 12 served; the engine's slots should serve at least %d", phase, served, map[string]int{"cold": 2, "learned": 1}[phase])
		}
		if cap := p.replica(0).MaxInFlight; cap != 1 {
			t.Errorf("%s: learned dispatch cap %d after two prompts took twice as long at once, want 1", phase, cap)
		}
	}
	if v := testutilValue(p.srv.metrics.upstreamTimeouts.WithLabelValues("first_byte")); v != 0 {
		t.Errorf("%v first-byte timeouts: the slow engine was timed out", v)
	}
}

// slowBurst sends 12 cold prompts at once and checks each answer; it
// returns how many were served.
func slowBurst(t *testing.T, p solo, phase string) (served int) {
	type answer struct {
		status           int
		code, msg, retry string
		took             time.Duration
	}
	answers := make([]answer, 12)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			prompt := fmt.Sprintf("%s request %d: %s", phase, i, strings.Repeat(fmt.Sprintf("word%d ", i), 1560)) // ~10,400 bytes, 2,600 tokens
			body, _ := json.Marshal(map[string]any{"stream": true, "max_tokens": 4, "messages": []map[string]string{{"role": "user", "content": prompt}}})
			resp, err := (&http.Client{Timeout: 2 * time.Minute}).Post("http://"+p.addr+"/v1/chat/completions", "application/json", strings.NewReader(string(body)))
			if err != nil {
				t.Errorf("%s request %d: %v", phase, i, err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			a := answer{status: resp.StatusCode, retry: resp.Header.Get("Retry-After"), took: time.Since(start)}
			if resp.StatusCode != 200 {
				var e struct {
					Error struct{ Code, Message string }
				}
				_ = json.Unmarshal(b, &e)
				a.code, a.msg = e.Error.Code, e.Error.Message
			} else if !strings.Contains(string(b), "[DONE]") {
				t.Errorf("%s request %d: 200 without its whole stream: %.200s", phase, i, b)
			}
			answers[i] = a
		}()
	}
	wg.Wait()
	for i, a := range answers {
		switch {
		case a.status == 200:
			served++
		case a.status == 429 && a.code == "overloaded" && a.retry != "" && a.msg != "":
			// Refused at once: before the engine could have given anyone a
			// first token (3 s alone).
			if a.took >= 3*time.Second {
				t.Errorf("%s request %d was refused after %v, not at once: %s", phase, i, a.took.Round(time.Millisecond), a.msg)
			}
		default:
			t.Errorf("%s request %d: %d %s %q (Retry-After %q): neither served nor refused at once for a stated cause", phase, i, a.status, a.code, a.msg, a.retry)
		}
	}
	t.Logf("%s: served %d of 12; answers %+v", phase, served, answers)
	return served
}
