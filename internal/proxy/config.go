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
// The comments say what a field means; its YAML key, environment
// variable, flag and default are in the settings table (settings.go),
// from which serve's flags and --help and the README's settings table are
// made — never restated here (a test holds that).
type Config struct {
	Region       string `yaml:"region"`       // this proxy's region, e.g. "us-east"
	Jurisdiction string `yaml:"jurisdiction"` // its data-residency jurisdiction, e.g. "eu"
	// PeerJurisdictions grants peer regions their jurisdictions: a request
	// with data residency is forwarded only to a region listed here with
	// its jurisdiction. What a peer claims in gossip is not trusted: any
	// member with the gossip key could claim any jurisdiction.
	PeerJurisdictions map[string]string `yaml:"peer_jurisdictions"`
	NodeID            string            `yaml:"node_id"` // this proxy among its region's

	Listen string `yaml:"listen"` // the client API's address
	// AdminListen serves /metrics, /debug/skywalker and /debug/pprof, or
	// "off" for none. Never the client port: what a proxy sees and its
	// profiles are not for its clients.
	AdminListen     string `yaml:"admin_listen"`
	AdvertiseURL    string `yaml:"advertise_url"`    // how peers reach this proxy
	GossipBind      string `yaml:"gossip_bind"`      // the mesh's address
	GossipAdvertise string `yaml:"gossip_advertise"` // the mesh's address as peers reach it, host:port

	// Peers are the other regions' proxies: seeds for joining the mesh. An
	// http(s) URL is asked for its gossip address; a host:port is the
	// gossip address itself.
	Peers []PeerSeed `yaml:"peers"`
	// WorkerPool lists the region's replicas: base URLs, or one DNS name
	// (optionally with :port) whose A records are the replicas,
	// re-resolved every ResolveInterval.
	WorkerPool []string `yaml:"worker_pool"`
	// ModelPools pins replicas to the models they serve, model → base
	// URLs: a pinned replica is routed that model's requests whatever its
	// /v1/models says. Replicas in WorkerPool are placed by what their
	// /v1/models lists. Either may be empty, not both.
	ModelPools map[string][]string `yaml:"model_pools"`
	// ModelProfiles is the engine profile of each model's replicas: a 70B
	// model on four H100s is not an 8B model on an L4. Models not listed
	// use Profile.
	ModelProfiles map[string]string `yaml:"model_profiles"`
	// LoRALoad is what loading a LoRA adapter into a replica's slot is
	// believed to cost: a request of an adapter not resident on a replica
	// is charged it there.
	LoRALoad time.Duration `yaml:"lora_load_time"`
	// KVEvents subscribes to the replicas' KV-cache events: off, discover
	// (each replica's GET /kv_event_sources), or where every replica
	// publishes, tcp://{host}:5557|tcp://{host}:5558|topic.
	KVEvents string `yaml:"kv_events"`

	MaxWANRTT      time.Duration `yaml:"max_wan_rtt"`     // a ceiling on a forward's RTT (reach follows the objective)
	GossipKeys     []string      `yaml:"gossip_keys"`     // the mesh's keys, primary first
	InsecureGossip bool          `yaml:"insecure_gossip"` // an unencrypted mesh: development only
	// TLS for the hop between regions: with a certificate and key (PEM
	// files, as a Kubernetes TLS Secret mounts them) the proxy serves
	// peers on a TLS listener of its own, PeerListen, advertises it, and
	// refuses forwarded requests on the plain client port; it verifies
	// peers against TLSCA (else the system's roots). Required when
	// peering, since forwarded requests carry prompts between regions,
	// unless InsecureForwarding (development only; implied by
	// InsecureGossip).
	PeerListen         string `yaml:"peer_listen"`
	TLSCert            string `yaml:"tls_cert"`
	TLSKey             string `yaml:"tls_key"`
	TLSCA              string `yaml:"tls_ca"`
	InsecureForwarding bool   `yaml:"insecure_forwarding"`
	ClusterLabel       string `yaml:"cluster_label"` // the mesh's name: members of another are refused
	MeshPreset         string `yaml:"mesh_preset"`   // the mesh's timing: wan, lan, local
	// GossipBudget bounds this proxy's gossip of load summaries and digest
	// changes, bytes per second; negative is unlimited.
	GossipBudget int `yaml:"gossip_budget"`

	Policy       string        `yaml:"policy"`         // the routing policy
	Profile      string        `yaml:"profile"`        // the replicas' engine profile, for prefill estimates
	MaxInFlight  int           `yaml:"max_in_flight"`  // requests in flight per replica
	MaxQueue     int           `yaml:"max_queue"`      // requests held by the balancer
	MaxWait      time.Duration `yaml:"max_wait"`       // the longest a request is held
	MaxBodyBytes int           `yaml:"max_body_bytes"` // a request body's size
	// A request body must keep arriving: by BodyTimeout plus one second
	// per MinBodyRate bytes received, or it is answered 408 and its buffer
	// and goroutine freed.
	BodyTimeout time.Duration `yaml:"body_timeout"`
	MinBodyRate int           `yaml:"min_body_rate"`
	// BodyBudget bounds the bytes of request bodies the proxy holds at
	// once (received and not yet done with); a body that would go past it
	// is refused 429 + Retry-After, before it is read if its length is
	// declared.
	BodyBudget int `yaml:"body_budget"`
	// ClientBodyBudget bounds the bytes of request bodies one client (its
	// IP address) holds at once, so that one client cannot take the whole
	// BodyBudget.
	ClientBodyBudget int `yaml:"client_body_budget"`
	// PriorityMin and PriorityMax bound the body's vLLM "priority" (lower
	// runs first at an engine with priority scheduling); a value outside
	// is a 400. Both zero: clients may not reorder the engines' queues.
	PriorityMin int `yaml:"priority_min"`
	PriorityMax int `yaml:"priority_max"`
	// PriorityClassMax is the most urgent class a client may ask for
	// (X-SkyWalker-Priority or metadata.priority); a request above it is a
	// 400: only an operator who trusts the clients, or the gateway in
	// front that sets the header, lets them mark requests critical.
	PriorityClassMax string `yaml:"priority_class_max"`
	Retries          int    `yaml:"retries"` // routings again of a request that failed before its first byte
	// FirstByteTimeout bounds an attempt's wait for its first byte; past
	// it the target is counted failed and the request retried elsewhere.
	// Zero: learned per replica from its first tokens
	// (region.Attempt.FirstTokenTimeout), plus 100 ms per output token for
	// a response that is not streamed. StallTimeout ends a stream that
	// sent nothing for that long.
	FirstByteTimeout time.Duration `yaml:"first_byte_timeout"`
	// ForwardAuthorization passes the client's credentials on to the peer
	// region a request is forwarded to; otherwise they are stripped
	// (CredentialHeaders).
	ForwardAuthorization bool `yaml:"forward_authorization"`
	// MidStreamFailover continues a chat or Messages stream that breaks
	// midway on another replica or region, the text so far sent as a
	// partial assistant turn for the engine to continue (vLLM's and
	// SGLang's continue_final_message; Anthropic's prefill); the client
	// sees one stream.
	MidStreamFailover bool          `yaml:"midstream_failover"`
	StallTimeout      time.Duration `yaml:"stall_timeout"`
	// A response is read from the upstream ahead of a slow client, up to
	// ResponseBuffer bytes (all responses together up to
	// ResponseBufferBudget), so the engine's slot frees when the engine is
	// done, not when the client has read; a client that takes no byte
	// for WriteTimeout is cut.
	ResponseBuffer       int           `yaml:"response_buffer"`
	ResponseBufferBudget int           `yaml:"response_buffer_budget"`
	WriteTimeout         time.Duration `yaml:"write_timeout"`

	// Admission and fairness (see balancer.Config).
	TTFTObjective          time.Duration `yaml:"ttft_objective"`           // standard requests' TTFT objective; 0 turns admission off
	TTFTObjectiveCritical  time.Duration `yaml:"ttft_objective_critical"`  // critical requests'
	TTFTObjectiveSheddable time.Duration `yaml:"ttft_objective_sheddable"` // sheddable requests'
	TenantHeader           string        `yaml:"tenant_header"`            // the header a trusted gateway names tenants in
	TenantKeys             []string      `yaml:"tenant_keys"`              // API keys (SHA-256 hex) that name tenants of their own; "*": every key
	SessionHeader          string        `yaml:"session_header"`           // the header a client names its session in (soft affinity)
	ResponsesStartOver     bool          `yaml:"responses_start_over"`     // a chain whose home is gone starts over, when its input resends the conversation
	FairQueuing            bool          `yaml:"fair_queuing"`             // held requests served fairly across tenants
	TenantMaxHeld          int           `yaml:"tenant_max_held"`          // held requests per tenant; 0: no limit

	// ReplicaCacheTokens is the KV cache, in tokens, a replica is believed
	// to hold until its engine reports one (vllm:cache_config_info) and as
	// cache-truth feedback corrects it. BytesPerToken converts prompt
	// bytes to tokens.
	ReplicaCacheTokens int `yaml:"replica_cache_tokens"`
	BytesPerToken      int `yaml:"bytes_per_token"`

	// EmulateWAN adds delay on this proxy's links to the named peer
	// regions: half the RTT each way on gossip packets, one RTT to open a
	// gossip stream, half each way on forwards — the in-process link
	// emulation of the demo and tests, so several regions on one host need
	// no root and no netem. Development only.
	EmulateWAN map[string]time.Duration `yaml:"emulate_wan"`

	// ModelAliases maps names clients may ask for to the names the engines
	// serve (as vLLM's --served-model-name): the proxy rewrites the body's
	// model and lists the aliases in /v1/models.
	ModelAliases map[string]string `yaml:"model_aliases"`
	// ModelEndpoints says which endpoints a model serves, model=kinds
	// ("+"-separated kinds or the groups generate and pooling, see
	// request.ParseKinds): a request for another endpoint is refused at
	// once, and /v1/models lists each model's endpoints. A model not
	// named may serve every endpoint (its engines decide).
	ModelEndpoints map[string]string `yaml:"model_endpoints"`

	ScrapeInterval  time.Duration `yaml:"scrape_interval"`  // how often each replica's /metrics is read
	ResolveInterval time.Duration `yaml:"resolve_interval"` // how often a DNS-named pool is resolved again
	EjectAfter      int           `yaml:"eject_after"`      // consecutive failures that eject a replica
	DrainTimeout    time.Duration `yaml:"drain_timeout"`    // graceful shutdown's bound
	IdleTimeout     time.Duration `yaml:"idle_timeout"`     // idle keep-alive connections' bound
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
		Prefill: policy.PrefillOf(prof), Hardware: prof.Name, DecodeStep: prof.DecodeStep(), EjectAfter: c.EjectAfter, Retries: c.Retries, DefaultReplicaTokens: c.ReplicaCacheTokens,
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
