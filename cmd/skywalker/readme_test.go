package main

import (
	"bytes"
	"flag"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"skywalker/internal/proxy"
)

var update = flag.Bool("update", false, "rewrite the README's settings table from the binary's settings")

const (
	readmePath     = "../../README.md"
	settingsBegin  = "<!-- settings:begin -->\n"
	settingsEnd    = "<!-- settings:end -->"
	settingsUpdate = "go test ./cmd/skywalker -run README -update"
)

// TestTheREADMESettingsTableIsTheBinarys: the README's settings table is
// the one made from proxy.Settings, and every serve flag is in it.
func TestTheREADMESettingsTableIsTheBinarys(t *testing.T) {
	readme, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	begin, end := bytes.Index(readme, []byte(settingsBegin)), bytes.Index(readme, []byte(settingsEnd))
	if begin < 0 || end < begin {
		t.Fatalf("README has no %q … %q block", strings.TrimSpace(settingsBegin), settingsEnd)
	}
	begin += len(settingsBegin)
	want := proxy.SettingsMarkdown()
	if got := string(readme[begin:end]); got != want {
		if *update {
			updated := append(append(append([]byte{}, readme[:begin]...), want...), readme[end:]...)
			if err := os.WriteFile(readmePath, updated, 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("the README's settings table is not the binary's; run %s\n%s", settingsUpdate, lineDiff(got, want))
	}
	table := string(readme[begin:end])
	newServeCommand(&logFlags{}).Flags().VisitAll(func(f *pflag.Flag) {
		if f.Name != "config" && !strings.Contains(table, "`--"+f.Name+"`") {
			t.Errorf("serve --%s is not in the README's settings table", f.Name)
		}
	})
}

// lineDiff lists the lines of one text missing from the other.
func lineDiff(got, want string) string {
	var b strings.Builder
	gotLines, wantLines := strings.Split(got, "\n"), strings.Split(want, "\n")
	for _, l := range wantLines {
		if !slices.Contains(gotLines, l) {
			b.WriteString("+ " + l + "\n")
		}
	}
	for _, l := range gotLines {
		if !slices.Contains(wantLines, l) {
			b.WriteString("- " + l + "\n")
		}
	}
	return b.String()
}
