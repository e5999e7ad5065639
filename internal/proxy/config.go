package proxy

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
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
	// PeerJurisdictions grants peer regions their jurisdictions
	// (SKYWALKER_PEER_JURISDICTIONS "eu-west=eu,eu-central=eu"): a request
	// with data residency is forwarded only to a region listed here with
	// its jurisdiction. What a peer claims in gossip is not trusted: any
	// member with the gossip key could claim any jurisdiction.
	PeerJurisdictions map[string]string `yaml:"peer_jurisdictions"`
	NodeID            string            `yaml:"node_id"` // SKYWALKER_NODE_ID; default region + listen address

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
	// ModelPools pins replicas to the models they serve, model → base
	// URLs (SKYWALKER_MODEL_POOLS: model=url,url;model2=url): a pinned
	// replica is routed that model's requests whatever its /v1/models
	// says. Replicas in WorkerPool are placed by what their /v1/models
	// lists. Either may be empty, not both.
	ModelPools map[string][]string `yaml:"model_pools"`
	// ModelProfiles is the engine profile of each model's replicas
	// (SKYWALKER_MODEL_PROFILES: model=profile,...): a 70B model on four
	// H100s is not an 8B model on an L4. Models not listed use Profile.
	ModelProfiles map[string]string `yaml:"model_profiles"`
	// LoRALoad is what loading a LoRA adapter into a replica's slot is
	// believed to cost (SKYWALKER_LORA_LOAD_TIME; default 100 ms): a
	// request of an adapter not resident on a replica is charged it there.
	LoRALoad time.Duration `yaml:"lora_load_time"`
	// KVEvents subscribes to the replicas' KV-cache events
	// (SKYWALKER_KV_EVENTS): off (the default), discover (each replica's
	// GET /kv_event_sources), or where every replica publishes,
	// tcp://{host}:5557|tcp://{host}:5558|topic.
	KVEvents string `yaml:"kv_events"`

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
	MaxInFlight  int           `yaml:"max_in_flight"`  // SKYWALKER_MAX_IN_FLIGHT per replica; default 256
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
	// ClientBodyBudget bounds the bytes of request bodies one client (its
	// IP address) holds at once, so that one client cannot take the whole
	// BodyBudget (SKYWALKER_CLIENT_BODY_BUDGET; default 128 MiB).
	ClientBodyBudget int `yaml:"client_body_budget"`
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
	// 0: learned per replica from its first tokens,
	// region.Attempt.FirstTokenTimeout, plus 100 ms per output token for
	// a response that is not streamed). StallTimeout
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
	// A response is read from the upstream ahead of a slow client, up to
	// ResponseBuffer bytes (all responses together up to
	// ResponseBufferBudget), so the engine's slot frees when the engine is
	// done, not when the client has read; a client that takes no byte
	// for WriteTimeout is cut (SKYWALKER_RESPONSE_BUFFER, default 4 MiB;
	// SKYWALKER_RESPONSE_BUFFER_BUDGET, default 128 MiB;
	// SKYWALKER_WRITE_TIMEOUT, default 60 s).
	ResponseBuffer       int           `yaml:"response_buffer"`
	ResponseBufferBudget int           `yaml:"response_buffer_budget"`
	WriteTimeout         time.Duration `yaml:"write_timeout"`

	// Admission and fairness (see balancer.Config).
	TTFTObjective          time.Duration `yaml:"ttft_objective"`           // SKYWALKER_TTFT_SLO: standard requests; default 10 s; 0 turns admission off
	TTFTObjectiveCritical  time.Duration `yaml:"ttft_objective_critical"`  // SKYWALKER_TTFT_SLO_CRITICAL; default the standard objective
	TTFTObjectiveSheddable time.Duration `yaml:"ttft_objective_sheddable"` // SKYWALKER_TTFT_SLO_SHEDDABLE; default the standard objective
	TenantHeader           string        `yaml:"tenant_header"`            // SKYWALKER_TENANT_HEADER; default x-gateway-inference-fairness-id
	SessionHeader          string        `yaml:"session_header"`           // SKYWALKER_SESSION_HEADER; default x-session-id
	ResponsesStartOver     bool          `yaml:"responses_start_over"`     // SKYWALKER_RESPONSES_START_OVER; default false
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
		BodyTimeout: 10 * time.Second, MinBodyRate: 32 << 10, BodyBudget: 512 << 20, ClientBodyBudget: 128 << 20, StallTimeout: 30 * time.Second,
		ResponseBuffer: 4 << 20, ResponseBufferBudget: 128 << 20, WriteTimeout: 60 * time.Second,
		ScrapeInterval: cp.ScrapeInterval, ResolveInterval: 10 * time.Second, EjectAfter: region.DefaultEjectAfter,
		DrainTimeout: 30 * time.Second, IdleTimeout: httpserve.DefaultIdleTimeout, TTFTObjective: DefaultTTFTObjective, FairQueuing: true, LoRALoad: region.DefaultAdapterLoad,
		PriorityClassMax: request.Standard.String(), SessionHeader: "x-session-id", ReplicaCacheTokens: region.DefaultReplicaTokens, BytesPerToken: request.BytesPerToken}
}

// DefaultTTFTObjective is the TTFT objective of every class unless
// configured: generous, so that with any engine and the defaults only a
// request that would wait far longer than any client should is refused
// at once (429 + Retry-After) instead of being held to MaxWait.
const DefaultTTFTObjective = 10 * time.Second

// GatewayTenantHeader is the Gateway API Inference Extension's fairness
// id: the header to trust (TenantHeader) behind a gateway that sets it.
const GatewayTenantHeader = "x-gateway-inference-fairness-id"

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
func (c *Config) RegionConfig() region.Config { return c.RegionConfigFor("") }

// profileFor is the engine profile of model's replicas.
func (c *Config) profileFor(model string) profile.Profile {
	name := c.Profile
	if p, ok := c.ModelProfiles[model]; ok {
		name = p
	}
	prof, _ := profile.Lookup(name)
	return prof
}

// RegionConfigFor is the configuration of model's pool: the region's,
// with the model's profile.
func (c *Config) RegionConfigFor(model string) region.Config {
	prof := c.profileFor(model)
	return region.Config{Name: c.Region, Jurisdiction: c.Jurisdiction, Node: c.NodeID, MaxInFlight: c.MaxInFlight, AdapterLoad: c.LoRALoad,
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
func (c *Config) PolicyConfig() policy.Config { return c.PolicyConfigFor("") }

// PolicyConfigFor is PolicyConfig for the pool of model (its profile).
func (c *Config) PolicyConfigFor(model string) policy.Config {
	return policy.ConfigFor(c.profileFor(model), c.MaxWANRTT)
}

// pinnedReplicas is the URLs of ModelPools.
func (c *Config) pinnedReplicas() ([]*url.URL, error) {
	var out []*url.URL
	for _, model := range slices.Sorted(maps.Keys(c.ModelPools)) {
		for _, w := range c.ModelPools[model] {
			u, err := url.Parse(strings.TrimRight(w, "/"))
			if err != nil || u.Host == "" {
				return nil, fmt.Errorf("model_pools %s: %q is not a URL", model, w)
			}
			out = append(out, u)
		}
	}
	return out, nil
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

// EnvVars returns the environment variables ApplyEnv reads, in the
// order of Settings.
func EnvVars() []string {
	names := make([]string, len(settings))
	for i, s := range settings {
		names[i] = s.Env
	}
	return names
}

// ApplyEnv overlays the environment (getenv is os.Getenv in production):
// every setting's variable that is set and not blank.
func (c *Config) ApplyEnv(getenv func(string) string) error {
	var errs []error
	for _, s := range settings {
		if v := getenv(s.Env); strings.TrimSpace(v) != "" {
			if err := s.Set(c, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", s.Env, strings.TrimSpace(v), err))
			}
		}
	}
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

// ParseAliases reads "name=value,name=value" (model aliases, peer
// jurisdictions).
func ParseAliases(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, entry := range splitList(s) {
		alias, model, ok := strings.Cut(entry, "=")
		alias, model = strings.TrimSpace(alias), strings.TrimSpace(model)
		if !ok || alias == "" || model == "" {
			return nil, fmt.Errorf("entry %q: want NAME=VALUE", entry)
		}
		out[alias] = model
	}
	return out, nil
}

// ParseModelPools reads a SKYWALKER_MODEL_POOLS value:
// model=url,url;model2=url.
func ParseModelPools(s string) (map[string][]string, error) {
	out := map[string][]string{}
	for _, entry := range strings.Split(s, ";") {
		if strings.TrimSpace(entry) == "" {
			continue
		}
		model, urls, ok := strings.Cut(entry, "=")
		model = strings.TrimSpace(model)
		if !ok || model == "" || len(splitList(urls)) == 0 {
			return nil, fmt.Errorf("entry %q: want MODEL=URL,URL", entry)
		}
		out[model] = append(out[model], splitList(urls)...)
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

// Validate checks the configuration and names every bad setting: each
// setting's own rule (Settings), then the rules between settings.
func (c *Config) Validate() error {
	var errs []error
	for _, s := range settings {
		if s.check == nil {
			continue
		}
		if msg := s.check(s.value(c), c); msg != "" {
			errs = append(errs, fmt.Errorf("%s: %s", s.Label(), msg))
		}
	}
	bad := func(fields []string, msg string) {
		labels := make([]string, len(fields))
		for i, f := range fields {
			labels[i] = settingFor(f).Label()
		}
		errs = append(errs, fmt.Errorf("%s: %s", strings.Join(labels, ", "), msg))
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		bad([]string{"TLSCert", "TLSKey"}, "give both or neither")
	}
	if c.Peering() && c.TLSCert == "" && !c.InsecureForwarding && !c.InsecureGossip {
		bad([]string{"TLSCert"}, "required when peering: forwarded requests carry prompts between regions; set insecure_forwarding only for development")
	}
	if len(c.GossipKeys) == 0 && !c.InsecureGossip && len(c.Peers) > 0 {
		bad([]string{"GossipKeys"}, "required when peering; set insecure_gossip only for development")
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
