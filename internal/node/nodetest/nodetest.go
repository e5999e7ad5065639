// Package nodetest is the harness for tests that run real proxies and mesh
// nodes: a whole cluster on loopback stopped at the test's end, and an
// Eventually that waits generously and, when it gives up, says what did
// not happen. Waits never assert on speed: on a busy two-core machine a
// deadline is a bound on patience, not a measurement.
package nodetest

import (
	"context"
	"testing"
	"time"

	"skywalker/internal/engine"
	"skywalker/internal/engine/server"
	"skywalker/internal/node"
	"skywalker/internal/profile"
	"skywalker/internal/testwait"
)

// Converge is how long a cluster may take to converge in a test.
const Converge = 60 * time.Second

// Options shape a test cluster; zero fields take node.ClusterOptions'
// defaults, and Engine defaults to the A100 profile at 20× real time
// serving model "m".
type Options = node.ClusterOptions

// Start runs a cluster for the test and waits until it has converged.
func Start(t testing.TB, o Options) *node.Cluster {
	t.Helper()
	if o.Engine.Model == "" {
		o.Engine.Model = "m"
	}
	if o.Engine.Engine.Profile.Name == "" {
		o.Engine.Engine.Profile, _ = profile.Lookup("llama3-8b-a100")
	}
	if o.Engine.TimeScale == 0 {
		o.Engine.TimeScale = 20
	}
	c, err := node.StartCluster(context.Background(), o)
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Cleanup(c.Close)
	if err := c.WaitConverged(context.Background(), Converge); err != nil {
		t.Fatal(err)
	}
	return c
}

// EngineConfig is the default engine configuration of a test cluster with
// another time scale.
func EngineConfig(timeScale float64) server.Config {
	p, _ := profile.Lookup("llama3-8b-a100")
	return server.Config{Model: "m", Engine: engine.Config{Profile: p}, TimeScale: timeScale}
}

// Eventually polls cond until it holds, or fails the test after within
// saying what cond last reported missing (see testwait).
var Eventually = testwait.Eventually
