package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestClientsAskForCriticalOnlyWhereTheOperatorLetsThem: the class a
// client asks for (header or metadata) is bounded by
// SKYWALKER_PRIORITY_CLASS_MAX; asking for less urgency is always allowed.
func TestClientsAskForCriticalOnlyWhereTheOperatorLetsThem(t *testing.T) {
	t.Parallel() // it waits on time, not on the CPU: beside the others
	engine, served := countingBackend(t)
	strict := serveOne(t, []string{engine.URL}, nil)
	trusting := serveOne(t, []string{engine.URL}, func(c *Config) { c.PriorityClassMax = "critical" })
	tests := []struct {
		name     string
		addr     string
		header   string
		metadata string
		want     int
	}{
		{"critical by header, default bound", strict, "critical", "", 400},
		{"critical in metadata, default bound", strict, "", "critical", 400},
		{"sheddable, default bound", strict, "sheddable", "", 200},
		{"standard, default bound", strict, "", "", 200},
		{"critical by header, critical allowed", trusting, "critical", "", 200},
		{"critical in metadata, critical allowed", trusting, "", "critical", 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"messages":[{"role":"user","content":"hi"}],"max_tokens":1`
			if tc.metadata != "" {
				body += `,"metadata":{"priority":"` + tc.metadata + `"}`
			}
			req, _ := http.NewRequest(http.MethodPost, "http://"+tc.addr+"/v1/chat/completions", strings.NewReader(body+"}"))
			if tc.header != "" {
				req.Header.Set(PriorityHeader, tc.header)
			}
			before := served.Load()
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			msg := string(raw)
			if resp.StatusCode != tc.want {
				t.Fatalf("status %d (%s), want %d", resp.StatusCode, msg, tc.want)
			}
			if sent := served.Load() - before; (tc.want == 200) != (sent == 1) {
				t.Errorf("status %d, but %d requests reached the engine", resp.StatusCode, sent)
			}
			if tc.want == 400 && !strings.Contains(msg, "SKYWALKER_PRIORITY_CLASS_MAX") {
				t.Errorf("the refusal must name the setting that allows it: %s", msg)
			}
		})
	}
}

func TestTheDebugPageSummarisesHowLongRecentRequestsWereHeld(t *testing.T) {
	ms := time.Millisecond
	recent := []Decision{{waited: 0}, {waited: 0}, {waited: 40 * ms}, {waited: 1500 * ms}}
	got := summarizeHold(recent)
	want := holdSummary{Decisions: 4, Held: 2, P50Ms: 0, P99Ms: 1500, MaxMs: 1500}
	if got != want {
		t.Errorf("summary %+v, want %+v", got, want)
	}
	if got := summarizeHold(nil); got != (holdSummary{}) {
		t.Errorf("no decisions: %+v, want zeros", got)
	}
}
