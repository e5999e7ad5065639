package proxy

import (
	"encoding/hex"
	"fmt"
	"maps"
	"net"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"skywalker/internal/mesh"
	"skywalker/internal/policy"
	"skywalker/internal/profile"
	"skywalker/internal/request"
)

// A Setting is one of the proxy's settings, described once: the Config
// field it fills, its YAML key (the field's yaml tag), its environment
// variable, its serve flag, its help, how its default reads and the rule
// its value keeps. ApplyEnv, Validate's messages, EnvVars, serve's flags
// and --help, and the README's settings table are all made from Settings.
type Setting struct {
	Field string // the Config field
	Key   string // the YAML key: the field's yaml tag
	Env   string // the environment variable
	Flag  string // the serve flag, without "--"
	Help  string
	// Derived says how the default reads when it is worked out at start
	// (from another setting, the engine, the listen port); "" shows
	// DefaultConfig's value.
	Derived string
	// Millis: the environment and the flag give a plain number of
	// milliseconds (MAX_WAN_RTT_THRESHOLD_MS); YAML a duration.
	Millis bool

	check func(v any, c *Config) string // "" when v is fine; c for rules between settings
	index []int                         // of Field in Config
	kind  kind
}

// kind is how a setting's text is read: from its field's Go type.
type kind int

const (
	kindString kind = iota
	kindInt
	kindBool
	kindDuration
	kindList    // a,b,c
	kindPeers   // region:address,...
	kindRTTs    // region=rtt,...
	kindAliases // alias=model,...
	kindPools   // model=url,url;model=url
)

var kindOf = map[reflect.Type]kind{
	reflect.TypeFor[string]():                   kindString,
	reflect.TypeFor[int]():                      kindInt,
	reflect.TypeFor[bool]():                     kindBool,
	reflect.TypeFor[time.Duration]():            kindDuration,
	reflect.TypeFor[[]string]():                 kindList,
	reflect.TypeFor[[]PeerSeed]():               kindPeers,
	reflect.TypeFor[map[string]time.Duration](): kindRTTs,
	reflect.TypeFor[map[string]string]():        kindAliases,
	reflect.TypeFor[map[string][]string]():      kindPools,
}

// Settings is every proxy setting, in the order the README lists them.
func Settings() []Setting { return slices.Clone(settings) }

// settings is the table. Each row names its field; init fills in the
// YAML key and the kind from it, and refuses a row that names no field.
var settings = describe([]Setting{
	{Field: "Region", Env: "REGION_ID", Help: "this region's id", Derived: "required", check: is(required[string])},
	{Field: "Jurisdiction", Env: "SKYWALKER_JURISDICTION", Help: "this region's jurisdiction, for data residency (e.g. eu)"},
	{Field: "PeerJurisdictions", Env: "SKYWALKER_PEER_JURISDICTIONS", Help: "the jurisdictions the operator grants peer regions, region=jurisdiction,... (e.g. eu-west=eu): a request with data residency goes only to a region granted its jurisdiction here; what peers claim in gossip is not trusted",
		Derived: "none: resident requests stay in their own jurisdiction's region", check: peerJurisdictions},
	{Field: "NodeID", Env: "SKYWALKER_NODE_ID", Help: "this proxy's id in the mesh, one per proxy", Derived: "region@advertise URL"},
	{Field: "WorkerPool", Env: "LOCAL_WORKER_POOL", Flag: "workers", Help: "the region's replicas: base URLs, comma-separated, or one DNS name (optionally :port) whose A records are the replicas, re-resolved",
		Derived: "required, unless model_pools lists them", check: workerPool},
	{Field: "ModelPools", Env: "SKYWALKER_MODEL_POOLS", Help: "replicas pinned to the models they serve, model=url,url;model2=url: routed that model's requests whatever their /v1/models says (replicas of worker_pool are placed by what their /v1/models lists: each base model, and a LoRA adapter's parent)",
		Derived: "none: learned from /v1/models", check: modelPools},
	{Field: "ModelProfiles", Env: "SKYWALKER_MODEL_PROFILES", Help: "the engine profile of each model's replicas, model=profile,... (e.g. llama-70b=llama3-70b-h100x4); other models use profile",
		Derived: "none: profile for every model", check: is(modelProfiles)},
	{Field: "KVEvents", Env: "SKYWALKER_KV_EVENTS", Help: "subscribe to the replicas' KV-cache events (vLLM --kv-events-config, SGLang --kv-events-config) so their prefix index rests on what they store and evict: off, discover (each replica's GET /kv_event_sources), or where every replica publishes, tcp://{host}:5557|tcp://{host}:5558|topic (PUB, replay, topic; {host} is the replica's)",
		Derived: "off", check: is(kvEventsSetting)},
	{Field: "LoRALoad", Env: "SKYWALKER_LORA_LOAD_TIME", Help: "what loading a LoRA adapter into a replica's slot costs: a request of an adapter not resident on a replica (as routing history and the engine's vllm:lora_requests_info tell) is charged it there",
		check: is(nonNegative[time.Duration])},
	{Field: "Peers", Env: "PEER_REGIONS", Help: "the other regions' proxies, mesh seeds: region:URL (asked for its gossip address) or region:host:port (the gossip address), comma-separated",
		Derived: "none: one region", check: peers},
	{Field: "Listen", Env: "SKYWALKER_LISTEN", Help: "the client HTTP listener", check: is(hostPort)},
	{Field: "AdminListen", Env: "SKYWALKER_ADMIN_LISTEN", Help: "the admin listener: /metrics, /debug/skywalker, /debug/pprof; off for none. Never the client port",
		Derived: "127.0.0.1: the client port + 100", check: adminListen},
	{Field: "AdvertiseURL", Env: "SKYWALKER_ADVERTISE_URL", Help: "this proxy's URL as peers reach it", Derived: "the client listener", check: is(optionalURL)},
	{Field: "GossipBind", Env: "SKYWALKER_GOSSIP_BIND", Help: "the mesh (memberlist) listener", check: is(hostPort)},
	{Field: "GossipAdvertise", Env: "SKYWALKER_GOSSIP_ADVERTISE", Help: "the mesh address peers use, host:port", Derived: "the gossip listener", check: is(optionalHostPort)},
	{Field: "GossipKeys", Env: "SKYWALKER_GOSSIP_KEY", Flag: "gossip-key", Help: "gossip key(s), base64 of 16, 24 or 32 random bytes, comma-separated for rotation (primary first)",
		Derived: "required when peering", check: is(gossipKeys)},
	{Field: "InsecureGossip", Env: "SKYWALKER_INSECURE_GOSSIP", Help: "run the mesh unencrypted (development only)"},
	{Field: "TLSCert", Env: "SKYWALKER_TLS_CERT", Help: "TLS certificate (PEM file, re-read when it changes) for the hop between regions: the proxy serves peers on a TLS listener of its own and refuses forwarded requests on the client port",
		Derived: "required when peering"},
	{Field: "TLSKey", Env: "SKYWALKER_TLS_KEY", Help: "the TLS certificate's private key (PEM file)", Derived: "required when peering"},
	{Field: "TLSCA", Env: "SKYWALKER_TLS_CA", Help: "the CA (PEM file) peers' certificates are verified against", Derived: "the system's roots"},
	{Field: "PeerListen", Env: "SKYWALKER_PEER_LISTEN", Help: "the TLS listener for peers (with a certificate)", Derived: "the client port + 443 (:9443)", check: is(optionalHostPort)},
	{Field: "InsecureForwarding", Env: "SKYWALKER_INSECURE_FORWARDING", Help: "forward to peers over plain HTTP, without TLS (development only; implied by the insecure mesh)"},
	{Field: "ForwardAuthorization", Env: "SKYWALKER_FORWARD_AUTHORIZATION", Help: "pass the client's credentials on to the peer region a request is forwarded to; else Authorization, Proxy-Authorization, Api-Key, X-Api-Key, Cookie, OpenAI-Organization and OpenAI-Project are stripped"},
	{Field: "ClusterLabel", Env: "SKYWALKER_CLUSTER_LABEL", Help: "the mesh's label: proxies with another label do not join", check: is(required[string])},
	{Field: "MeshPreset", Env: "SKYWALKER_MESH_PRESET", Help: "memberlist timing: wan, lan or local", check: is(oneOf("wan", "lan", "local"))},
	{Field: "GossipBudget", Env: "SKYWALKER_GOSSIP_BUDGET", Help: "bytes per second of load summaries and digest changes this proxy gossips; negative: unlimited"},
	{Field: "MaxWANRTT", Env: "MAX_WAN_RTT_THRESHOLD_MS", Flag: "max-wan-rtt-ms", Millis: true,
		Help: "WAN gate ceiling, ms (YAML: a duration): an optional cap on reach, which otherwise follows each request's TTFT objective", check: is(positive[time.Duration])},
	{Field: "EmulateWAN", Env: "SKYWALKER_EMULATE_WAN", Help: "added delay on links to peer regions, region=RTT,... (e.g. eu-west=72ms): several regions on one host, no root, no netem (development only)",
		Derived: "none", check: emulateWAN},
	{Field: "Policy", Env: "SKYWALKER_POLICY", Help: "the routing policy (see Policies)", check: is(policyName)},
	{Field: "Profile", Env: "SKYWALKER_PROFILE", Help: "the replicas' engine profile, for prefill and decode estimates", check: is(profileName)},
	{Field: "MaxInFlight", Env: "SKYWALKER_MAX_IN_FLIGHT", Help: "requests in flight per replica before the balancer holds (selective pushing); for engines without metrics a cap learned from first tokens lowers it",
		check: is(positive[int])},
	{Field: "ReplicaCacheTokens", Env: "SKYWALKER_REPLICA_CACHE_TOKENS", Help: "KV cache, in tokens, a replica is believed to hold until its engine says (vllm:cache_config_info) and cache-truth feedback corrects it",
		check: is(positive[int])},
	{Field: "BytesPerToken", Env: "SKYWALKER_BYTES_PER_TOKEN", Help: "prompt bytes per token (4: English text under Llama-3)", check: is(between(1, 64))},
	{Field: "ModelAliases", Env: "SKYWALKER_MODEL_ALIASES", Help: "names clients may ask for, alias=model,... (as vLLM's --served-model-name): the body's model is rewritten and the aliases listed in /v1/models",
		Derived: "none", check: is(aliases)},
	{Field: "ModelEndpoints", Env: "SKYWALKER_MODEL_ENDPOINTS", Help: "the endpoints each model serves, model=kinds,... with kinds +-separated endpoint names (chat, completion, responses, messages, count_tokens, embeddings, rerank, score, tokenize, detokenize) or vLLM's runners generate and pooling (e.g. bge-m3=pooling,llama-8b=generate): another endpoint is refused at once (400) and /v1/models lists each model's (skywalker_endpoints); set it alike in every region",
		Derived: "none: a model may serve every endpoint; its engines decide", check: is(modelEndpoints)},
	{Field: "TTFTObjective", Env: "SKYWALKER_TTFT_SLO", Help: "TTFT objective of standard requests, for SLO-aware admission (a request that cannot meet it is refused at once, 429); 0 turns admission off",
		check: is(objective)},
	{Field: "TTFTObjectiveCritical", Env: "SKYWALKER_TTFT_SLO_CRITICAL", Help: "TTFT objective of critical requests", Derived: "the standard objective", check: is(objective)},
	{Field: "TTFTObjectiveSheddable", Env: "SKYWALKER_TTFT_SLO_SHEDDABLE", Help: "TTFT objective of sheddable requests", Derived: "the standard objective", check: is(objective)},
	{Field: "PriorityClassMax", Env: "SKYWALKER_PRIORITY_CLASS_MAX", Help: "the most urgent class a client may ask for (X-SkyWalker-Priority, metadata.priority); above it: 400. critical lets them",
		check: is(priorityClass)},
	{Field: "PriorityMin", Env: "SKYWALKER_PRIORITY_MIN", Help: "lowest vLLM body priority clients may send (outside the range: 400)"},
	{Field: "PriorityMax", Env: "SKYWALKER_PRIORITY_MAX", Help: "highest vLLM body priority clients may send; 0 and 0: clients may not reorder the engines' queues", check: priorityRange},
	{Field: "TenantHeader", Env: "SKYWALKER_TENANT_HEADER", Help: "a header that names the request's tenant for fair queuing, trusted: set it only behind a gateway that sets it (x-gateway-inference-fairness-id behind the Inference Gateway). Without it, or when a request lacks it, the tenant is a listed API key (SKYWALKER_TENANT_KEYS), else the client's address",
		Derived: "none: a listed API key, else the client's address", check: is(headerName)},
	{Field: "TenantKeys", Env: "SKYWALKER_TENANT_KEYS", Help: "API keys that name tenants of their own for fair queuing, as the SHA-256 hex of each key (printf %s \"$KEY\" | sha256sum), comma-separated; * trusts every key (only behind a gateway that verifies them). Any other key is its client's address: the proxy does not check keys, so a client rotating unlisted keys stays one tenant",
		Derived: "none: keys do not name tenants", check: is(tenantKeys)},
	{Field: "SessionHeader", Env: "SKYWALKER_SESSION_HEADER", Help: "the header that names a client's session (as vLLM's x-session-id), passed on to the engine: the session's requests go back to the replica that served it last while it is in service and not far busier than the others (a body's prompt_cache_key or session_id does the same and wins)",
		check: is(headerName)},
	{Field: "ResponsesStartOver", Env: "SKYWALKER_RESPONSES_START_OVER", Help: "a Responses request whose previous response is gone (its replica out of service or left, its engine restarted) starts its chain over — sent without previous_response_id, routed as a new request — when its input resends the conversation (an earlier assistant message, function call or reasoning item); off: it gets 400 previous_response_not_found"},
	{Field: "FairQueuing", Env: "SKYWALKER_FAIR_QUEUING", Help: "serve held requests fairly across tenants (else first come, first served)"},
	{Field: "TenantMaxHeld", Env: "SKYWALKER_TENANT_MAX_HELD", Help: "requests one tenant may have held at once; 0: no limit", check: is(nonNegative[int])},
	{Field: "MaxQueue", Env: "SKYWALKER_MAX_QUEUE", Help: "requests held at once; past it 429", check: is(positive[int])},
	{Field: "MaxWait", Env: "SKYWALKER_MAX_WAIT", Help: "longest a request is held; then 503 + Retry-After", check: is(positive[time.Duration])},
	{Field: "MaxBodyBytes", Env: "SKYWALKER_MAX_BODY_BYTES", Help: "largest request body; past it 413", check: is(positive[int])},
	{Field: "BodyTimeout", Env: "SKYWALKER_BODY_TIMEOUT", Help: "a request body must keep arriving: no gap between bytes longer than this, and all that arrived within this plus one second per min_body_rate bytes; else 408",
		check: is(positive[time.Duration])},
	{Field: "MinBodyRate", Env: "SKYWALKER_MIN_BODY_RATE", Help: "bytes per second a request body must keep arriving at", check: is(positive[int])},
	{Field: "BodyBudget", Env: "SKYWALKER_BODY_BUDGET", Help: "memory request bodies may hold at once, a body charged twice its size (what an undeclared one can cost as its buffer doubles; a declared one costs about 1.2x); past it 429 + Retry-After, before reading when the length is declared. When it is full, a client under its fair share (the budget over the clients holding bodies) takes room from those over theirs: their uploads in progress are cut 429", check: is(positive[int])},
	{Field: "ClientBodyBudget", Env: "SKYWALKER_CLIENT_BODY_BUDGET", Help: "memory the request bodies of one client (its IP address) may hold at once; past it 429 + Retry-After", check: is(positive[int])},
	{Field: "Retries", Env: "SKYWALKER_RETRIES", Help: "retries of a request before its first byte, on another replica or region", check: is(between(0, 10))},
	{Field: "FirstByteTimeout", Env: "SKYWALKER_FIRST_BYTE_TIMEOUT", Help: "wait for an upstream's first byte; past it the request is retried elsewhere, and the target counts as failed if it gave nobody a first token meanwhile",
		Derived: "learned per replica: 4× its slowest recent first tokens for work like this, at least 5s; 60s before any first token (+100 ms per output token when not streamed)", check: is(nonNegative[time.Duration])},
	{Field: "StallTimeout", Env: "SKYWALKER_STALL_TIMEOUT", Help: "a stream that sends nothing for this long is ended (or failed over)", check: is(positive[time.Duration])},
	{Field: "ResponseBuffer", Env: "SKYWALKER_RESPONSE_BUFFER", Help: "bytes of a response read from the upstream ahead of a slow client, so the engine's slot frees when the engine is done", check: is(positive[int])},
	{Field: "ResponseBufferBudget", Env: "SKYWALKER_RESPONSE_BUFFER_BUDGET", Help: "bytes all responses may hold read ahead of their clients at once; past it a response goes at its client's pace", check: is(positive[int])},
	{Field: "WriteTimeout", Env: "SKYWALKER_WRITE_TIMEOUT", Help: "a client that takes no byte of its response for this long is cut (its request ends as cancelled)", check: is(positive[time.Duration])},
	{Field: "MidStreamFailover", Env: "SKYWALKER_MIDSTREAM_FAILOVER", Help: "a chat or Anthropic Messages stream that breaks midway goes on from another replica or region, the text so far sent as a partial assistant turn (continue_final_message for chat, vLLM and SGLang; Anthropic's own prefill for Messages)"},
	{Field: "EjectAfter", Env: "SKYWALKER_EJECT_AFTER", Help: "consecutive failures that eject a replica (passive health)", check: is(positive[int])},
	{Field: "ScrapeInterval", Env: "SKYWALKER_SCRAPE_INTERVAL", Help: "how often the replicas' /metrics are read", check: is(positive[time.Duration])},
	{Field: "ResolveInterval", Env: "SKYWALKER_RESOLVE_INTERVAL", Help: "how often a DNS worker pool is re-resolved", check: is(positive[time.Duration])},
	{Field: "DrainTimeout", Env: "SKYWALKER_DRAIN_TIMEOUT", Help: "graceful drain on SIGTERM: peers are told at once; what is still held or in flight near the end is answered 503 + Retry-After, or an error event in a stream",
		check: is(positive[time.Duration])},
	{Field: "IdleTimeout", Env: "SKYWALKER_IDLE_TIMEOUT", Help: "idle keep-alive connections are closed after", check: is(positive[time.Duration])},
})

func describe(rows []Setting) []Setting {
	t := reflect.TypeFor[Config]()
	for i := range rows {
		s := &rows[i]
		f, ok := t.FieldByName(s.Field)
		if !ok {
			panic("proxy: setting for unknown Config field " + s.Field)
		}
		k, ok := kindOf[f.Type]
		if !ok {
			panic("proxy: no kind for Config." + s.Field + " of type " + f.Type.String())
		}
		s.index, s.kind, s.Key = f.Index, k, f.Tag.Get("yaml")
		if s.Flag == "" {
			s.Flag = strings.ReplaceAll(s.Key, "_", "-")
		}
	}
	return rows
}

// Label names the setting in errors: its YAML key, environment variable
// and flag.
func (s Setting) Label() string { return fmt.Sprintf("%s (%s, --%s)", s.Key, s.Env, s.Flag) }

// Type names the form of the setting's text, for --help.
func (s Setting) Type() string {
	if s.Millis {
		return "ms"
	}
	return [...]string{"string", "int", "bool", "duration", "list", "peers", "region=rtt", "name=value", "model=url,url;..."}[s.kind]
}

// IsBool reports whether the setting is true or false (a flag without a
// value sets it).
func (s Setting) IsBool() bool { return s.kind == kindBool }

// Set reads text (from the environment or a flag) into the setting's
// field of c; blank text leaves it as it was.
func (s Setting) Set(c *Config, text string) error {
	text = strings.TrimSpace(text)
	if text == "" {
		return nil
	}
	v, err := s.parse(text)
	if err != nil {
		return err
	}
	reflect.ValueOf(c).Elem().FieldByIndex(s.index).Set(reflect.ValueOf(v))
	return nil
}

func (s Setting) parse(text string) (any, error) {
	switch s.kind {
	case kindInt:
		n, err := strconv.Atoi(text)
		if err != nil {
			return nil, fmt.Errorf("not an integer")
		}
		return n, nil
	case kindBool:
		b, err := strconv.ParseBool(text)
		if err != nil {
			return nil, fmt.Errorf("not a boolean (true or false)")
		}
		return b, nil
	case kindDuration:
		if s.Millis {
			ms, err := strconv.ParseFloat(text, 64)
			if err != nil || ms != ms || ms > float64(time.Hour/time.Millisecond) || ms < -float64(time.Hour/time.Millisecond) {
				return nil, fmt.Errorf("not a number of milliseconds (e.g. 150)")
			}
			return time.Duration(ms * float64(time.Millisecond)), nil
		}
		d, err := time.ParseDuration(text)
		if err != nil {
			return nil, fmt.Errorf("not a duration (e.g. 30s)")
		}
		return d, nil
	case kindList:
		return splitList(text), nil
	case kindPeers:
		return ParsePeers(text)
	case kindRTTs:
		return ParseEmulateWAN(text)
	case kindAliases:
		return ParseAliases(text)
	case kindPools:
		return ParseModelPools(text)
	}
	return text, nil
}

// value is the setting's field of c.
func (s Setting) value(c *Config) any {
	return reflect.ValueOf(c).Elem().FieldByIndex(s.index).Interface()
}

// Format writes the setting's value in c the way Set reads it.
func (s Setting) Format(c *Config) string {
	switch v := s.value(c).(type) {
	case string:
		return v
	case int:
		return strconv.Itoa(v)
	case bool:
		return strconv.FormatBool(v)
	case time.Duration:
		if s.Millis {
			return strconv.FormatFloat(float64(v)/float64(time.Millisecond), 'f', -1, 64)
		}
		return shortDuration(v)
	case []string:
		return strings.Join(v, ",")
	case []PeerSeed:
		parts := make([]string, len(v))
		for i, p := range v {
			parts[i] = p.Region + ":" + p.Addr
		}
		return strings.Join(parts, ",")
	case map[string]time.Duration:
		return joinMap(v, shortDuration)
	case map[string]string:
		return joinMap(v, func(s string) string { return s })
	case map[string][]string:
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(v)) {
			parts = append(parts, k+"="+strings.Join(v[k], ","))
		}
		return strings.Join(parts, ";")
	}
	return fmt.Sprint(s.value(c))
}

// Default is how the setting's default reads: Derived, or DefaultConfig's
// value ("none" when empty).
func (s Setting) Default() string {
	if s.Derived != "" {
		return s.Derived
	}
	c := DefaultConfig()
	if v := s.Format(&c); v != "" {
		return v
	}
	return "none"
}

func joinMap[V any](m map[string]V, format func(V) string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+format(m[k]))
	}
	return strings.Join(parts, ",")
}

// shortDuration is d as time.Duration prints it, without trailing zero
// units (1m, not 1m0s).
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// settingFor is the setting of a Config field.
func settingFor(field string) Setting {
	for _, s := range settings {
		if s.Field == field {
			return s
		}
	}
	panic("proxy: no setting for Config." + field)
}

// SettingsMarkdown is the README's settings table.
func SettingsMarkdown() string {
	var b strings.Builder
	b.WriteString("| env | flag | YAML | default | what |\n|---|---|---|---|---|\n")
	for _, s := range settings {
		def := s.Default()
		if s.Derived == "" && def != "none" {
			def = "`" + def + "`"
		}
		fmt.Fprintf(&b, "| `%s` | `--%s` | `%s` | %s | %s |\n", s.Env, s.Flag, s.Key, def, strings.ReplaceAll(s.Help, "|", `\|`))
	}
	return b.String()
}

// is adapts a check of one value to a setting's check.
func is[T any](check func(T) string) func(any, *Config) string {
	return func(v any, _ *Config) string { return check(v.(T)) }
}

func required[T string | []string](v T) string {
	if len(v) == 0 {
		return "required"
	}
	return ""
}

func positive[T int | time.Duration](v T) string {
	if v <= 0 {
		return "must be positive"
	}
	return ""
}

func nonNegative[T int | time.Duration](v T) string {
	if v < 0 {
		return "must not be negative"
	}
	return ""
}

func between(lo, hi int) func(int) string {
	return func(v int) string {
		if v < lo || v > hi {
			return fmt.Sprintf("%d is not in %d..%d", v, lo, hi)
		}
		return ""
	}
}

func oneOf(names ...string) func(string) string {
	return func(v string) string {
		if !slices.Contains(names, v) {
			return fmt.Sprintf("%q is not one of %s", v, strings.Join(names, ", "))
		}
		return ""
	}
}

func hostPort(v string) string {
	if _, _, err := net.SplitHostPort(v); err != nil {
		return fmt.Sprintf("%q is not host:port", v)
	}
	return ""
}

func optionalHostPort(v string) string {
	if v == "" {
		return ""
	}
	return hostPort(v)
}

func optionalURL(v string) string {
	if v == "" {
		return ""
	}
	if u, err := url.Parse(v); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Sprintf("%q is not an http(s) URL", v)
	}
	return ""
}

func objective(v time.Duration) string {
	if v < 0 || v > time.Hour {
		return "must be between 0 (off) and 1h"
	}
	return ""
}

func tenantKeys(keys []string) string {
	for i, k := range keys {
		if _, err := hex.DecodeString(k); k != "*" && (err != nil || len(k) != 64) {
			return fmt.Sprintf("key %d: want the SHA-256 of an API key in hex (64 digits) or *", i+1)
		}
	}
	return ""
}

func gossipKeys(keys []string) string {
	for i, k := range keys {
		if _, err := mesh.ParseKey(k); err != nil {
			return fmt.Sprintf("key %d: %v", i+1, err)
		}
	}
	return ""
}

func policyName(v string) string {
	if _, err := policy.New(v, policy.DefaultConfig()); err != nil {
		return err.Error()
	}
	return ""
}

func profileName(v string) string {
	if _, err := profile.Lookup(v); err != nil {
		return err.Error()
	}
	return ""
}

func priorityClass(v string) string {
	if _, err := request.ParseClass(v); err != nil {
		return fmt.Sprintf("%q is not a class: use one of %s", v, request.ClassNames)
	}
	return ""
}

func headerName(v string) string {
	if h := strings.TrimSpace(v); h != "" && !validHeaderName(h) {
		return fmt.Sprintf("%q is not a header name", h)
	}
	return ""
}

func kvEventsSetting(v string) string {
	if v == "" || v == "off" || v == "discover" {
		return ""
	}
	if _, err := parseKVTemplate(v, "h"); err != nil {
		return err.Error()
	}
	return ""
}

func modelPools(v any, c *Config) string {
	if _, err := c.pinnedReplicas(); err != nil {
		return err.Error()
	}
	return ""
}

func modelProfiles(m map[string]string) string {
	for model, name := range m {
		if msg := profileName(name); msg != "" {
			return model + ": " + msg
		}
	}
	return ""
}

func aliases(m map[string]string) string {
	for alias, model := range m {
		if alias == "" || model == "" || alias == model {
			return fmt.Sprintf("%q=%q: an alias and the model it names must differ and not be empty", alias, model)
		}
	}
	return ""
}

func modelEndpoints(m map[string]string) string {
	for model, kinds := range m {
		if _, err := request.ParseKinds(kinds); err != nil || model == "" {
			return fmt.Sprintf("%q=%q: %v", model, kinds, err)
		}
	}
	return ""
}

func workerPool(v any, c *Config) string {
	pool := v.([]string)
	if len(pool) == 0 && len(c.ModelPools) == 0 {
		return "list at least one replica URL or a DNS name (or pin replicas to models with model_pools)"
	}
	for i, w := range pool {
		if strings.Contains(w, "://") {
			if msg := optionalURL(w); msg != "" {
				return fmt.Sprintf("entry %d: %s", i+1, msg)
			}
		} else if len(pool) > 1 {
			return fmt.Sprintf("entry %d: %q: a DNS name must be the only entry; list URLs otherwise", i+1, w)
		}
	}
	return ""
}

func peers(v any, c *Config) string {
	for i, p := range v.([]PeerSeed) {
		if p.Region == c.Region {
			return fmt.Sprintf("entry %d: region %q is this proxy's own region", i+1, p.Region)
		}
		if !strings.Contains(p.Addr, "://") {
			if _, _, err := net.SplitHostPort(p.Addr); err != nil {
				return fmt.Sprintf("entry %d: %q is neither a URL nor host:port", i+1, p.Addr)
			}
		}
	}
	return ""
}

func adminListen(v any, c *Config) string {
	a := v.(string)
	if a == "" || a == "off" {
		return ""
	}
	if _, _, err := net.SplitHostPort(a); err != nil {
		return fmt.Sprintf("%q is not host:port (or off)", a)
	}
	if a == c.Listen {
		return "must not be the client port " + c.Listen
	}
	return ""
}

func emulateWAN(v any, c *Config) string {
	rtts := v.(map[string]time.Duration)
	for _, region := range slices.Sorted(maps.Keys(rtts)) {
		d := rtts[region]
		if region == c.Region || region == "" || d < 0 || d > 10*time.Second {
			return fmt.Sprintf("%s=%v: a peer region and an RTT in [0, 10s]", region, d)
		}
	}
	return ""
}

func peerJurisdictions(v any, c *Config) string {
	for region, j := range v.(map[string]string) {
		if region == c.Region {
			return fmt.Sprintf("%s=%s: this proxy's own jurisdiction is jurisdiction (SKYWALKER_JURISDICTION)", region, j)
		}
	}
	return ""
}

func priorityRange(v any, c *Config) string {
	if c.PriorityMin > v.(int) {
		return fmt.Sprintf("%d is below priority_min %d", v.(int), c.PriorityMin)
	}
	return ""
}
