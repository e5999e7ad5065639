package proxy

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"skywalker/internal/balancer"
	"skywalker/internal/httpserve"
	"skywalker/internal/mesh"
	"skywalker/internal/policy"
	"skywalker/internal/profile"
	"skywalker/internal/region"
	"skywalker/internal/request"
	"skywalker/internal/strictyaml"
)

// Config is the proxy's configuration. Sources apply in the order
// defaults < YAML file < environment < flags; Validate names the bad field.
type Config struct {
	Region       string `yaml:"region"`       // REGION_ID
	Jurisdiction string `yaml:"jurisdiction"` // SKYWALKER_JURISDICTION, e.g. "eu"
	NodeID       string `yaml:"node_id"`      // SKYWALKER_NODE_ID; default region + listen address

	Listen string `yaml:"listen"` // HTTP, default :9000
	// AdminListen serves /metrics, /debug/skywalker and /debug/pprof
	// (SKYWALKER_ADMIN_LISTEN); default loopback on the client port + 100
	// (127.0.0.1:9100 for :9000), "off" for none. Never the client port:
	// what a proxy sees and its profiles are not for its clients.
	AdminListen     string `yaml:"admin_listen"`
	AdvertiseURL    string `yaml:"advertise_url"`    // SKYWALKER_ADVERTISE_URL: how peers reach this proxy
	GossipBind      string `yaml:"gossip_bind"`      // default :7946
	GossipAdvertise string `yaml:"gossip_advertise"` // SKYWALKER_GOSSIP_ADVERTISE host:port

	// Peers are the other regions' proxies (PEER_REGIONS,
	// "eu-west:https://router.eu:9000,ap-east:10.0.0.5:7946"): seeds for
	// joining the mesh. An http(s) URL is asked for its gossip address; a
	// host:port is the gossip address itself.
	Peers []PeerSeed `yaml:"peers"`
	// WorkerPool lists the region's replicas (LOCAL_WORKER_POOL): base
	// URLs, or one DNS name (optionally with :port) whose A records are the
	// replicas, re-resolved every ResolveInterval.
	WorkerPool []string `yaml:"worker_pool"`

	MaxWANRTT      time.Duration `yaml:"max_wan_rtt"`     // MAX_WAN_RTT_THRESHOLD_MS; default 1 s (a ceiling: reach follows the objective)
	GossipKeys     []string      `yaml:"gossip_keys"`     // SKYWALKER_GOSSIP_KEY (comma-separated: primary first)
	InsecureGossip bool          `yaml:"insecure_gossip"` // SKYWALKER_INSECURE_GOSSIP: development only
	// TLS for the hop between regions: with a certificate and key (PEM
	// files, as a Kubernetes TLS Secret mounts them: SKYWALKER_TLS_CERT,
	// SKYWALKER_TLS_KEY) the proxy serves peers on a TLS listener of its
	// own, PeerListen (SKYWALKER_PEER_LISTEN; default the client port +
	// 443, 9443 for :9000), advertises it, and refuses forwarded requests
	// on the plain client port; it verifies peers against TLSCA
	// (SKYWALKER_TLS_CA; default the system's roots). Required when
	// peering, since forwarded requests carry prompts between regions,
	// unless InsecureForwarding (SKYWALKER_INSECURE_FORWARDING, development
	// only; implied by insecure_gossip).
	PeerListen         string `yaml:"peer_listen"`
	TLSCert            string `yaml:"tls_cert"`
	TLSKey             string `yaml:"tls_key"`
	TLSCA              string `yaml:"tls_ca"`
	InsecureForwarding bool   `yaml:"insecure_forwarding"`
	ClusterLabel       string `yaml:"cluster_label"` // SKYWALKER_CLUSTER_LABEL; default "skywalker"
	MeshPreset         string `yaml:"mesh_preset"`   // SKYWALKER_MESH_PRESET: wan (default), lan, local
	// GossipBudget bounds this proxy's gossip of load summaries and digest
	// changes, bytes per second (SKYWALKER_GOSSIP_BUDGET); default 50,000,
	// negative is unlimited.
	GossipBudget int `yaml:"gossip_budget"`

	Policy       string        `yaml:"policy"`         // SKYWALKER_POLICY; default skywalker
	Profile      string        `yaml:"profile"`        // SKYWALKER_PROFILE: the replicas' engine profile, for prefill estimates
	MaxInFlight  int           `yaml:"max_in_flight"`  // SKYWALKER_MAX_IN_FLIGHT per replica; default 64
	MaxQueue     int           `yaml:"max_queue"`      // SKYWALKER_MAX_QUEUE; default 4096
	MaxWait      time.Duration `yaml:"max_wait"`       // SKYWALKER_MAX_WAIT; default 30 s
	MaxBodyBytes int           `yaml:"max_body_bytes"` // SKYWALKER_MAX_BODY_BYTES; default 16 MiB
	// A request body must keep arriving: by BodyTimeout plus one second per
	// MinBodyRate bytes received, or it is answered 408 and its buffer and
	// goroutine freed (SKYWALKER_BODY_TIMEOUT, default 10 s;
	// SKYWALKER_MIN_BODY_RATE bytes/s, default 32 KiB).
	BodyTimeout time.Duration `yaml:"body_timeout"`
	MinBodyRate int           `yaml:"min_body_rate"`
	// BodyBudget bounds the bytes of request bodies the proxy holds at
	// once (received and not yet done with); a body that would go past it
	// is refused 429 + Retry-After, before it is read if its length is
	// declared (SKYWALKER_BODY_BUDGET; default 512 MiB).
	BodyBudget int `yaml:"body_budget"`
	// PriorityMin and PriorityMax bound the body's vLLM "priority" (lower
	// runs first at an engine with priority scheduling); a value outside
	// is a 400 (SKYWALKER_PRIORITY_MIN / SKYWALKER_PRIORITY_MAX; default 0
	// and 0: clients may not reorder the engines' queues).
	PriorityMin int `yaml:"priority_min"`
	PriorityMax int `yaml:"priority_max"`
	// PriorityClassMax is the most urgent class a client may ask for
	// (X-SkyWalker-Priority or metadata.priority); a request above it is a
	// 400 (SKYWALKER_PRIORITY_CLASS_MAX; default standard: only an
	// operator who trusts the clients, or the gateway in front that sets
	// the header, lets them mark requests critical).
	PriorityClassMax string `yaml:"priority_class_max"`
	Retries          int    `yaml:"retries"` // SKYWALKER_RETRIES before the first byte; default 2
	// FirstByteTimeout bounds an attempt's wait for its first byte; past
	// it the target is counted failed (ejected by the passive rule) and
	// the request retried elsewhere (SKYWALKER_FIRST_BYTE_TIMEOUT; default
	// 0: 4× the policy's TTFT estimate, at least 5 s, plus 100 ms per
	// output token for a response that is not streamed). StallTimeout
	// ends a stream that sent nothing for that long
	// (SKYWALKER_STALL_TIMEOUT; default 30 s).
	FirstByteTimeout time.Duration `yaml:"first_byte_timeout"`
	// ForwardAuthorization passes the client's Authorization header on to
	// the peer region a request is forwarded to; by default it is stripped
	// (SKYWALKER_FORWARD_AUTHORIZATION).
	ForwardAuthorization bool `yaml:"forward_authorization"`
	// MidStreamFailover continues a chat stream that breaks midway on
	// another replica or region, the text so far sent as a partial
	// assistant turn for the engine to continue (vLLM's and SGLang's
	// continue_final_message); the client sees one stream
	// (SKYWALKER_MIDSTREAM_FAILOVER; default false).
	MidStreamFailover bool          `yaml:"midstream_failover"`
	StallTimeout      time.Duration `yaml:"stall_timeout"`

	// Admission and fairness (see balancer.Config).
	TTFTObjective          time.Duration `yaml:"ttft_objective"`           // SKYWALKER_TTFT_SLO: standard requests; default 10 s; 0 turns admission off
	TTFTObjectiveCritical  time.Duration `yaml:"ttft_objective_critical"`  // SKYWALKER_TTFT_SLO_CRITICAL; default the standard objective
	TTFTObjectiveSheddable time.Duration `yaml:"ttft_objective_sheddable"` // SKYWALKER_TTFT_SLO_SHEDDABLE; default the standard objective
	TenantHeader           string        `yaml:"tenant_header"`            // SKYWALKER_TENANT_HEADER; default x-gateway-inference-fairness-id
	FairQueuing            bool          `yaml:"fair_queuing"`             // SKYWALKER_FAIR_QUEUING; default true
	TenantMaxHeld          int           `yaml:"tenant_max_held"`          // SKYWALKER_TENANT_MAX_HELD; default 0 (no limit)

	// ReplicaCacheTokens is the KV cache, in tokens, a replica is believed
	// to hold until its engine reports one (vllm:cache_config_info) and as
	// cache-truth feedback corrects it (SKYWALKER_REPLICA_CACHE_TOKENS;
	// default 32,000). BytesPerToken converts prompt bytes to tokens
	// (SKYWALKER_BYTES_PER_TOKEN; default 4, English text under Llama-3).
	ReplicaCacheTokens int `yaml:"replica_cache_tokens"`
	BytesPerToken      int `yaml:"bytes_per_token"`

	// EmulateWAN adds delay on this proxy's links to the named peer regions
	// (SKYWALKER_EMULATE_WAN "eu-west=72ms,ap-east=160ms", --emulate-wan):
	// half the RTT each way on gossip packets, one RTT to open a gossip
	// stream, half each way on forwards — the in-process link emulation
	// of the demo and tests, so several regions on one host need no root
	// and no netem. Development only.
	EmulateWAN map[string]time.Duration `yaml:"emulate_wan"`

	// ModelAliases maps names clients may ask for to the names the engines
	// serve (SKYWALKER_MODEL_ALIASES "public=meta-llama/Llama-3.1-8B,...",
	// as vLLM's --served-model-name): the proxy rewrites the body's model
	// and lists the aliases in /v1/models.
	ModelAliases map[string]string `yaml:"model_aliases"`

	ScrapeInterval  time.Duration `yaml:"scrape_interval"`  // default 100 ms
	ResolveInterval time.Duration `yaml:"resolve_interval"` // DNS pools; default 10 s
	EjectAfter      int           `yaml:"eject_after"`      // consecutive failures; default 3
	DrainTimeout    time.Duration `yaml:"drain_timeout"`    // SKYWALKER_DRAIN_TIMEOUT: graceful shutdown; default 30 s
	IdleTimeout     time.Duration `yaml:"idle_timeout"`     // SKYWALKER_IDLE_TIMEOUT: idle keep-alive connections; default 60 s
}

// Peering reports whether the proxy joins a mesh: it has peers to join
// or a gossip key to be joined with.
func (c Config) Peering() bool { return len(c.Peers) > 0 || len(c.GossipKeys) > 0 }

// AdminAddr is the address the admin listener binds ("" when off): as
// configured, or loopback on the client port + 100.
func (c Config) AdminAddr() string {
	switch c.AdminListen {
	case "off":
		return ""
	case "":
		return offsetPort("127.0.0.1", c.Listen, 100)
	}
	return c.AdminListen
}

// PeerAddr is the address the TLS listener for peers binds ("" without
// TLS): as configured, or the client listener's host on its port + 443.
func (c Config) PeerAddr() string {
	if c.TLSCert == "" {
		return ""
	}
	if c.PeerListen != "" {
		return c.PeerListen
	}
	host, _, _ := net.SplitHostPort(c.Listen)
	return offsetPort(host, c.Listen, 443)
}

// offsetPort is host with the port of addr moved on by offset; port 0 (or
// none) stays 0, any free port.
func offsetPort(host, addr string, offset int) string {
	_, port, err := net.SplitHostPort(addr)
	n, perr := strconv.Atoi(port)
	if err != nil || perr != nil || n == 0 || n+offset > 65535 {
		return net.JoinHostPort(host, "0")
	}
	return net.JoinHostPort(host, strconv.Itoa(n+offset))
}

// PeerSeed is one PEER_REGIONS entry.
type PeerSeed struct {
	Region string `yaml:"region"`
	Addr   string `yaml:"addr"`
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	cp := region.DefaultControlPlane()
	bal := balancer.DefaultConfig()
	return Config{Listen: ":9000", GossipBind: ":7946", MaxWANRTT: cp.MaxWANRTT, ClusterLabel: "skywalker",
		MeshPreset: "wan", GossipBudget: mesh.DefaultGossipBudget, Policy: "skywalker", Profile: profile.Default, MaxInFlight: region.DefaultMaxInFlight,
		MaxQueue: bal.MaxQueue, MaxWait: bal.MaxWait, MaxBodyBytes: request.DefaultMaxBodyBytes, Retries: region.DefaultRetries,
		BodyTimeout: 10 * time.Second, MinBodyRate: 32 << 10, BodyBudget: 512 << 20, StallTimeout: 30 * time.Second,
		ScrapeInterval: cp.ScrapeInterval, ResolveInterval: 10 * time.Second, EjectAfter: region.DefaultEjectAfter,
		DrainTimeout: 30 * time.Second, IdleTimeout: httpserve.DefaultIdleTimeout, TTFTObjective: DefaultTTFTObjective, TenantHeader: DefaultTenantHeader, FairQueuing: true,
		PriorityClassMax: request.Standard.String(), ReplicaCacheTokens: region.DefaultReplicaTokens, BytesPerToken: request.BytesPerToken}
}

// DefaultTTFTObjective is the TTFT objective of every class unless
// configured: generous, so that with any engine and the defaults only a
// request that would wait far longer than any client should is refused
// at once (429 + Retry-After) instead of being held to MaxWait.
const DefaultTTFTObjective = 10 * time.Second

// DefaultTenantHeader names the header requests are grouped into tenants
// by, the Gateway API Inference Extension's fairness id. Without it a
// request's tenant is a hash of its API key (Authorization), if any.
const DefaultTenantHeader = "x-gateway-inference-fairness-id"

// Objectives are the balancer's TTFT objectives per class.
func (c *Config) Objectives() [request.NumClasses]request.SLO {
	var o [request.NumClasses]request.SLO
	std := c.TTFTObjective
	for _, x := range []struct {
		class request.Class
		v     time.Duration
	}{{request.Standard, std}, {request.Critical, c.TTFTObjectiveCritical}, {request.Sheddable, c.TTFTObjectiveSheddable}} {
		v := x.v
		if v == 0 {
			v = std
		}
		if std > 0 {
			o[x.class] = request.SLO{TTFT: v}
		}
	}
	return o
}

// RegionConfig is the region core's configuration (the profile must be
// valid: Validate checks it).
func (c *Config) RegionConfig() region.Config {
	prof, _ := profile.Lookup(c.Profile)
	return region.Config{Name: c.Region, Jurisdiction: c.Jurisdiction, Node: c.NodeID, MaxInFlight: c.MaxInFlight,
		Prefill: policy.PrefillOf(prof), DecodeStep: prof.DecodeStep(), EjectAfter: c.EjectAfter, Retries: c.Retries, DefaultReplicaTokens: c.ReplicaCacheTokens,
		BlockTokens: max(request.DefaultBlockBytes/max(c.BytesPerToken, 1), 1), Balancer: balancer.Config{MaxQueue: c.MaxQueue, MaxWait: c.MaxWait,
			Objectives: c.Objectives(), FIFO: !c.FairQueuing, TenantMaxHeld: c.TenantMaxHeld}}
}

// ControlPlane is the control plane's timing for this proxy: the shared
// defaults with this proxy's scrape interval and WAN threshold.
func (c *Config) ControlPlane() region.ControlPlane {
	cp := region.DefaultControlPlane()
	cp.ScrapeInterval, cp.MaxWANRTT = c.ScrapeInterval, c.MaxWANRTT
	return cp
}

// PolicyConfig is every policy's configuration with this proxy's WAN
// threshold and its replicas' engine profile.
func (c *Config) PolicyConfig() policy.Config {
	prof, _ := profile.Lookup(c.Profile)
	return policy.ConfigFor(prof, c.MaxWANRTT)
}

const maxConfigBytes = 1 << 20

// ApplyYAML overlays a YAML configuration file, strictly: unknown keys and
// wrong types are errors.
func (c *Config) ApplyYAML(data []byte) error {
	if len(data) > maxConfigBytes {
		return fmt.Errorf("config file is %d bytes, over the %d-byte limit", len(data), maxConfigBytes)
	}
	if err := strictyaml.Decode(data, c); err != nil && !errors.Is(err, strictyaml.ErrEmpty) {
		return fmt.Errorf("config file: %w", err)
	}
	return nil
}

// EnvVars returns the environment variables ApplyEnv reads, in the order
// it reads them (asked of ApplyEnv itself, so the list cannot drift).
func EnvVars() []string {
	var names []string
	c := DefaultConfig()
	_ = c.ApplyEnv(func(name string) string { names = append(names, name); return "" })
	return names
}

// ApplyEnv overlays the environment (getenv is os.Getenv in production).
func (c *Config) ApplyEnv(getenv func(string) string) error {
	var errs []error
	str := func(name string, dst *string) {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			*dst = v
		}
	}
	integer := func(name string, dst *int) {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: not an integer", name, v))
				return
			}
			*dst = n
		}
	}
	duration := func(name string, dst *time.Duration) {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: not a duration (e.g. 30s)", name, v))
				return
			}
			*dst = d
		}
	}
	str("REGION_ID", &c.Region)
	str("SKYWALKER_JURISDICTION", &c.Jurisdiction)
	str("SKYWALKER_NODE_ID", &c.NodeID)
	str("SKYWALKER_LISTEN", &c.Listen)
	str("SKYWALKER_ADMIN_LISTEN", &c.AdminListen)
	str("SKYWALKER_ADVERTISE_URL", &c.AdvertiseURL)
	str("SKYWALKER_GOSSIP_BIND", &c.GossipBind)
	str("SKYWALKER_GOSSIP_ADVERTISE", &c.GossipAdvertise)
	str("SKYWALKER_CLUSTER_LABEL", &c.ClusterLabel)
	str("SKYWALKER_MESH_PRESET", &c.MeshPreset)
	str("SKYWALKER_POLICY", &c.Policy)
	str("SKYWALKER_PROFILE", &c.Profile)
	if v := getenv("PEER_REGIONS"); strings.TrimSpace(v) != "" {
		peers, err := ParsePeers(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("PEER_REGIONS: %w", err))
		}
		c.Peers = peers
	}
	if v := getenv("LOCAL_WORKER_POOL"); strings.TrimSpace(v) != "" {
		c.WorkerPool = splitList(v)
	}
	if v := strings.TrimSpace(getenv("MAX_WAN_RTT_THRESHOLD_MS")); v != "" {
		ms, err := strconv.ParseFloat(v, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("MAX_WAN_RTT_THRESHOLD_MS=%q: not a number of milliseconds", v))
		} else {
			c.MaxWANRTT = time.Duration(ms * float64(time.Millisecond))
		}
	}
	if v := getenv("SKYWALKER_GOSSIP_KEY"); strings.TrimSpace(v) != "" {
		c.GossipKeys = splitList(v)
	}
	boolean := func(name string, dst *bool) {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: not a boolean", name, v))
				return
			}
			*dst = b
		}
	}
	if v := strings.TrimSpace(getenv("SKYWALKER_EMULATE_WAN")); v != "" {
		wan, err := ParseEmulateWAN(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("SKYWALKER_EMULATE_WAN: %w", err))
		}
		c.EmulateWAN = wan
	}
	if v := strings.TrimSpace(getenv("SKYWALKER_MODEL_ALIASES")); v != "" {
		aliases, err := ParseAliases(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("SKYWALKER_MODEL_ALIASES: %w", err))
		}
		c.ModelAliases = aliases
	}
	boolean("SKYWALKER_INSECURE_GOSSIP", &c.InsecureGossip)
	boolean("SKYWALKER_INSECURE_FORWARDING", &c.InsecureForwarding)
	str("SKYWALKER_PEER_LISTEN", &c.PeerListen)
	str("SKYWALKER_TLS_CERT", &c.TLSCert)
	str("SKYWALKER_TLS_KEY", &c.TLSKey)
	str("SKYWALKER_TLS_CA", &c.TLSCA)
	boolean("SKYWALKER_FAIR_QUEUING", &c.FairQueuing)
	boolean("SKYWALKER_FORWARD_AUTHORIZATION", &c.ForwardAuthorization)
	boolean("SKYWALKER_MIDSTREAM_FAILOVER", &c.MidStreamFailover)
	str("SKYWALKER_TENANT_HEADER", &c.TenantHeader)
	integer("SKYWALKER_TENANT_MAX_HELD", &c.TenantMaxHeld)
	integer("SKYWALKER_REPLICA_CACHE_TOKENS", &c.ReplicaCacheTokens)
	integer("SKYWALKER_BYTES_PER_TOKEN", &c.BytesPerToken)
	duration("SKYWALKER_TTFT_SLO", &c.TTFTObjective)
	duration("SKYWALKER_TTFT_SLO_CRITICAL", &c.TTFTObjectiveCritical)
	duration("SKYWALKER_TTFT_SLO_SHEDDABLE", &c.TTFTObjectiveSheddable)
	integer("SKYWALKER_MAX_IN_FLIGHT", &c.MaxInFlight)
	integer("SKYWALKER_MAX_QUEUE", &c.MaxQueue)
	integer("SKYWALKER_GOSSIP_BUDGET", &c.GossipBudget)
	integer("SKYWALKER_MAX_BODY_BYTES", &c.MaxBodyBytes)
	integer("SKYWALKER_MIN_BODY_RATE", &c.MinBodyRate)
	integer("SKYWALKER_BODY_BUDGET", &c.BodyBudget)
	integer("SKYWALKER_PRIORITY_MIN", &c.PriorityMin)
	integer("SKYWALKER_PRIORITY_MAX", &c.PriorityMax)
	str("SKYWALKER_PRIORITY_CLASS_MAX", &c.PriorityClassMax)
	duration("SKYWALKER_BODY_TIMEOUT", &c.BodyTimeout)
	duration("SKYWALKER_FIRST_BYTE_TIMEOUT", &c.FirstByteTimeout)
	duration("SKYWALKER_STALL_TIMEOUT", &c.StallTimeout)
	integer("SKYWALKER_RETRIES", &c.Retries)
	integer("SKYWALKER_EJECT_AFTER", &c.EjectAfter)
	duration("SKYWALKER_MAX_WAIT", &c.MaxWait)
	duration("SKYWALKER_SCRAPE_INTERVAL", &c.ScrapeInterval)
	duration("SKYWALKER_RESOLVE_INTERVAL", &c.ResolveInterval)
	duration("SKYWALKER_DRAIN_TIMEOUT", &c.DrainTimeout)
	duration("SKYWALKER_IDLE_TIMEOUT", &c.IdleTimeout)
	return errors.Join(errs...)
}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if p := strings.TrimSpace(part); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// ParseEmulateWAN reads "region=RTT,..." (RTT a duration, or plain
// milliseconds).
func ParseEmulateWAN(s string) (map[string]time.Duration, error) {
	out := map[string]time.Duration{}
	for _, entry := range splitList(s) {
		region, v, ok := strings.Cut(entry, "=")
		region, v = strings.TrimSpace(region), strings.TrimSpace(v)
		if !ok || region == "" || v == "" {
			return nil, fmt.Errorf("entry %q: want REGION=RTT (e.g. eu-west=72ms)", entry)
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			ms, ferr := strconv.ParseFloat(v, 64)
			if ferr != nil {
				return nil, fmt.Errorf("entry %q: %q is not a duration", entry, v)
			}
			d = time.Duration(ms * float64(time.Millisecond))
		}
		out[region] = d
	}
	return out, nil
}

// ParseAliases reads "alias=model,alias=model".
func ParseAliases(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, entry := range splitList(s) {
		alias, model, ok := strings.Cut(entry, "=")
		alias, model = strings.TrimSpace(alias), strings.TrimSpace(model)
		if !ok || alias == "" || model == "" {
			return nil, fmt.Errorf("entry %q: want ALIAS=MODEL", entry)
		}
		out[alias] = model
	}
	return out, nil
}

// ParsePeers reads a PEER_REGIONS value.
func ParsePeers(s string) ([]PeerSeed, error) {
	var out []PeerSeed
	for _, entry := range splitList(s) {
		region, addr, ok := strings.Cut(entry, ":")
		if !ok || region == "" || addr == "" {
			return nil, fmt.Errorf("entry %q: want REGION:ADDRESS", entry)
		}
		out = append(out, PeerSeed{Region: region, Addr: addr})
	}
	return out, nil
}

// Validate checks the configuration and names every bad field.
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if c.Region == "" {
		bad("region (REGION_ID)", "required")
	}
	if len(c.WorkerPool) == 0 {
		bad("worker_pool (LOCAL_WORKER_POOL)", "list at least one replica URL or a DNS name")
	}
	for i, w := range c.WorkerPool {
		if strings.Contains(w, "://") {
			u, err := url.Parse(w)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				bad(fmt.Sprintf("worker_pool[%d]", i), "%q is not an http(s) URL", w)
			}
		} else if len(c.WorkerPool) > 1 {
			bad(fmt.Sprintf("worker_pool[%d]", i), "%q: a DNS name must be the only entry; list URLs otherwise", w)
		}
	}
	for i, p := range c.Peers {
		if p.Region == c.Region {
			bad(fmt.Sprintf("peers[%d]", i), "region %q is this proxy's own region", p.Region)
		}
		if !strings.Contains(p.Addr, "://") {
			if _, _, err := net.SplitHostPort(p.Addr); err != nil {
				bad(fmt.Sprintf("peers[%d]", i), "%q is neither a URL nor host:port", p.Addr)
			}
		}
	}
	for _, addr := range []struct{ field, v string }{{"listen", c.Listen}, {"gossip_bind", c.GossipBind}} {
		if _, _, err := net.SplitHostPort(addr.v); err != nil {
			bad(addr.field, "%q is not host:port", addr.v)
		}
	}
	if _, err := policy.New(c.Policy, policy.DefaultConfig()); err != nil {
		bad("policy (SKYWALKER_POLICY)", "%v", err)
	}
	if _, err := profile.Lookup(c.Profile); err != nil {
		bad("profile (SKYWALKER_PROFILE)", "%v", err)
	}
	switch c.MeshPreset {
	case "wan", "lan", "local":
	default:
		bad("mesh_preset", "must be wan, lan or local")
	}
	if a := c.AdminListen; a != "" && a != "off" {
		if _, _, err := net.SplitHostPort(a); err != nil {
			bad("admin_listen (SKYWALKER_ADMIN_LISTEN)", "%q is not host:port (or off)", a)
		} else if a == c.Listen {
			bad("admin_listen (SKYWALKER_ADMIN_LISTEN)", "must not be the client port %s", c.Listen)
		}
	}
	if c.MaxWANRTT <= 0 {
		bad("max_wan_rtt (MAX_WAN_RTT_THRESHOLD_MS)", "must be positive")
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		bad("tls_cert, tls_key (SKYWALKER_TLS_CERT, SKYWALKER_TLS_KEY)", "give both or neither")
	}
	if c.Peering() && c.TLSCert == "" && !c.InsecureForwarding && !c.InsecureGossip {
		bad("tls_cert (SKYWALKER_TLS_CERT)", "required when peering: forwarded requests carry prompts between regions; set insecure_forwarding only for development")
	}
	if len(c.GossipKeys) == 0 && !c.InsecureGossip && len(c.Peers) > 0 {
		bad("gossip_keys (SKYWALKER_GOSSIP_KEY)", "required when peering; set insecure_gossip only for development")
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"max_in_flight", c.MaxInFlight}, {"max_queue", c.MaxQueue}, {"max_body_bytes", c.MaxBodyBytes}, {"eject_after", c.EjectAfter},
		{"min_body_rate (SKYWALKER_MIN_BODY_RATE)", c.MinBodyRate}, {"body_budget (SKYWALKER_BODY_BUDGET)", c.BodyBudget},
		{"replica_cache_tokens (SKYWALKER_REPLICA_CACHE_TOKENS)", c.ReplicaCacheTokens}, {"bytes_per_token (SKYWALKER_BYTES_PER_TOKEN)", c.BytesPerToken}} {
		if f.v <= 0 {
			bad(f.name, "must be positive")
		}
	}
	if c.PriorityMin > c.PriorityMax {
		bad("priority_min (SKYWALKER_PRIORITY_MIN)", "%d is above priority_max %d", c.PriorityMin, c.PriorityMax)
	}
	if _, err := request.ParseClass(c.PriorityClassMax); err != nil {
		bad("priority_class_max (SKYWALKER_PRIORITY_CLASS_MAX)", "%q is not a class: use one of %s", c.PriorityClassMax, request.ClassNames)
	}
	if c.FirstByteTimeout < 0 {
		bad("first_byte_timeout (SKYWALKER_FIRST_BYTE_TIMEOUT)", "must not be negative (0 derives it from the TTFT estimate)")
	}
	if c.Retries < 0 || c.Retries > 10 {
		bad("retries", "must be in 0..10")
	}
	for region, d := range c.EmulateWAN {
		if region == c.Region || region == "" || d < 0 || d > 10*time.Second {
			bad("emulate_wan (SKYWALKER_EMULATE_WAN)", "%s=%v: a peer region and an RTT in [0, 10s]", region, d)
		}
	}
	for alias, model := range c.ModelAliases {
		if alias == "" || model == "" || alias == model {
			bad("model_aliases", "%q=%q: an alias and the model it names must differ and not be empty", alias, model)
		}
	}
	if c.BytesPerToken > 64 {
		bad("bytes_per_token (SKYWALKER_BYTES_PER_TOKEN)", "must be at most 64")
	}
	if c.TenantMaxHeld < 0 {
		bad("tenant_max_held (SKYWALKER_TENANT_MAX_HELD)", "must not be negative")
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"ttft_objective (SKYWALKER_TTFT_SLO)", c.TTFTObjective}, {"ttft_objective_critical", c.TTFTObjectiveCritical},
		{"ttft_objective_sheddable", c.TTFTObjectiveSheddable}} {
		if f.v < 0 || f.v > time.Hour {
			bad(f.name, "must be between 0 (off) and 1h")
		}
	}
	if h := strings.TrimSpace(c.TenantHeader); h != "" && !validHeaderName(h) {
		bad("tenant_header (SKYWALKER_TENANT_HEADER)", "%q is not a header name", h)
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"max_wait", c.MaxWait}, {"scrape_interval", c.ScrapeInterval}, {"resolve_interval", c.ResolveInterval}, {"drain_timeout", c.DrainTimeout}, {"idle_timeout", c.IdleTimeout},
		{"body_timeout (SKYWALKER_BODY_TIMEOUT)", c.BodyTimeout}, {"stall_timeout (SKYWALKER_STALL_TIMEOUT)", c.StallTimeout}} {
		if f.v <= 0 {
			bad(f.name, "must be positive")
		}
	}
	return errors.Join(errs...)
}

// validHeaderName reports whether s is an HTTP header name (RFC 9110 token).
func validHeaderName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return s != ""
}
