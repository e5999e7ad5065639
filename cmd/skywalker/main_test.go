package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func TestExplainPrintsEveryPolicy(t *testing.T) {
	out, err := run(t, "explain")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"skywalker", "forward", "eu-west", "cache-aware"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestExplainJSON(t *testing.T) {
	out, err := run(t, "explain", "--format", "json", "--policies", "skywalker,local")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Decisions []struct{ Policy, Action, Region string }
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if len(got.Decisions) != 2 || got.Decisions[0].Region != "eu-west" || got.Decisions[1].Region != "us-east" {
		t.Errorf("decisions %+v", got.Decisions)
	}
}

func TestExplainRejectsBadInput(t *testing.T) {
	if _, err := run(t, "explain", "--format", "xml"); err == nil {
		t.Error("want an error for an unknown format")
	}
	if _, err := run(t, "explain", "--policies", "magic"); err == nil {
		t.Error("want an error for an unknown policy")
	}
	if _, err := run(t, "explain", "/nonexistent.yaml"); err == nil {
		t.Error("want an error for a missing file")
	}
}
