package proxy

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"skywalker/internal/region"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestEnvironmentOverridesTheFile(t *testing.T) {
	c := DefaultConfig()
	if err := c.ApplyYAML([]byte("region: from-file\npolicy: local\nmax_in_flight: 7\nworker_pool: [http://a:8000]\n")); err != nil {
		t.Fatal(err)
	}
	err := c.ApplyEnv(env(map[string]string{
		"REGION_ID": "us-east", "PEER_REGIONS": "eu-west:https://router.eu.example:9000,ap-east:10.0.0.5:7946",
		"LOCAL_WORKER_POOL": "http://10.0.0.1:8000, http://10.0.0.2:8000", "MAX_WAN_RTT_THRESHOLD_MS": "150",
		"SKYWALKER_GOSSIP_KEY": "OpFc4ge0aP0hnkvDdg2oXw==", "SKYWALKER_MAX_WAIT": "5s",
		"SKYWALKER_TLS_CERT": "/etc/skywalker/tls/tls.crt", "SKYWALKER_TLS_KEY": "/etc/skywalker/tls/tls.key",
	}))
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"region from env", c.Region, "us-east"},
		{"policy from file", c.Policy, "local"},
		{"max in flight from file", c.MaxInFlight, 7},
		{"workers from env", len(c.WorkerPool), 2},
		{"peers", len(c.Peers), 2},
		{"peer url", c.Peers[0].Addr, "https://router.eu.example:9000"},
		{"peer gossip", c.Peers[1].Addr, "10.0.0.5:7946"},
		{"wan threshold", c.MaxWANRTT, 150 * time.Millisecond},
		{"max wait", c.MaxWait, 5 * time.Second},
		{"listen default", c.Listen, ":9000"},
		{"peer listener default", c.PeerAddr(), ":9443"},
		{"admin listener default", c.AdminAddr(), "127.0.0.1:9100"},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s: %v, want %v", ch.name, ch.got, ch.want)
		}
	}
	if err := c.Validate(); err != nil {
		t.Errorf("valid config refused: %v", err)
	}
}

func TestValidateNamesTheBadField(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"no region", func(c *Config) { c.Region = "" }, "region (REGION_ID, --region): required"},
		{"no workers", func(c *Config) { c.WorkerPool = nil }, "worker_pool (LOCAL_WORKER_POOL, --workers): list at least one"},
		{"bad worker", func(c *Config) { c.WorkerPool = []string{"ftp://x"} }, `worker_pool (LOCAL_WORKER_POOL, --workers): entry 1: "ftp://x" is not an http(s) URL`},
		{"dns plus urls", func(c *Config) { c.WorkerPool = []string{"vllm.svc", "http://a:1"} }, "worker_pool (LOCAL_WORKER_POOL, --workers): entry 1"},
		{"own region as peer", func(c *Config) { c.Peers = []PeerSeed{{"us-east", "h:1"}} }, "peers (PEER_REGIONS, --peers): entry 1: region \"us-east\" is this proxy's own region"},
		{"peer address", func(c *Config) { c.Peers = []PeerSeed{{"eu-west", "nonsense"}} }, "peers (PEER_REGIONS, --peers): entry 1"},
		{"policy", func(c *Config) { c.Policy = "random" }, "policy (SKYWALKER_POLICY, --policy): unknown policy"},
		{"profile", func(c *Config) { c.Profile = "tpu" }, "profile"},
		{"listen", func(c *Config) { c.Listen = "9000" }, "listen"},
		{"peering without a key", func(c *Config) { c.Peers = []PeerSeed{{"eu-west", "h:1"}}; c.GossipKeys = nil }, "SKYWALKER_GOSSIP_KEY"},
		{"peering without TLS", func(c *Config) { c.GossipKeys = []string{"OpFc4ge0aP0hnkvDdg2oXw=="} }, "tls_cert (SKYWALKER_TLS_CERT, --tls-cert): required when peering"},
		{"a certificate without its key", func(c *Config) { c.TLSCert = "/x.crt" }, "give both or neither"},
		{"admin on the client port", func(c *Config) { c.AdminListen = c.Listen }, "must not be the client port"},
		{"in flight", func(c *Config) { c.MaxInFlight = 0 }, "max_in_flight"},
		{"wait", func(c *Config) { c.MaxWait = -time.Second }, "max_wait"},
		{"a key that is not base64", func(c *Config) { c.GossipKeys = []string{"not a key"} }, "gossip_keys (SKYWALKER_GOSSIP_KEY, --gossip-key): key 1: gossip key is not base64"},
		{"bytes per token", func(c *Config) { c.BytesPerToken = 65 }, "bytes_per_token (SKYWALKER_BYTES_PER_TOKEN, --bytes-per-token): 65 is not in 1..64"},
		{"priority range", func(c *Config) { c.PriorityMin = 1 }, "priority_max (SKYWALKER_PRIORITY_MAX, --priority-max): 0 is below priority_min 1"},
		{"an advertised URL", func(c *Config) { c.AdvertiseURL = "router:9000" }, "advertise_url (SKYWALKER_ADVERTISE_URL, --advertise-url)"},
		{"emulated WAN to itself", func(c *Config) { c.EmulateWAN = map[string]time.Duration{"us-east": time.Millisecond} }, "emulate_wan (SKYWALKER_EMULATE_WAN, --emulate-wan): us-east=1ms"},
		{"priority class bound", func(c *Config) { c.PriorityClassMax = "urgent" }, "priority_class_max (SKYWALKER_PRIORITY_CLASS_MAX, --priority-class-max)"},
	}
	for _, tc := range tests {
		c := DefaultConfig()
		c.Region, c.WorkerPool = "us-east", []string{"http://10.0.0.1:8000"}
		tc.mutate(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to name %q", tc.name, err, tc.want)
		}
	}
}

func TestBadEnvironmentValues(t *testing.T) {
	for k, v := range map[string]string{"MAX_WAN_RTT_THRESHOLD_MS": "fast", "SKYWALKER_MAX_IN_FLIGHT": "many",
		"SKYWALKER_MAX_WAIT": "soon", "PEER_REGIONS": "no-colon", "SKYWALKER_INSECURE_GOSSIP": "perhaps"} {
		c := DefaultConfig()
		if err := c.ApplyEnv(env(map[string]string{k: v})); err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("%s=%s: err = %v", k, v, err)
		}
	}
	c := DefaultConfig()
	if err := c.ApplyYAML([]byte("regoin: typo\n")); err == nil {
		t.Error("unknown YAML keys must be refused")
	}
}

func TestForwardMarkers(t *testing.T) {
	keys, err := newMarkers([]string{"OpFc4ge0aP0hnkvDdg2oXw=="}, "skywalker")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	const eu1, eu2 = "https://eu-west-1:9443", "https://eu-west-2:9443" // two proxies of eu-west
	body := []byte(`{"messages":[{"role":"user","content":"hi"}]}`)
	m := keys.sign(forward{Origin: "us-east", Dest: "eu-west", DestProxy: eu1, ID: "req-1"}, body, now)
	if f, err := keys.verify(m, "eu-west", eu1, body, now); err != nil || f.Origin != "us-east" || f.ID != "req-1" {
		t.Errorf("verify own marker: %+v %v", f, err)
	}
	tenanted := keys.sign(forward{Origin: "us-east", Dest: "eu-west", DestProxy: eu1, ID: "req-t", Tenant: "key-ab;cd", Owner: "key-ef"}, body, now)
	if f, err := keys.verify(tenanted, "eu-west", eu1, body, now); err != nil || f.Tenant != "key-ab;cd" || f.Owner != "key-ef" {
		t.Errorf("the tenant and the owner travel in the marker: %+v %v", f, err)
	}
	if _, err := keys.verify(strings.Replace(tenanted, ";a2V5LWFiO2Nk;", ";b3RoZXI;", 1), "eu-west", eu1, body, now); err == nil {
		t.Error("a marker whose tenant was changed verified")
	}
	other, _ := newMarkers([]string{"EjRWeJq83vAxMjM0NTY3OA=="}, "skywalker")
	fresh := func(id string) string {
		return keys.sign(forward{Origin: "us-east", Dest: "eu-west", DestProxy: eu1, ID: id}, body, now)
	}
	for _, tc := range []struct {
		name, marker, dest, body, want string
	}{
		{"replayed", m, "eu-west", string(body), "replayed"},
		{"replayed with another body", m, "eu-west", `{"messages":[{"role":"user","content":"evil"}]}`, "MAC does not verify"},
		{"replayed at another region", fresh("req-2"), "ap-east", string(body), "meant for region eu-west"},
		{"replayed at another proxy of the region", keys.sign(forward{Origin: "us-east", Dest: "eu-west", DestProxy: eu2, ID: "req-2b"}, body, now), "eu-west", string(body), "meant for proxy https://eu-west-2:9443"},
		{"to its own origin", keys.sign(forward{Origin: "eu-west", Dest: "eu-west", DestProxy: eu1, ID: "req-3"}, body, now), "eu-west", string(body), "does not forward to itself"},
		{"other key", other.sign(forward{Origin: "us-east", Dest: "eu-west", DestProxy: eu1, ID: "req-4"}, body, now), "eu-west", string(body), "MAC does not verify"},
		{"tampered id", strings.Replace(fresh("req-5"), "req-5", "req-6", 1), "eu-west", string(body), "MAC does not verify"},
		{"too old", keys.sign(forward{Origin: "us-east", Dest: "eu-west", DestProxy: eu1, ID: "req-7"}, body, now.Add(-MaxMarkerSkew-time.Second)), "eu-west", string(body), "timestamp outside"},
		{"the previous release's format", "us-east;req-8;1;00", "eu-west", string(body), "invalid"},
		{"garbage", "hello", "eu-west", string(body), "invalid"},
		{"not hex", "2;us-east;eu-west;req-9;;1;zz", "eu-west", string(body), "invalid"},
	} {
		_, err := keys.verify(tc.marker, tc.dest, eu1, []byte(tc.body), now)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it refused: %q", tc.name, err, tc.want)
		}
	}
	legacy := keys.signVersion(legacyMarkerVersion, forward{Origin: "us-east", Dest: "eu-west", DestProxy: eu1, ID: "req-11", Tenant: "key-0a"}, body, now)
	if f, err := keys.verify(legacy, "eu-west", eu1, body, now); err != nil || f.ID != "req-11" || f.Owner != "key-0a" {
		t.Errorf("the previous release's version 3 marker must verify during an upgrade, its authenticated tenant the owner: %+v %v", f, err)
	}
	v2 := strings.Replace(keys.signVersion(legacyMarkerVersion, forward{Origin: "us-east", Dest: "eu-west", DestProxy: eu1, ID: "req-12"}, body, now), "3;", "2;", 1)
	if _, err := keys.verify(v2, "eu-west", eu1, body, now); err == nil || !strings.Contains(err.Error(), "version 2") {
		t.Errorf("a version 2 marker (no receiving proxy): %v, want it refused as such", err)
	}
	rotated, _ := newMarkers([]string{"EjRWeJq83vAxMjM0NTY3OA==", "OpFc4ge0aP0hnkvDdg2oXw=="}, "skywalker")
	if _, err := rotated.verify(fresh("req-10"), "eu-west", eu1, body, now); err != nil {
		t.Errorf("a marker signed with the old key must verify during rotation: %v", err)
	}
	// The replay cache forgets what the window no longer admits.
	later := now.Add(3 * MaxMarkerSkew)
	keys.remember("sweep", later)
	if _, ok := keys.seen["us-east\x00req-1"]; ok {
		t.Error("the replay cache kept an entry older than twice the skew window")
	}
}

func TestParseEngineMetrics(t *testing.T) {
	vllm := `# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3
vllm:num_requests_running{engine="0",model_name="m"} 12
vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="2000"} 1
`
	m, err := parseEngineMetrics(strings.NewReader(vllm))
	if err != nil || !m.Known || m.Waiting != 3 || m.Running != 12 || m.KVUsage != 0.5 || m.KVBlocks != 2000 || m.BlockSize != 16 {
		t.Errorf("vllm (deprecated kv name): %+v %v", m, err)
	}
	sglang := "sglang:num_queue_reqs{model_name=\"m\"} 2\nsglang:num_running_reqs{model_name=\"m\"} 5\nsglang:token_usage{model_name=\"m\"} 0.25\n"
	if m, err := parseEngineMetrics(strings.NewReader(sglang)); err != nil || m.Waiting != 2 || m.Running != 5 || m.KVUsage != 0.25 {
		t.Errorf("sglang: %+v %v", m, err)
	}
	// A data-parallel server: two engines, each 48% full, one with two
	// waiting. The replica is 48% full (summed it looked 96%, and was
	// held), a new request waits behind the shorter queue, and all 29 it
	// holds count.
	page, err := os.ReadFile("testdata/vllm-dp2-metrics.txt")
	if err != nil {
		t.Fatal(err)
	}
	m, err = parseEngineMetrics(bytes.NewReader(page))
	if want := (region.Metrics{Known: true, Waiting: 0, Running: 29, KVUsage: 0.48, KVBlocks: 2 * 27306, BlockSize: 16}); err != nil ||
		math.Abs(m.KVUsage-want.KVUsage) > 1e-9 || m.Waiting != want.Waiting || m.Running != want.Running || m.KVBlocks != want.KVBlocks ||
		m.BlockSize != want.BlockSize || !m.Known {
		t.Errorf("two data-parallel engines: %+v %v; want %+v", m, err, want)
	}
	// One config series for two identical engines: each has its blocks,
	// counted once per engine.
	shared := `vllm:kv_cache_usage_perc{engine="0"} 0.2
vllm:kv_cache_usage_perc{engine="1"} 0.6
vllm:num_requests_running{engine="0"} 1
vllm:cache_config_info{block_size="16",num_gpu_blocks="1000"} 1
`
	if m, err := parseEngineMetrics(strings.NewReader(shared)); err != nil || m.KVBlocks != 2000 || math.Abs(m.KVUsage-0.4) > 1e-9 {
		t.Errorf("one config series, two engines: %+v %v; want 2000 blocks, usage 0.4", m, err)
	}
	// LoRA: the engine's slots and the adapters running, from the newest
	// vllm:lora_requests_info sample (the older one's adapters are gone).
	lora, err := os.ReadFile("testdata/vllm-lora-metrics.txt")
	if err != nil {
		t.Fatal(err)
	}
	if m, err := parseEngineMetrics(bytes.NewReader(lora)); err != nil || m.MaxLoRAs != 8 || !slices.Equal(m.RunningAdapters, []string{"chat-lora", "text2sql-lora"}) {
		t.Errorf("lora info: slots %d, running %v (%v); want 8 and chat-lora, text2sql-lora", m.MaxLoRAs, m.RunningAdapters, err)
	}
	if m, err := parseEngineMetrics(strings.NewReader("process_cpu_seconds_total 3\n")); err != nil || m.Known {
		t.Errorf("a bare server: %+v %v; want unknown, no error", m, err)
	}
	if _, err := parseEngineMetrics(strings.NewReader("{{{ not metrics")); err == nil {
		t.Error("garbage must be an error")
	}
}

func FuzzConfigYAML(f *testing.F) {
	f.Add([]byte("region: us-east\nworker_pool: [http://a:8000]\npeers: [{region: eu-west, addr: 'h:1'}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c := DefaultConfig()
		if err := c.ApplyYAML(data); err != nil {
			return
		}
		_ = c.Validate()
	})
}

// A scrape parses only the families it reads (an engine's page is mostly
// histograms it does not): the load it reads is what parsing the whole
// page gives, and a histogram line is never handed to the parser.
func TestTheScrapeParsesOnlyWhatItReads(t *testing.T) {
	for _, name := range []string{"testdata/engine-metrics.txt", "testdata/vllm-dp2-metrics.txt", "testdata/vllm-lora-metrics.txt"} {
		page, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		whole, err := metricFamilies(page)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, err := parseEngineMetrics(bytes.NewReader(page))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if want := metricsOf(whole); fmt.Sprint(got) != fmt.Sprint(want) || !got.Known {
			t.Errorf("%s: read %+v from the understood lines, %+v from the whole page", name, got, want)
		}
		if kept := onlyUnderstood(page); bytes.Contains(kept, []byte("_bucket")) || len(kept) >= len(page) && bytes.Contains(page, []byte("_bucket")) {
			t.Errorf("%s: %d of %d bytes kept for the parser, histograms included", name, len(kept), len(page))
		}
	}
}

// BenchmarkParseEngineMetrics is one scrape of a simulated vLLM engine's
// page (what every proxy does ten times a second per replica).
func BenchmarkParseEngineMetrics(b *testing.B) {
	page, err := os.ReadFile("testdata/engine-metrics.txt")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parseEngineMetrics(bytes.NewReader(page)); err != nil {
			b.Fatal(err)
		}
	}
}

func FuzzEngineMetrics(f *testing.F) {
	f.Add([]byte("vllm:num_requests_waiting{engine=\"0\"} 3\n"))
	f.Add([]byte("vllm:num_requests_waiting NaN\nvllm:kv_cache_usage_perc{engine=\"1\"} NaN\nvllm:num_requests_running 1e300\n"))
	for _, name := range []string{"testdata/vllm-dp2-metrics.txt", "testdata/vllm-lora-metrics.txt", "testdata/engine-metrics.txt"} {
		if page, err := os.ReadFile(name); err == nil {
			f.Add(page)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := parseEngineMetrics(strings.NewReader(string(data)))
		if err == nil && (m.KVUsage < 0 || m.KVUsage > 1 || m.Waiting < 0 || m.Running < 0 || math.IsNaN(m.KVUsage)) {
			t.Errorf("out-of-range metrics from %q: %+v", data, m)
		}
	})
}

func FuzzForwardMarker(f *testing.F) {
	keys, _ := newMarkers(nil, "skywalker")
	const eu1 = "https://eu-west-1:9443"
	f.Add(keys.sign(forward{Origin: "us-east", Dest: "eu-west", DestProxy: eu1, ID: "x"}, []byte("{}"), time.Now()))
	f.Add(keys.signVersion(legacyMarkerVersion, forward{Origin: "us-east", Dest: "eu-west", ID: "x"}, []byte("{}"), time.Now()))
	f.Fuzz(func(t *testing.T, marker string) {
		_, _ = keys.verify(marker, "eu-west", eu1, []byte("{}"), time.Now())
	})
}

func TestDNSPoolResolvesToReplicaURLs(t *testing.T) {
	urls, err := lookup(context.Background(), "localhost:8123")
	if err != nil {
		t.Skipf("no resolver here: %v", err)
	}
	if len(urls) == 0 {
		t.Fatal("localhost resolved to nothing")
	}
	for _, u := range urls {
		if u.Scheme != "http" || !strings.HasSuffix(u.Host, ":8123") {
			t.Errorf("replica URL %v: want http://IP:8123", u)
		}
	}
	cfg := DefaultConfig()
	cfg.WorkerPool = []string{"localhost:8123"}
	got, err := initialReplicas(context.Background(), cfg)
	if err != nil || len(got) != len(urls) {
		t.Errorf("a DNS-named pool: %v %v", got, err)
	}
}

// A rotated certificate (a Kubernetes Secret updated in place) is served
// without a restart; a broken rotation keeps the certificate that works.
func TestThePeerCertificateIsReloadedWhenItsFileChanges(t *testing.T) {
	dir := t.TempDir()
	write := func(cn string) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
		der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		kder, _ := x509.MarshalECPrivateKey(key)
		_ = os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
		_ = os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	}
	write("first")
	now := time.Now()
	r := &certReloader{certFile: filepath.Join(dir, "tls.crt"), keyFile: filepath.Join(dir, "tls.key"), now: func() time.Time { return now }}
	if err := r.load(); err != nil {
		t.Fatal(err)
	}
	name := func() string {
		c, _ := r.get(nil)
		leaf, _ := x509.ParseCertificate(c.Certificate[0])
		return leaf.Subject.CommonName
	}
	write("second")
	_ = os.Chtimes(filepath.Join(dir, "tls.crt"), now.Add(time.Minute), now.Add(time.Minute))
	if got := name(); got != "first" {
		t.Fatalf("before the next check: %q, want the loaded one", got)
	}
	now = now.Add(CertCheckEvery)
	if got := name(); got != "second" {
		t.Errorf("after the check: %q, want the rotated certificate", got)
	}
	_ = os.WriteFile(filepath.Join(dir, "tls.crt"), []byte("not a certificate"), 0o600)
	_ = os.Chtimes(filepath.Join(dir, "tls.crt"), now.Add(2*time.Minute), now.Add(2*time.Minute))
	now = now.Add(CertCheckEvery)
	if got := name(); got != "second" {
		t.Errorf("after a broken rotation: %q, want the certificate that works", got)
	}
}
