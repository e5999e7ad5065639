package sim

import (
	"fmt"
	"time"

	"skywalker/internal/profile"
	"skywalker/internal/request"

	"skywalker/internal/balancer"
	"skywalker/internal/policy"
	"skywalker/internal/region"
)

// RegionSpec describes one simulated region.
type RegionSpec struct {
	Name         string
	Replicas     int
	Profile      profile.Profile
	Jurisdiction string
	// MaxNumSeqs and KVBlocks override the profile's engine defaults.
	MaxNumSeqs int
	KVBlocks   int
	// BelievedCacheTokens, if set, is the KV cache the routers believe
	// each replica holds: the engines then do not report their cache size
	// (as a server without vllm:cache_config_info), and the routers size
	// their prefix index by this until cache truth corrects it.
	BelievedCacheTokens int
	// Pools, if set, are the region's replicas per model, and Replicas,
	// Profile, MaxNumSeqs and KVBlocks above are not used: a fleet of
	// several models. Empty: one pool of the unnamed model "".
	Pools []PoolSpec
	// EngineSlowdown, if over 1, makes the region's engines this many
	// times slower than their profile in every step, while its routers
	// (and every peer) believe the profile: engines that are not what
	// the operator said (a CPU server behind a GPU profile), which the
	// routers learn only from first tokens.
	EngineSlowdown float64
	// Proxies is how many proxies front the region's engines, each its
	// own router with its own region core (0: one). Clients' requests are
	// spread over them in turn, as an L4 load balancer spreads
	// connections; with Config.ShareDispatches they tell each other what
	// they dispatch, as the proxies of a region do over the mesh.
	Proxies int
}

// proxies is how many proxies front the region.
func (s RegionSpec) proxies() int { return max(s.Proxies, 1) }

// PoolSpec is one model's replicas in a region.
type PoolSpec struct {
	Model    string // the base model; "" for a fleet of one unnamed model
	Replicas int
	Profile  profile.Profile
	// MaxNumSeqs and KVBlocks override the profile's engine defaults.
	MaxNumSeqs int
	KVBlocks   int
	// MaxLoRAs and LoRALoad are the engines' LoRA adapter slots and the
	// time to load one (engine.Config); zero: the model has no adapters.
	MaxLoRAs int
	LoRALoad time.Duration
}

// PoolSpecs is the region's pools: Pools, or one of the unnamed model.
func (s RegionSpec) PoolSpecs() []PoolSpec {
	if len(s.Pools) > 0 {
		return s.Pools
	}
	return []PoolSpec{{Replicas: s.Replicas, Profile: s.Profile, MaxNumSeqs: s.MaxNumSeqs, KVBlocks: s.KVBlocks}}
}

// TotalReplicas is the region's replicas over every pool.
func (s RegionSpec) TotalReplicas() int {
	n := 0
	for _, p := range s.PoolSpecs() {
		n += p.Replicas
	}
	return n
}

// FaultKind names a fault on the timeline.
type FaultKind string

// The fault kinds.
const (
	ReplicaCrash FaultKind = "replica-crash" // one replica down, its cache lost
	RegionOutage FaultKind = "region-outage" // every replica of a region down
	RTTSpike     FaultKind = "rtt-spike"     // a link's RTT raised
	LinkLoss     FaultKind = "link-loss"     // a share of a link's packets (probes, load summaries) lost
	// ReplicaHang: one replica's engine stops making progress — it takes
	// requests, answers its health checks and its metrics, and gives no
	// token — until the fault ends. Only the first-token timeout finds it.
	ReplicaHang FaultKind = "replica-hang"
)

// Fault is one fault: it starts At and lasts Duration.
type Fault struct {
	Kind     FaultKind
	At       time.Duration
	Duration time.Duration
	Region   string        // replica-crash, region-outage
	Replica  int           // replica-crash
	A, B     string        // rtt-spike, link-loss: the link
	RTT      time.Duration // rtt-spike: the RTT during the spike
	Loss     float64       // link-loss: the share of packets lost, in (0, 1]
}

// Config is one simulation run.
type Config struct {
	Regions []RegionSpec
	// RTT[i][j] is the round-trip time between regions i and j.
	RTT    [][]time.Duration
	Jitter time.Duration // uniform extra delay per one-way crossing, up to this

	// Policy names the routing policy; every region gets its own instance,
	// configured by PolicyConfig (zero: policy.DefaultConfig()).
	Policy       string
	PolicyConfig *policy.Config
	Balancer     balancer.Config
	// MaxInFlight caps each replica's in-flight requests for dispatch; 0
	// means the proxy's default (region.DefaultMaxInFlight).
	MaxInFlight int
	// ResponsesStartOver lets a Responses chain whose home is gone start
	// over (the proxy's responses_start_over; the workload's turns resend
	// their conversation whole, as the prompts they carry say).
	ResponsesStartOver bool
	// NoDispatchSharing: the proxies of a region (RegionSpec.Proxies) do
	// not tell each other what they dispatch; each knows only its own
	// prompts (and, with KV events, attributes the engines' stores by
	// them alone).
	NoDispatchSharing bool
	// Retries bounds how often a request that failed before its first
	// byte is routed again; 0 means the proxy's default.
	Retries int
	// NoCacheTruth turns the routers' cache-truth feedback off.
	NoCacheTruth bool
	// KVEvents has every engine publish its KV events (what its prefix
	// cache stores and evicts) to its router when each step is scheduled
	// and when it ends, as vLLM does with --kv-events-config: the routers'
	// indexes then rest on them (region.CacheEvents).
	KVEvents bool
	// Router, if set, names the one region whose router serves every
	// region (a single global router, as most deployments run one today):
	// every client reaches it across the WAN, and it reaches every
	// region's replicas, whose metrics it scrapes over the WAN. Empty: a
	// router in every region, meeting in the mesh.
	Router string
	// ClientTimeout is how long every client waits for its first token
	// before it gives up (the request then counts as dropped, and is
	// withdrawn wherever it is); the same for every policy. Default the
	// balancer's MaxWait.
	ClientTimeout time.Duration

	// Control is the control plane's timing and the WAN gate's thresholds:
	// zero fields take region.DefaultControlPlane's values, exactly the
	// proxy's and the mesh's defaults.
	Control region.ControlPlane

	SLO    request.SLO // TTFT objective
	Faults []Fault
	Seed   uint64

	// Bucket is the width of the time-series buckets for plots; default
	// 1/96 of the workload's span.
	Bucket time.Duration
	// Drain bounds how long after the last arrival the run continues; 0
	// means until every request is done.
	Drain time.Duration
	// StopAfterMisses, if positive, ends the run once more requests than
	// this have missed the SLO (dropped, or answered late): a search for
	// the smallest reservation that meets a target needs no more than
	// "it does not". The result then has Stopped set.
	StopAfterMisses int
	// RecordOutcomes keeps every request's outcome by id in the result
	// (results.Result.Outcomes), to compare runs of the same arrivals.
	RecordOutcomes bool
	// Model, if set, is the only base model whose requests the result
	// counts (the others are still simulated): to size one model's pool of
	// a fleet of several.
	Model string
	// ClientRTT is the round trip between a client and its own region's
	// router (GORGO measured ~37 ms on the public internet); zero by
	// default.
	ClientRTT time.Duration
}

func (c *Config) withDefaults() error {
	if len(c.Regions) == 0 {
		return fmt.Errorf("sim: no regions")
	}
	if c.PolicyConfig == nil {
		d := policy.DefaultConfig()
		c.PolicyConfig = &d
	}
	if _, err := policy.New(c.Policy, *c.PolicyConfig); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	if len(c.RTT) != len(c.Regions) {
		return fmt.Errorf("sim: RTT matrix is %d×?, want %d×%d", len(c.RTT), len(c.Regions), len(c.Regions))
	}
	for i, row := range c.RTT {
		if len(row) != len(c.Regions) {
			return fmt.Errorf("sim: RTT row %d has %d entries, want %d", i, len(row), len(c.Regions))
		}
	}
	for _, r := range c.Regions {
		n := r.TotalReplicas()
		if n < 1 {
			return fmt.Errorf("sim: region %s has no replicas", r.Name)
		}
		if n > 64 {
			return fmt.Errorf("sim: region %s has %d replicas, at most 64 are supported", r.Name, n)
		}
		for _, p := range r.PoolSpecs() {
			if p.Replicas < 0 {
				return fmt.Errorf("sim: region %s, model %q: negative replicas", r.Name, p.Model)
			}
		}
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = region.DefaultMaxInFlight
	}
	if c.Retries <= 0 {
		c.Retries = region.DefaultRetries
	}
	if c.ClientTimeout <= 0 {
		c.ClientTimeout = c.Balancer.MaxWait
		if c.ClientTimeout <= 0 {
			c.ClientTimeout = balancer.DefaultConfig().MaxWait
		}
	}
	if c.Control.MaxWANRTT <= 0 {
		c.Control.MaxWANRTT = c.PolicyConfig.Skywalker.MaxWANRTT // one threshold for the gate and the rule, as in the proxy
	}
	c.Control = c.Control.WithDefaults()
	return nil
}

// regionConfig is the configuration of the pool of spec's replicas of
// profile prof, as the proxy would build it for a proxy in front of them
// (see proxy.Config.RegionConfigFor).
func (c *Config) regionConfig(spec RegionSpec, node string, prof profile.Profile, blockTokens int) region.Config {
	return region.Config{Name: spec.Name, Jurisdiction: spec.Jurisdiction, Node: node, MaxInFlight: c.MaxInFlight,
		Prefill: policy.PrefillOf(prof), Hardware: prof.Name, DecodeStep: prof.DecodeStep(), BlockTokens: max(blockTokens, 1), Balancer: c.Balancer,
		DefaultReplicaTokens: spec.BelievedCacheTokens, NoCacheTruth: c.NoCacheTruth, Retries: c.Retries}
}

// policyConfig is the policies' configuration for a pool of replicas of
// profile prof: PolicyConfig, with GORGO's per-token costs from prof when
// they came from another profile's (policy.ConfigFor).
func (c *Config) policyConfig(prof profile.Profile, first profile.Profile) policy.Config {
	pc := *c.PolicyConfig
	if prof.Name != first.Name {
		pc.Gorgo = policy.ConfigFor(prof, pc.Skywalker.MaxWANRTT).Gorgo
	}
	return pc
}
