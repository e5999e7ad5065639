package server

import (
	"testing"

	"skywalker/internal/profile"
)

// StartForTest runs a server with the given profile on a loopback listener
// for the test's lifetime and returns it with its base URL. Zero fields of
// cfg get test defaults: model "test-model", the A100 profile unless one is
// named, 50× real time.
func StartForTest(tb testing.TB, profileName string, cfg Config) (*Server, string) {
	tb.Helper()
	if cfg.Model == "" {
		cfg.Model = "test-model"
	}
	if profileName == "" {
		profileName = "llama3-8b-a100"
	}
	p, err := profile.Lookup(profileName)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.Engine.Profile = p
	if cfg.TimeScale == 0 {
		cfg.TimeScale = 50
	}
	e, err := StartLoopback(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(e.Kill)
	return e.Server, e.URL
}
