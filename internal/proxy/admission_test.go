package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"skywalker/internal/apierr"
	"skywalker/internal/balancer"
	"skywalker/internal/region"
	"skywalker/internal/request"
	"skywalker/internal/testwait"
)

// TestEveryRefusalAndShedIsCountedAndLoggedOnce drives the router's
// outcome hook as the core calls it, once per request.
func TestEveryRefusalAndShedIsCountedAndLoggedOnce(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Region, cfg.WorkerPool = "us-east", []string{"http://127.0.0.1:1"}
	var logs bytes.Buffer
	s, err := New(cfg, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	outcome := func(id string, class request.Class, tenant string, code apierr.Code) *region.Attempt {
		o := balancer.Outcome{Request: &request.Request{ID: id, Class: class, Tenant: tenant}}
		if code != "" {
			o.Err = &apierr.Error{Code: code, Message: "why"}
		}
		return &region.Attempt{Outcome: o, Number: 1}
	}
	s.observe(outcome("a", request.Standard, "team-a", apierr.Overloaded))
	s.observe(outcome("b", request.Sheddable, "team-a", apierr.Shed))
	s.observe(outcome("c", request.Critical, "team-b", ""))
	retried := outcome("c", request.Critical, "team-b", "")
	retried.Number = 2
	s.observe(retried) // its retry is not admitted again
	s.observe(outcome("d", request.Standard, "", apierr.QueueTimeout))
	if n := strings.Count(logs.String(), "msg="); n != 2 {
		t.Errorf("%d log lines, want one for the refusal and one for the shed:\n%s", n, logs.String())
	}
	for _, want := range []string{`msg="request refused"`, `id=a priority=standard tenant=team-a`, `msg="request shed"`, `id=b priority=sheddable`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs lack %q:\n%s", want, logs.String())
		}
	}
	for _, c := range []struct {
		labels []string
		want   float64
	}{
		{[]string{"standard", "team-a", "refused"}, 1},
		{[]string{"sheddable", "team-a", "shed"}, 1},
		{[]string{"critical", "team-b", "admitted"}, 1},
		{[]string{"standard", "none", "timed_out"}, 1},
	} {
		if got := counterValue(t, s, c.labels...); got != c.want {
			t.Errorf("admission_total%v = %v, want %v", c.labels, got, c.want)
		}
	}
}

func counterValue(t *testing.T, s *Server, labels ...string) float64 {
	t.Helper()
	m, err := s.metrics.admission.GetMetricWithLabelValues(labels...)
	if err != nil {
		t.Fatal(err)
	}
	return testutilValue(m)
}

// TestTenantLabelsAreBounded: the first tenants keep their names, later
// ones are "other", and no tenant is "none".
func TestTenantLabelsAreBounded(t *testing.T) {
	l := newTenantLabels(2)
	got := []string{l.label("a"), l.label("b"), l.label("c"), l.label("a"), l.label("")}
	if strings.Join(got, ",") != "a,b,other,a,none" {
		t.Errorf("labels %v", got)
	}
}

// heldBackend streams one chunk of every chat completion at once and the
// rest only when release is closed: requests stay in flight, none ends.
func heldBackend(t *testing.T) (url string, release func()) {
	t.Helper()
	gate := make(chan struct{})
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path != "/v1/chat/completions" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"object":"list","data":[{"id":"m","object":"model"}]}`))
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-gate:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}))
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(func() { release(); b.Close() })
	return b.URL, release
}

// TestTheFirstBurstIsRefusedAtOnce is the admission case of issue 23: two
// slots, the L4 profile's 69 ms decode step, a 10 s objective and 24
// requests of max_tokens 200 (about 14 s each) at once. Before any request
// has ended the proxy knows what those in flight occupy: two are
// dispatched, one is held (its estimate, 7 s, fits), and the other 21 are
// told 429 overloaded while the two are still streaming — none is held to
// its objective and shed.
func TestTheFirstBurstIsRefusedAtOnce(t *testing.T) {
	url, release := heldBackend(t)
	addr := serveOne(t, []string{url}, func(c *Config) {
		c.MaxInFlight, c.Profile, c.TTFTObjective = 2, "llama3-8b-l4", 10*time.Second
	})
	type answer struct {
		status int
		code   string
	}
	answers := make(chan answer, 24)
	for i := range 24 {
		go func() {
			body := fmt.Sprintf(`{"stream":true,"max_tokens":200,"messages":[{"role":"user","content":"burst %d"}]}`, i)
			resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				answers <- answer{code: err.Error()}
				return
			}
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var e struct{ Error struct{ Code string } }
			_ = json.Unmarshal(data, &e)
			answers <- answer{status: resp.StatusCode, code: e.Error.Code}
		}()
	}
	got := map[answer]int{}
	testwait.Eventually(t, 60*time.Second, "21 requests refused while two stream and one is held", func() (bool, string) {
		for {
			select {
			case a := <-answers:
				got[a]++
				continue
			default:
			}
			break
		}
		return len(got) > 0 && sumOf(got) >= 21, fmt.Sprintf("answers so far %v", got)
	})
	release()
	for sumOf(got) < 24 {
		got[<-answers]++
	}
	want := map[answer]int{{status: 200}: 3, {status: 429, code: "overloaded"}: 21}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("answers %v, want %v (the refusals given before any request ended)", got, want)
	}
}

func sumOf[K comparable](m map[K]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
