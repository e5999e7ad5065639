package explain

import (
	"bytes"
	"strings"
	"testing"

	"skywalker/internal/policy"
)

func TestWorkedExampleRoutesAsTheRuleSays(t *testing.T) {
	data, err := Example(DefaultExample)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := s.Evaluate(nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Row{}
	for _, r := range rows {
		got[r.Policy] = r
	}
	if r := got["skywalker"]; r.Action != "forward" || r.Region != "eu-west" || r.Estimate <= 0 {
		t.Errorf("skywalker: %+v, want forward to eu-west with an estimate", r)
	}
	if r := got["local"]; (r.Action != "dispatch" && r.Action != "hold") || r.Region != "us-east" {
		t.Errorf("local (GeoDNS): %+v, want it kept in us-east", r)
	}
	if r := got["local-least-load"]; r.Action != "dispatch" || r.Region != "us-east" {
		t.Errorf("local-least-load: %+v, want dispatch in us-east", r)
	}
	var out bytes.Buffer
	if err := WriteTable(&out, rows); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(out.String(), "\n"); lines != 1+len(policy.Names) {
		t.Errorf("table has %d lines, want a header and %d policies:\n%s", lines, len(policy.Names), out.String())
	}
}

func TestParseRejectsBadSituations(t *testing.T) {
	good, _ := Example(DefaultExample)
	tests := []struct {
		name, yaml, want string
	}{
		{"empty", "", "empty"},
		{"not yaml", "{{{", "parse situation"},
		{"unknown field", string(good) + "\nbogus: 1\n", "bogus"},
		{"wrong type", strings.Replace(string(good), "queued: 30", "queued: lots", 1), "line 11"},
		{"negative", strings.Replace(string(good), "queued: 30", "queued: -1", 1), "local.queued"},
		{"bad duration", strings.Replace(string(good), "rtt: 72ms", "rtt: fast", 1), "line 23"},
		{"no replicas", "request: {prompt_tokens: 10}\nlocal: {name: a}\n", "local.replicas"},
		{"prefix longer than prompt", strings.Replace(string(good), "prefix_tokens: 4096", "prefix_tokens: 9999", 1), "peers[0].prefix_tokens"},
		{"duplicate region", strings.Replace(string(good), "name: ap-east", "name: eu-west", 1), "used twice"},
	}
	for _, tc := range tests {
		_, err := Parse([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to mention %q", tc.name, err, tc.want)
		}
	}
}

func TestExampleNames(t *testing.T) {
	if _, err := Example("nope"); err == nil || !strings.Contains(err.Error(), DefaultExample) {
		t.Errorf("unknown example error should list the built-ins: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	good, _ := Example(DefaultExample)
	f.Add(good)
	f.Add([]byte("request: {prompt_tokens: 1}\nlocal: {name: a, replicas: [{name: r}]}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(data)
		if err != nil {
			return
		}
		if _, err := s.Evaluate(nil); err != nil {
			t.Fatalf("a valid situation failed to evaluate: %v", err)
		}
	})
}
