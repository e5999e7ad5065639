// Package deploy holds the deployment files; this test keeps them true to
// the binary.
package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"skywalker/internal/proxy"
)

func docs(t *testing.T, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var out []map[string]any
	for {
		var d map[string]any
		if err := dec.Decode(&d); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if d != nil {
			out = append(out, d)
		}
	}
}

func get(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

func TestManifestsMatchTheBinary(t *testing.T) {
	files, _ := filepath.Glob("kubernetes/*-*.yaml")
	var regions []string
	for _, f := range files {
		if strings.Contains(f, "secret") {
			continue
		}
		regions = append(regions, f)
	}
	if len(regions) != 3 {
		t.Fatalf("want a manifest per region, found %v", regions)
	}
	for _, f := range regions {
		kinds := map[string]map[string]any{}
		headless := false
		for _, d := range docs(t, f) {
			kind := d["kind"].(string)
			if kind == "Service" && get(d, "spec", "clusterIP") == "None" {
				headless = true
				if get(d, "spec", "ports").([]any)[0].(map[string]any)["port"] != 7946 {
					t.Errorf("%s: the mesh service must expose the gossip port 7946", f)
				}
				continue
			}
			kinds[kind] = d
		}
		dep := kinds["Deployment"]
		if dep == nil || kinds["Service"] == nil || !headless {
			t.Fatalf("%s: want a Deployment, a Service and a headless mesh Service", f)
		}
		if get(dep, "spec", "replicas") != 3 {
			t.Errorf("%s: want 3 proxy replicas", f)
		}
		pod := get(dep, "spec", "template").(map[string]any)
		ann := get(pod, "metadata", "annotations").(map[string]any)
		if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/path"] != "/metrics" || ann["prometheus.io/port"] != "9000" {
			t.Errorf("%s: Prometheus annotations %v", f, ann)
		}
		c := get(pod, "spec", "containers").([]any)[0].(map[string]any)
		if args := c["args"].([]any); len(args) != 1 || args[0] != "serve" {
			t.Errorf("%s: the container must run skywalker serve: %v", f, args)
		}
		env := map[string]map[string]any{}
		for _, e := range c["env"].([]any) {
			em := e.(map[string]any)
			name := em["name"].(string)
			env[name] = em
			if name != "POD_IP" && !slices.Contains(proxy.EnvVars, name) {
				t.Errorf("%s: env %s is not read by skywalker serve", f, name)
			}
		}
		for _, need := range []string{"REGION_ID", "PEER_REGIONS", "LOCAL_WORKER_POOL", "MAX_WAN_RTT_THRESHOLD_MS"} {
			if env[need] == nil {
				t.Errorf("%s: env %s missing", f, need)
			}
		}
		if get(env["SKYWALKER_GOSSIP_KEY"], "valueFrom", "secretKeyRef", "name") != "skywalker-gossip" {
			t.Errorf("%s: the gossip key must come from the skywalker-gossip Secret", f)
		}
		// The values must be valid for the binary's own parser and validator.
		cfg := proxy.DefaultConfig()
		getenv := func(k string) string {
			if e := env[k]; e != nil {
				if v, ok := e["value"].(string); ok {
					return strings.ReplaceAll(v, "$(POD_IP)", "10.0.0.7")
				}
			}
			if k == "SKYWALKER_GOSSIP_KEY" {
				return "a2V5a2V5a2V5a2V5a2V5aw=="
			}
			return ""
		}
		if err := cfg.ApplyEnv(getenv); err != nil {
			t.Errorf("%s: %v", f, err)
		}
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s: the binary would refuse this configuration: %v", f, err)
		}
		if cfg.Listen != ":9000" || cfg.GossipBind != ":7946" {
			t.Errorf("%s: ports %s / %s", f, cfg.Listen, cfg.GossipBind)
		}
		if get(c, "readinessProbe", "httpGet", "path") != "/ready" || get(c, "livenessProbe", "httpGet", "path") != "/health" {
			t.Errorf("%s: probes must use /ready and /health", f)
		}
		if get(pod, "spec", "securityContext", "runAsNonRoot") != true {
			t.Errorf("%s: run as non-root", f)
		}
	}
}

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
