package mesh

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestMemberlistLinesBecomeRateLimitedRecords: memberlist's log lines
// become slog records with one msg (the text, without date and tag);
// debug lines stay at debug; one kind of warning is written once per
// WarnEvery, the next one carrying how many were held back.
func TestMemberlistLinesBecomeRateLimitedRecords(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(0, 0)
	w := newMemberlistLog(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), func() time.Time { return now })
	lines := []string{
		"2026/12/02 00:11:33 [DEBUG] memberlist: Stream connection from=127.0.0.1:5000",
		"2026/12/02 00:11:33 [WARN] memberlist: Refuting a suspect message (from: us-east-0)",
		"2026/12/02 00:11:34 [WARN] memberlist: Refuting a suspect message (from: eu-west-0)",
		"2026/12/02 00:11:34 [WARN] memberlist: Refuting a suspect message (from: ap-east-0)",
		"2026/12/02 00:11:34 [ERR] memberlist: Failed fallback TCP ping: io: read/write on closed pipe",
		`2026/12/02 00:11:34 [ERR] memberlist: discarding packet with unacceptable label "a1": from=10.0.0.9:7946`,
		`2026/12/02 00:11:34 [ERR] memberlist: discarding packet with unacceptable label "a2": from=10.0.0.9:7946`,
		`2026/12/02 00:11:34 [ERR] memberlist: discarding packet with unacceptable label "a3": from=10.0.0.9:7946`,
	}
	for _, l := range lines {
		if _, err := w.Write([]byte(l + "\n")); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(WarnEvery)
	_, _ = w.Write([]byte("2026/12/02 00:12:04 [WARN] memberlist: Refuting a suspect message (from: us-east-0)\n"))

	var records []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if strings.Count(line, `"msg"`) != 1 {
			t.Errorf("record %s: want exactly one msg key", line)
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("record %q: %v", line, err)
		}
		records = append(records, r)
	}
	want := []struct {
		level, msg string
		suppressed float64
	}{
		{"DEBUG", "Stream connection from=127.0.0.1:5000", 0},
		{"WARN", "Refuting a suspect message (from: us-east-0)", 0},
		{"ERROR", "Failed fallback TCP ping: io: read/write on closed pipe", 0},
		{"ERROR", `discarding packet with unacceptable label "a1": from=10.0.0.9:7946`, 0}, // the sender's labels make no new kinds
		{"WARN", "Refuting a suspect message (from: us-east-0)", 2},
	}
	if len(records) != len(want) {
		t.Fatalf("%d records, want %d:\n%s", len(records), len(want), buf.String())
	}
	for i, w := range want {
		r := records[i]
		s, _ := r["suppressed"].(float64)
		if r["level"] != w.level || r["msg"] != w.msg || s != w.suppressed {
			t.Errorf("record %d = %v; want level %s, msg %q, suppressed %v", i, r, w.level, w.msg, w.suppressed)
		}
	}
}

// FuzzMemberlistLine: any line memberlist writes becomes a record; none
// panics.
func FuzzMemberlistLine(f *testing.F) {
	for _, s := range []string{"2026/12/02 00:11:33 [WARN] memberlist: Refuting a suspect message (from: x)", "[ERR]", "", "memberlist: ["} {
		f.Add(s)
	}
	w := newMemberlistLog(slog.New(slog.DiscardHandler), time.Now)
	f.Fuzz(func(t *testing.T, line string) {
		if n, err := w.Write([]byte(line)); err != nil || n != len(line) {
			t.Fatalf("Write = %d, %v", n, err)
		}
	})
}
