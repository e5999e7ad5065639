package main

import (
	"os"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"skywalker/internal/proxy"
)

// TestTheREADMEDocumentsEverySetting: every environment variable serve
// reads, and every serve flag, is named in the README.
func TestTheREADMEDocumentsEverySetting(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range proxy.EnvVars() {
		if !strings.Contains(string(readme), "`"+name+"`") {
			t.Errorf("README does not document %s", name)
		}
	}
	newServeCommand(&logFlags{}).Flags().VisitAll(func(f *pflag.Flag) {
		if f.Name != "config" && !strings.Contains(string(readme), "--"+f.Name) {
			t.Errorf("README does not document serve --%s", f.Name)
		}
	})
}
