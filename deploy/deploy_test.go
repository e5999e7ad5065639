// Package deploy holds the deployment files: the Helm chart (in helm/, a
// module of its own with its own tests), the Grafana dashboard and, at the
// root, the Dockerfile; these tests keep the last two true to the binary.
package deploy

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

func TestDashboardQueriesExportedMetrics(t *testing.T) {
	data, err := os.ReadFile("grafana/skywalker-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Targets []struct{ Expr string } `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil || len(dash.Panels) == 0 {
		t.Fatalf("dashboard: %v", err)
	}
	exported := []string{"skywalker_requests_total", "skywalker_forwarded_total", "skywalker_queue_length", "skywalker_queue_wait_seconds",
		"skywalker_time_to_first_byte_seconds", "skywalker_prefix_match_ratio", "skywalker_peer_rtt_seconds", "skywalker_peer_gate_open",
		"skywalker_peer_data_age_seconds", "skywalker_replica_healthy"}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			ok := false
			for _, m := range exported {
				ok = ok || strings.Contains(tg.Expr, m)
			}
			if !ok {
				t.Errorf("dashboard query %q uses no exported metric", tg.Expr)
			}
		}
	}
}

func TestDockerfileBuildsAStaticNonRootBinary(t *testing.T) {
	data, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	for _, want := range []string{"CGO_ENABLED=0", "./cmd/skywalker", "USER 65532", "AS build", "EXPOSE 9000"} {
		if !strings.Contains(s, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
}
