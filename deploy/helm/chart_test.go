package helm

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"skywalker/internal/proxy"
)

// objects is one rendered release, decoded.
type objects struct {
	deployments []appsv1.Deployment
	services    []corev1.Service
	secrets     []corev1.Secret
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.Load("skywalker")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// render renders the chart as `helm template <release> -n <namespace> -f
// values` would.
func render(c *chart.Chart, release, namespace string, values map[string]any) (map[string]string, error) {
	vals, err := chartutil.ToRenderValues(c, values, chartutil.ReleaseOptions{Name: release, Namespace: namespace, IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	return engine.Render(c, vals)
}

func readValues(t *testing.T, path string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

// decode splits the rendered files into objects and decodes each strictly
// (an unknown or misplaced field is an error) into its k8s.io/api type.
func decode(t *testing.T, files map[string]string) objects {
	t.Helper()
	var out objects
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		for i, doc := range strings.Split(files[name], "\n---") {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			var head struct{ APIVersion, Kind string }
			if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
				t.Fatalf("%s #%d: %v\n%s", name, i, err, doc)
			}
			var target any
			switch head.APIVersion + " " + head.Kind {
			case "apps/v1 Deployment":
				out.deployments = append(out.deployments, appsv1.Deployment{})
				target = &out.deployments[len(out.deployments)-1]
			case "v1 Service":
				out.services = append(out.services, corev1.Service{})
				target = &out.services[len(out.services)-1]
			case "v1 Secret":
				out.secrets = append(out.secrets, corev1.Secret{})
				target = &out.secrets[len(out.secrets)-1]
			default:
				t.Fatalf("%s #%d: unexpected object %s %s", name, i, head.APIVersion, head.Kind)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), target); err != nil {
				t.Errorf("%s #%d: not a valid %s: %v\n%s", name, i, head.Kind, err, doc)
			}
		}
	}
	return out
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// proxyConfig reads a container's environment as skywalker serve would,
// with the pod's downward-API values filled in.
func proxyConfig(c corev1.Container, secrets map[string]string) (proxy.Config, error) {
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
			env[e.Name] = map[string]string{"status.podIP": "10.0.0.7", "metadata.name": "skywalker-abc"}[e.ValueFrom.FieldRef.FieldPath]
		case e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil:
			env[e.Name] = e.ValueFrom.ResourceFieldRef.Resource
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			env[e.Name] = secrets[e.ValueFrom.SecretKeyRef.Name]
		default:
			env[e.Name] = strings.ReplaceAll(e.Value, "$(POD_IP)", env["POD_IP"])
		}
		if e.Name != "POD_IP" && e.Name != "GOMEMLIMIT" && !slices.Contains(proxy.EnvVars(), e.Name) {
			return proxy.Config{}, fmt.Errorf("env %s is not read by skywalker serve", e.Name)
		}
	}
	cfg := proxy.DefaultConfig()
	if err := cfg.ApplyEnv(func(k string) string { return env[k] }); err != nil {
		return cfg, err
	}
	return cfg, cfg.Validate()
}

const testKey = "c2t5d2Fsa2VyLWV4YW1wbGUta2V5LTMyLWJ5dGVzISE="

// TestEveryExampleRendersToValidObjectsTheBinaryAccepts renders the chart
// with each example values file, as `helm template` would, and checks the
// objects: strictly valid Kubernetes, probes and ports where the binary
// serves them, and an environment skywalker serve parses and accepts.
func TestEveryExampleRendersToValidObjectsTheBinaryAccepts(t *testing.T) {
	c := loadChart(t)
	examples, _ := filepath.Glob("examples/*.yaml")
	if len(examples) < 4 {
		t.Fatalf("examples %v: want the three regions and the one-cluster layout", examples)
	}
	for _, path := range examples {
		t.Run(filepath.Base(path), func(t *testing.T) {
			values := readValues(t, path)
			files, err := render(c, "skywalker", fmt.Sprint(values["region"]), values)
			if err != nil {
				t.Fatal(err)
			}
			objs := decode(t, files)
			secrets := map[string]string{"skywalker-gossip": testKey}
			for _, s := range objs.secrets {
				secrets[s.Name] = s.StringData["key"]
			}
			if len(objs.deployments) == 0 {
				t.Fatal("no Deployment")
			}
			for _, d := range objs.deployments {
				pod := d.Spec.Template
				if !matches(d.Spec.Selector.MatchLabels, pod.Labels) {
					t.Errorf("%s: selector %v does not select its pods %v", d.Name, d.Spec.Selector.MatchLabels, pod.Labels)
				}
				ctr := pod.Spec.Containers[0]
				if !slices.Equal(ctr.Args, []string{"serve"}) || !strings.HasPrefix(ctr.Image, "registry.example.com/skywalker:") {
					t.Errorf("%s: container %s %v", d.Name, ctr.Image, ctr.Args)
				}
				if ctr.ReadinessProbe.HTTPGet.Path != "/ready" || ctr.LivenessProbe.HTTPGet.Path != "/health" {
					t.Errorf("%s: probes must use /ready and /health", d.Name)
				}
				if pod.Spec.SecurityContext == nil || pod.Spec.SecurityContext.RunAsNonRoot == nil || !*pod.Spec.SecurityContext.RunAsNonRoot {
					t.Errorf("%s: the proxy must run as non-root", d.Name)
				}
				cfg, err := proxyConfig(ctr, secrets)
				if err != nil {
					t.Errorf("%s: skywalker serve would refuse this configuration: %v", d.Name, err)
					continue
				}
				if pod.Annotations["prometheus.io/port"] != "9100" || cfg.AdminAddr() != ":9100" {
					t.Errorf("%s: Prometheus scrapes port %s, the admin listener is %q; want both 9100", d.Name, pod.Annotations["prometheus.io/port"], cfg.AdminAddr())
				}
				if cfg.Region != values["region"] || cfg.Listen != ":9000" || cfg.GossipBind != ":7946" || len(cfg.GossipKeys) != 1 {
					t.Errorf("%s: region %q, listen %s, gossip %s, %d keys", d.Name, cfg.Region, cfg.Listen, cfg.GossipBind, len(cfg.GossipKeys))
				}
				if ctr.Lifecycle == nil || ctr.Lifecycle.PreStop == nil || ctr.Lifecycle.PreStop.Sleep == nil {
					t.Errorf("%s: no preStop sleep: the pod would get SIGTERM while still in the Service's endpoints", d.Name)
				} else if grace, need := time.Duration(*pod.Spec.TerminationGracePeriodSeconds)*time.Second,
					time.Duration(ctr.Lifecycle.PreStop.Sleep.Seconds)*time.Second+cfg.DrainTimeout; grace <= need {
					t.Errorf("%s: terminationGracePeriodSeconds %v, but preStop + drain take %v: the kubelet would kill the drain", d.Name, grace, need)
				}
				if granted, _ := values["peerJurisdictions"].(map[string]any); len(granted) != len(cfg.PeerJurisdictions) {
					t.Errorf("%s: values grant %v, the proxy reads %v", d.Name, granted, cfg.PeerJurisdictions)
				} else {
					for r, j := range granted {
						if cfg.PeerJurisdictions[r] != fmt.Sprint(j) {
							t.Errorf("%s: %s granted %v, the proxy reads %q", d.Name, r, j, cfg.PeerJurisdictions[r])
						}
					}
				}
				if pools, _ := values["modelPools"].(map[string]any); len(pools) != len(cfg.ModelPools) {
					t.Errorf("%s: values pin %v, the proxy reads %v", d.Name, pools, cfg.ModelPools)
				} else {
					for model, urls := range pools {
						if fmt.Sprint(urls) != fmt.Sprint(cfg.ModelPools[model]) {
							t.Errorf("%s: model %s pinned to %v, the proxy reads %v", d.Name, model, urls, cfg.ModelPools[model])
						}
					}
				}
				if profiles, _ := values["modelProfiles"].(map[string]any); len(profiles) != len(cfg.ModelProfiles) {
					t.Errorf("%s: values give profiles %v, the proxy reads %v", d.Name, profiles, cfg.ModelProfiles)
				}
				if !hasMemoryLimitEnv(ctr) {
					t.Errorf("%s: GOMEMLIMIT is not the container's memory limit (%v): the heap could grow past it", d.Name, ctr.Resources.Limits.Memory())
				}
				if !selectedByService(objs.services, pod.Labels, "http") {
					t.Errorf("%s: no Service sends clients to it", d.Name)
				}
			}
		})
	}
}

// TestRegionsInSeparateClustersReachEachOther: with one cluster per
// region, each proxy advertises the address of its own LoadBalancer
// Service, which carries HTTP and gossip over TCP and UDP; every region's
// peers are addresses another region's proxies advertise.
func TestRegionsInSeparateClustersReachEachOther(t *testing.T) {
	c := loadChart(t)
	advertised := map[string]string{} // "host:port" of HTTP → region
	peers := map[string][]proxy.PeerSeed{}
	for _, region := range []string{"us-east", "eu-west", "ap-east"} {
		values := readValues(t, filepath.Join("examples", region+".yaml"))
		files, err := render(c, "skywalker", region, values)
		if err != nil {
			t.Fatal(err)
		}
		objs := decode(t, files)
		addresses := values["mesh"].(map[string]any)["addresses"].([]any)
		if len(objs.deployments) != len(addresses) {
			t.Fatalf("%s: %d Deployments for %d addresses: want one proxy per reserved address", region, len(objs.deployments), len(addresses))
		}
		for _, d := range objs.deployments {
			cfg, err := proxyConfig(d.Spec.Template.Spec.Containers[0], map[string]string{"skywalker-gossip": testKey})
			if err != nil {
				t.Fatal(err)
			}
			peers[region] = cfg.Peers
			host := strings.TrimSuffix(strings.TrimPrefix(cfg.AdvertiseURL, "https://"), ":9443")
			if cfg.TLSCert == "" || cfg.PeerAddr() != ":9443" {
				t.Errorf("%s/%s: peers forward to %s without TLS; want the TLS peer listener on 9443", region, d.Name, cfg.AdvertiseURL)
			}
			if cfg.GossipAdvertise != host+":7946" || !slices.Contains(addresses, any(host)) {
				t.Errorf("%s/%s advertises %s and %s; want one of its reserved addresses %v", region, d.Name, cfg.AdvertiseURL, cfg.GossipAdvertise, addresses)
			}
			var lb *corev1.Service
			for i, s := range objs.services {
				if s.Spec.Type == corev1.ServiceTypeLoadBalancer && matches(s.Spec.Selector, d.Spec.Template.Labels) && matches(d.Spec.Template.Labels, s.Spec.Selector) {
					lb = &objs.services[i]
				}
			}
			if lb == nil || lb.Spec.LoadBalancerIP != host {
				t.Errorf("%s/%s: no LoadBalancer Service of its own on %s", region, d.Name, host)
				continue
			}
			var ports []string
			for _, p := range lb.Spec.Ports {
				ports = append(ports, fmt.Sprintf("%d/%s", p.Port, p.Protocol))
			}
			if want := []string{"9000/TCP", "9443/TCP", "7946/TCP", "7946/UDP"}; !slices.Equal(ports, want) {
				t.Errorf("%s/%s: load balancer ports %v, want %v", region, d.Name, ports, want)
			}
			advertised[host+":9000"] = region
		}
	}
	for region, seeds := range peers {
		if len(seeds) != 2 {
			t.Errorf("%s has peers %v; want the two other regions", region, seeds)
		}
		for _, s := range seeds {
			host := strings.TrimPrefix(s.Addr, "http://")
			if advertised[host] != s.Region {
				t.Errorf("%s's peer %s at %s is no address region %s advertises (%v)", region, s.Region, s.Addr, s.Region, advertised)
			}
		}
	}
}

// TestMissingValuesAreRefusedWithTheirName: a release without the values
// only its user can give fails to render, saying which.
func TestMissingValuesAreRefusedWithTheirName(t *testing.T) {
	c := loadChart(t)
	base := func() map[string]any {
		return map[string]any{"region": "us-east", "pool": "vllm:8000", "image": map[string]any{"repository": "r/skywalker"},
			"gossip": map[string]any{"key": testKey}, "forwarding": map[string]any{"tlsSecret": "fwd-tls"}}
	}
	if _, err := render(c, "skywalker", "us-east", base()); err != nil {
		t.Fatalf("the minimal values should render: %v", err)
	}
	insecure := base()
	insecure["forwarding"] = map[string]any{"insecure": true}
	files, err := render(c, "skywalker", "us-east", insecure)
	if err != nil {
		t.Fatalf("forwarding.insecure should render: %v", err)
	}
	for _, d := range decode(t, files).deployments {
		if cfg, err := proxyConfig(d.Spec.Template.Spec.Containers[0], map[string]string{"skywalker-gossip": testKey}); err != nil || !cfg.InsecureForwarding {
			t.Errorf("forwarding.insecure: %s's configuration %v (insecure forwarding %v)", d.Name, err, cfg.InsecureForwarding)
		}
	}
	tests := []struct {
		name   string
		change func(v map[string]any)
		want   string
	}{
		{"no region", func(v map[string]any) { delete(v, "region") }, "set region"},
		{"bad region", func(v map[string]any) { v["region"] = "US East" }, "region must be lower-case"},
		{"no image", func(v map[string]any) { v["image"] = map[string]any{"repository": ""} }, "set image.repository"},
		{"no pool", func(v map[string]any) { delete(v, "pool") }, "set pool"},
		{"no key", func(v map[string]any) { v["gossip"] = map[string]any{} }, "set gossip.existingSecret or gossip.key"},
		{"no addresses", func(v map[string]any) { v["mesh"] = map[string]any{"exposure": "loadBalancer"} }, "needs mesh.addresses"},
		{"bad exposure", func(v map[string]any) { v["mesh"] = map[string]any{"exposure": "nodePort"} }, "mesh.exposure must be"},
		{"no TLS between regions", func(v map[string]any) { delete(v, "forwarding") }, "set forwarding.tlsSecret"},
	}
	for _, tt := range tests {
		v := base()
		tt.change(v)
		_, err := render(c, "skywalker", "us-east", v)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want one saying %q", tt.name, err, tt.want)
		}
	}
}

func matches(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return len(selector) > 0
}

func selectedByService(services []corev1.Service, labels map[string]string, port string) bool {
	for _, s := range services {
		if s.Spec.Type != corev1.ServiceTypeLoadBalancer && matches(s.Spec.Selector, labels) {
			for _, p := range s.Spec.Ports {
				if p.Name == port {
					return true
				}
			}
		}
	}
	return false
}

// TestTheChartLintsCleanly runs `helm lint` (its library) with every
// example: no warnings, no errors.
func TestTheChartLintsCleanly(t *testing.T) {
	examples, _ := filepath.Glob("examples/*.yaml")
	for _, path := range examples {
		values := readValues(t, path)
		l := lint.All("skywalker", values, fmt.Sprint(values["region"]), false)
		for _, m := range l.Messages {
			if m.Severity > support.InfoSev {
				t.Errorf("%s: %s", path, m)
			}
		}
	}
}

// hasMemoryLimitEnv: the container has a memory limit and tells the Go
// runtime, by GOMEMLIMIT, to collect before it.
func hasMemoryLimitEnv(c corev1.Container) bool {
	for _, e := range c.Env {
		if e.Name == "GOMEMLIMIT" && e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil {
			return e.ValueFrom.ResourceFieldRef.Resource == "limits.memory" && !c.Resources.Limits.Memory().IsZero()
		}
	}
	return false
}
