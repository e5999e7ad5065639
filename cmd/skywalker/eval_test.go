package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEvalWritesAndRendersAReport runs the evaluation on a small scenario
// file, then renders its results.json.gz again.
func TestEvalWritesAndRendersAReport(t *testing.T) {
	dir := t.TempDir()
	out, err := run(t, "eval", "--scenarios", "../../internal/eval/testdata/two-regions.yaml", "--policies", "skywalker,local",
		"--seeds", "1", "--loads", "1", "--sizes", "1", "--quiet", "--out", dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "report.md") {
		t.Errorf("output does not name what it wrote: %s", out)
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"## `two-regions` (evaluation)", "| skywalker |", "| local |", "two-regions_slo_vs_load.svg"} {
		if !strings.Contains(string(md), s) {
			t.Errorf("report.md lacks %q", s)
		}
	}
	again := t.TempDir()
	if _, err := run(t, "eval", "--render", filepath.Join(dir, "results.json.gz"), "--out", again); err != nil {
		t.Fatal(err)
	}
	md2, err := os.ReadFile(filepath.Join(again, "report.md"))
	if err != nil || string(md2) != string(md) {
		t.Errorf("the rendered report differs from the original (%v)", err)
	}
}

func TestEvalRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"eval", "--scenarios", "no-such-scenario"},
		{"eval", "--policies", "nonsense", "--scenarios", "../../internal/eval/testdata/two-regions.yaml"},
		{"eval", "--seeds", "0"},
		{"eval", "--loads", "1,x"},
		{"eval", "--render", "/nonexistent/results.json"},
	} {
		if _, err := run(t, args...); err == nil {
			t.Errorf("%v: want an error", args)
		}
	}
}
