package sim

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"skywalker/internal/balancer"
	"skywalker/internal/policy"
	"skywalker/internal/price"
	"skywalker/internal/profile"
	"skywalker/internal/region"
	"skywalker/internal/request"
	"skywalker/internal/strictyaml"
	"skywalker/internal/workload"
	"skywalker/scenarios"
)

// Scenario is a simulation described in YAML (see scenarios/*.yaml).
type Scenario struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description"`
	Seed        uint64 `yaml:"seed"`
	// Models, if set, are the models the fleet serves (each region lists
	// its replicas per model in pools); empty: one unnamed model, each
	// region's replicas and profile given directly.
	Models   []ScenarioModel  `yaml:"models"`
	Regions  []ScenarioRegion `yaml:"regions"`
	RTT      []ScenarioLink   `yaml:"rtt"`
	JitterMs float64          `yaml:"rtt_jitter_ms"`
	// ClientRTTMs is a client's round trip to its own region's router.
	ClientRTTMs float64          `yaml:"client_rtt_ms"`
	SLO         ScenarioSLO      `yaml:"slo"`
	Policies    []string         `yaml:"policies"`
	Balancer    ScenarioBalancer `yaml:"balancer"`
	Control     ScenarioControl  `yaml:"control_plane"`
	Workload    ScenarioWorkload `yaml:"workload"`
	Faults      []ScenarioFault  `yaml:"faults"`
	// Sweep, if set, is the offered loads (multiples of the rate) that
	// `skywalker sim` replays the scenario at by default.
	Sweep []float64 `yaml:"sweep"`
	// PlanCapacity is the requests/s one replica serves within the SLO on
	// this workload, for `skywalker plan` (measure it with
	// --measure-capacity).
	PlanCapacity float64 `yaml:"plan_capacity"`
	// PlanCapacities are, for a fleet of several hardware profiles, the
	// requests/s one replica of each profile serves within the SLO (also
	// measured with --measure-capacity); a profile not listed takes
	// plan_capacity.
	PlanCapacities map[string]float64 `yaml:"plan_capacities"`
	// Prices are what the fleet's GPUs cost (see price.Book), over the
	// shipped defaults; `skywalker plan` reports the plan in money with them.
	Prices *price.Book `yaml:"prices"`
}

// ScenarioModel is one model of a fleet of several.
type ScenarioModel struct {
	Name    string  `yaml:"name"`
	Profile string  `yaml:"profile"` // its replicas' hardware
	Share   float64 `yaml:"share"`   // weight of the sessions that ask for it
	// PlanCapacity is the requests/s one of its replicas serves within the
	// SLO (as the scenario's plan_capacity, per model).
	PlanCapacity float64           `yaml:"plan_capacity"`
	Adapters     *ScenarioAdapters `yaml:"adapters"`
}

// ScenarioAdapters are a model's LoRA adapters and how its engines hold
// them.
type ScenarioAdapters struct {
	Count     int           `yaml:"count"`      // adapters, of Zipf popularity
	ZipfS     float64       `yaml:"zipf_s"`     // the Zipf exponent
	BaseShare float64       `yaml:"base_share"` // sessions of the base model itself
	MaxLoRAs  int           `yaml:"max_loras"`  // adapter slots per engine (vLLM --max-loras)
	LoadTime  time.Duration `yaml:"load_time"`  // loading one into a slot
}

// ScenarioPool is one model's replicas in a region.
type ScenarioPool struct {
	Model      string `yaml:"model"`
	Replicas   int    `yaml:"replicas"`
	MaxNumSeqs int    `yaml:"max_num_seqs"`
	KVBlocks   int    `yaml:"kv_blocks"`
}

// ScenarioRegion is one region.
type ScenarioRegion struct {
	Name string `yaml:"name"`
	// Pools are its replicas per model, for a scenario with Models.
	Pools        []ScenarioPool `yaml:"pools"`
	Replicas     int            `yaml:"replicas"`
	Profile      string         `yaml:"profile"`
	UTCOffset    float64        `yaml:"utc_offset"`
	Jurisdiction string         `yaml:"jurisdiction"`
	Weight       float64        `yaml:"weight"`
	MaxNumSeqs   int            `yaml:"max_num_seqs"` // engine --max-num-seqs; default the profile's
	KVBlocks     int            `yaml:"kv_blocks"`    // engine KV blocks; default the profile's
	// BelievedCacheTokens: the routers believe each replica holds this
	// much KV cache (the engines do not report theirs); see RegionSpec.
	BelievedCacheTokens int `yaml:"believed_cache_tokens"`
	// Proxies is how many proxies front the region's engines (0: one);
	// see RegionSpec.Proxies.
	Proxies int `yaml:"proxies"`
	// EngineSlowdown: its engines run this many times slower than their
	// profile, which the routers believe (0 or 1: as the profile says);
	// see RegionSpec.EngineSlowdown.
	EngineSlowdown float64 `yaml:"engine_slowdown"`
}

// ScenarioLink is the RTT of one pair of regions.
type ScenarioLink struct {
	A  string  `yaml:"a"`
	B  string  `yaml:"b"`
	Ms float64 `yaml:"ms"`
}

// ScenarioSLO is the latency objective.
type ScenarioSLO struct {
	TTFT time.Duration `yaml:"ttft"`
	// TTFTPer1kTokens adds this much to the objective per thousand prompt
	// tokens (for traces of long prompts; see request.SLO).
	TTFTPer1kTokens time.Duration `yaml:"ttft_per_1k_tokens"`
}

// Objective is the scenario's SLO as results judge it.
func (s ScenarioSLO) Objective() request.SLO {
	return request.SLO{TTFT: s.TTFT, PerKTokens: s.TTFTPer1kTokens}
}

// ScenarioBalancer tunes every region's balancer queue.
type ScenarioBalancer struct {
	MaxQueue    int           `yaml:"max_queue"`
	MaxWait     time.Duration `yaml:"max_wait"`
	MaxInFlight int           `yaml:"max_in_flight"`
	// Admission is SLO-aware admission with the scenario's SLO as every
	// class's objective (balancer.Config.Objectives); default on.
	Admission *bool `yaml:"admission"`
	// FIFO turns per-tenant fair queuing off.
	FIFO bool `yaml:"fifo"`
	// TenantMaxHeld bounds each tenant's held requests per balancer.
	TenantMaxHeld int `yaml:"tenant_max_held"`
	// ResponsesStartOver lets a chain whose home is gone start over
	// (Config.ResponsesStartOver).
	ResponsesStartOver bool `yaml:"responses_start_over"`
	// CacheSource is what the routers' prefix indexes rest on: belief,
	// truth (the default) or events (the engines publish KV events); see
	// Options.CacheSources.
	CacheSource string `yaml:"cache_source"`
	// DispatchSharing: the proxies of a region (regions[].proxies) tell
	// each other what they dispatch; default on.
	DispatchSharing *bool `yaml:"dispatch_sharing"`
}

// AdmissionOn reports whether the scenario's balancers admit by SLO.
func (b ScenarioBalancer) AdmissionOn() bool { return b.Admission == nil || *b.Admission }

// ScenarioControl tunes the simulated control plane; every field defaults
// to the product's own (region.DefaultControlPlane).
type ScenarioControl struct {
	LoadInterval   time.Duration `yaml:"load_interval"`
	DigestInterval time.Duration `yaml:"digest_interval"`
	Scrape         time.Duration `yaml:"scrape"`
	ProbeInterval  time.Duration `yaml:"probe_interval"`
	// MaxWANRTT is the WAN gate threshold (MAX_WAN_RTT_THRESHOLD_MS): links
	// slower than this are closed to forwarding. Default 1 s, a ceiling: reach
	// follows each request's TTFT objective.
	MaxWANRTT time.Duration `yaml:"max_wan_rtt"`
}

// ScenarioWorkload is the demand: a diurnal generator or a trace replay.
type ScenarioWorkload struct {
	Kind string `yaml:"kind"` // diurnal, mooncake, azure

	// diurnal
	Day                time.Duration `yaml:"day"`
	Duration           time.Duration `yaml:"duration"`
	StartHour          float64       `yaml:"start_hour"`
	PeakRPS            float64       `yaml:"peak_rps"`
	ValleyRatio        float64       `yaml:"valley_ratio"`
	PeakHour           float64       `yaml:"peak_hour"`
	MeanTurns          float64       `yaml:"mean_turns"`
	ThinkTime          time.Duration `yaml:"think_time"`
	FollowUpShare      float64       `yaml:"follow_up_share"`
	Tenants            int           `yaml:"tenants"`
	TenantPromptTokens int           `yaml:"tenant_prompt_tokens"`
	ResidencyShare     float64       `yaml:"residency_share"`
	// ResponsesShare is the fraction of sessions that are Responses API
	// chains: every turn after the first continues the previous response
	// by its id, so it must be served where that response lives.
	ResponsesShare  float64 `yaml:"responses_share"`
	MaxPromptTokens int     `yaml:"max_prompt_tokens"`
	MaxOutputTokens int     `yaml:"max_output_tokens"`
	Lengths         string  `yaml:"lengths"` // an Azure trace file name, or "synthetic"
	BlockTokens     int     `yaml:"block_tokens"`
	// TenantShares weighs the tenants' shares of new sessions.
	TenantShares []float64 `yaml:"tenant_shares"`
	// CriticalShare and SheddableShare are the fractions of sessions of
	// those priority classes.
	CriticalShare  float64 `yaml:"critical_share"`
	SheddableShare float64 `yaml:"sheddable_share"`
	Bursts         []struct {
		Region     string        `yaml:"region"` // one region's demand; with tenant, "" is every region
		Tenant     string        `yaml:"tenant"` // one tenant's demand ("tenant-0", ...)
		At         time.Duration `yaml:"at"`
		Duration   time.Duration `yaml:"duration"`
		Multiplier float64       `yaml:"multiplier"`
	} `yaml:"bursts"`

	// trace replay
	Trace   string  `yaml:"trace"`
	Speedup float64 `yaml:"speedup"`
	Assign  string  `yaml:"assign"`
	Limit   int     `yaml:"limit"` // replay at most this many records; 0 for all
}

// ScenarioFault is one fault on the timeline.
type ScenarioFault struct {
	Kind     string        `yaml:"kind"`
	At       time.Duration `yaml:"at"`
	Duration time.Duration `yaml:"duration"`
	Region   string        `yaml:"region"`
	Replica  int           `yaml:"replica"`
	A        string        `yaml:"a"`
	B        string        `yaml:"b"`
	Ms       float64       `yaml:"ms"`
	Loss     float64       `yaml:"loss"`
}

const maxScenarioBytes = 1 << 20

// Builtin parses the built-in scenario name (scenarios/NAME.yaml).
func Builtin(name string) (*Scenario, error) {
	data, err := scenarios.Get(name)
	if err != nil {
		return nil, err
	}
	return ParseScenario(data)
}

// ParseScenario reads a scenario strictly: unknown fields, wrong types and
// inconsistent values are errors that name the field.
func ParseScenario(data []byte) (*Scenario, error) {
	if len(data) > maxScenarioBytes {
		return nil, fmt.Errorf("scenario is %d bytes, over the %d-byte limit", len(data), maxScenarioBytes)
	}
	var s Scenario
	if err := strictyaml.Decode(data, &s); err != nil {
		if errors.Is(err, strictyaml.ErrEmpty) {
			return nil, errors.New("scenario is empty")
		}
		return nil, fmt.Errorf("parse scenario: %w", err)
	}
	if err := s.validate(); err != nil {
		return nil, fmt.Errorf("scenario %q: %w", s.Name, err)
	}
	return &s, nil
}

func (s *Scenario) validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(s.Name != "", "name is required")
	check(len(s.Regions) > 0, "regions must list at least one region")
	names := map[string]bool{}
	models := map[string]bool{}
	for i, m := range s.Models {
		check(m.Name != "" && !models[m.Name], "models[%d].name must be set and unique", i)
		models[m.Name] = true
		check(m.Share > 0 && m.Share <= 1e6, "models[%d].share must be positive", i)
		check(m.PlanCapacity >= 0, "models[%d].plan_capacity must not be negative", i)
		if _, err := profile.Lookup(m.Profile); err != nil {
			errs = append(errs, fmt.Errorf("models[%d].profile: %w", i, err))
		}
		if a := m.Adapters; a != nil {
			check(a.Count >= 1 && a.Count <= 10_000, "models[%d].adapters.count must be in 1..10000", i)
			check(a.ZipfS >= 0 && a.ZipfS <= 10, "models[%d].adapters.zipf_s must be in [0, 10]", i)
			check(a.BaseShare >= 0 && a.BaseShare <= 1, "models[%d].adapters.base_share must be in [0, 1]", i)
			check(a.MaxLoRAs >= 1 && a.MaxLoRAs <= 1024, "models[%d].adapters.max_loras must be in 1..1024", i)
			check(a.LoadTime >= 0, "models[%d].adapters.load_time must not be negative", i)
		}
	}
	for i, r := range s.Regions {
		check(r.Name != "", "regions[%d].name is required", i)
		check(!names[r.Name], "regions[%d].name %q is used twice", i, r.Name)
		names[r.Name] = true
		check(r.UTCOffset >= -12 && r.UTCOffset <= 14, "regions[%d].utc_offset must be in -12..14", i)
		check(r.Weight >= 0, "regions[%d].weight must not be negative", i)
		if len(s.Models) > 0 {
			check(r.Replicas == 0 && r.Profile == "" && r.MaxNumSeqs == 0 && r.KVBlocks == 0,
				"regions[%d]: with models, a region lists its replicas in pools (not replicas, profile, max_num_seqs, kv_blocks)", i)
			total := 0
			for j, p := range r.Pools {
				check(models[p.Model], "regions[%d].pools[%d].model %q is not a listed model", i, j, p.Model)
				check(p.Replicas >= 0 && p.MaxNumSeqs >= 0 && p.MaxNumSeqs <= 4096 && p.KVBlocks >= 0 && p.KVBlocks <= 10_000_000,
					"regions[%d].pools[%d]: replicas, max_num_seqs and kv_blocks out of range", i, j)
				total += p.Replicas
			}
			check(total >= 1 && total <= 64, "regions[%d]: its pools' replicas must add up to 1..64", i)
			continue
		}
		check(len(r.Pools) == 0, "regions[%d].pools: list the models first (models)", i)
		check(r.Replicas >= 1 && r.Replicas <= 64, "regions[%d].replicas must be in 1..64", i)
		check(r.Proxies >= 0 && r.Proxies <= 16, "regions[%d].proxies must be in 0..16", i)
		check(r.MaxNumSeqs >= 0 && r.MaxNumSeqs <= 4096, "regions[%d].max_num_seqs must be in 0..4096", i)
		check(r.KVBlocks >= 0 && r.KVBlocks <= 10_000_000, "regions[%d].kv_blocks must be in 0..10000000", i)
		if _, err := profile.Lookup(r.Profile); err != nil {
			errs = append(errs, fmt.Errorf("regions[%d].profile: %w", i, err))
		}
	}
	for i, l := range s.RTT {
		check(names[l.A] && names[l.B] && l.A != l.B, "rtt[%d] must join two different listed regions", i)
		check(l.Ms >= 0 && l.Ms < 10_000, "rtt[%d].ms must be in [0, 10000)", i)
	}
	check(s.JitterMs >= 0 && s.JitterMs < 1000, "rtt_jitter_ms must be in [0, 1000)")
	check(s.ClientRTTMs >= 0 && s.ClientRTTMs < 10_000, "client_rtt_ms must be in [0, 10000)")
	check(s.SLO.TTFT > 0, "slo.ttft must be positive")
	check(s.SLO.TTFTPer1kTokens >= 0, "slo.ttft_per_1k_tokens must not be negative")
	check(s.PlanCapacity >= 0, "plan_capacity must not be negative")
	for prof, c := range s.PlanCapacities {
		check(slices.ContainsFunc(s.Regions, func(r ScenarioRegion) bool { return r.Profile == prof }) && c > 0 && !math.IsInf(c, 0),
			"plan_capacities[%s] must be positive and name a profile some region runs", prof)
	}
	if err := s.Prices.Validate(); err != nil {
		errs = append(errs, err)
	}
	if s.Prices != nil {
		for name := range s.Prices.Regions {
			check(names[name], "prices.regions.%s is not a listed region", name)
		}
	}
	for i, x := range s.Sweep {
		check(x > 0 && x <= 100, "sweep[%d] must be in (0, 100]", i)
	}
	for i, p := range s.Policies {
		if _, err := policy.New(p, policy.DefaultConfig()); err != nil {
			errs = append(errs, fmt.Errorf("policies[%d]: %w", i, err))
		}
	}
	for i, r := range s.Regions {
		check(r.BelievedCacheTokens >= 0, "regions[%d].believed_cache_tokens must not be negative", i)
		check(r.EngineSlowdown == 0 || r.EngineSlowdown >= 1 && r.EngineSlowdown <= 1000, "regions[%d].engine_slowdown must be 0 (none) or in [1, 1000], not %v", i, r.EngineSlowdown)
	}
	check(s.Balancer.CacheSource == "" || slices.Contains(CacheSources, s.Balancer.CacheSource), "balancer.cache_source must be one of %s, not %q", strings.Join(CacheSources, ", "), s.Balancer.CacheSource)
	check(s.Balancer.MaxQueue >= 0 && s.Balancer.MaxWait >= 0 && s.Balancer.MaxInFlight >= 0 && s.Balancer.TenantMaxHeld >= 0,
		"balancer values must not be negative")
	check(s.Control.LoadInterval >= 0 && s.Control.DigestInterval >= 0 && s.Control.Scrape >= 0 && s.Control.ProbeInterval >= 0 && s.Control.MaxWANRTT >= 0,
		"control_plane intervals must not be negative")
	w := s.Workload
	switch w.Kind {
	case "diurnal":
		check(w.Day > 0, "workload.day must be positive")
		check(w.Duration > 0, "workload.duration must be positive")
		check(w.PeakRPS > 0 && w.PeakRPS < 1e6, "workload.peak_rps must be in (0, 1e6)")
		check(w.ValleyRatio > 0 && w.ValleyRatio <= 1, "workload.valley_ratio must be in (0, 1]")
		check(w.MeanTurns >= 1, "workload.mean_turns must be at least 1")
		check(w.Tenants >= 0 && w.TenantPromptTokens >= 0, "workload.tenants and tenant_prompt_tokens must not be negative")
		check(w.ResidencyShare >= 0 && w.ResidencyShare <= 1, "workload.residency_share must be in [0, 1]")
		check(w.ResponsesShare >= 0 && w.ResponsesShare <= 1, "workload.responses_share must be in [0, 1]")
		check(w.StartHour >= 0 && w.StartHour < 24, "workload.start_hour must be in [0, 24)")
		for i, b := range w.Bursts {
			check(names[b.Region] || b.Region == "" && b.Tenant != "", "workload.bursts[%d].region %q is not a listed region", i, b.Region)
			if b.Tenant != "" {
				var k int
				_, err := fmt.Sscanf(b.Tenant, "tenant-%d", &k)
				check(err == nil && k >= 0 && k < w.Tenants && b.Tenant == fmt.Sprint("tenant-", k),
					"workload.bursts[%d].tenant %q must name one of the %d tenants as tenant-<i>", i, b.Tenant, w.Tenants)
			}
			check(b.Duration > 0 && b.Multiplier > 0 && b.At >= 0, "workload.bursts[%d] needs at >= 0, a positive duration and multiplier", i)
		}
	case "mooncake", "azure":
		check(w.Trace != "", "workload.trace is required for a %s replay", w.Kind)
		check(w.Speedup >= 0, "workload.speedup must not be negative")
		check(w.Assign == "" || w.Assign == workload.AssignSession || w.Assign == workload.AssignRoundRobin, "workload.assign must be session or round-robin")
	default:
		errs = append(errs, fmt.Errorf("workload.kind must be diurnal, mooncake or azure, not %q", w.Kind))
	}
	check(w.BlockTokens >= 0 && w.MaxPromptTokens >= 0 && w.MaxOutputTokens >= 0 && w.Limit >= 0, "workload token counts must not be negative")
	for i, f := range s.Faults {
		switch FaultKind(f.Kind) {
		case ReplicaCrash, RegionOutage, ReplicaHang:
			check(names[f.Region], "faults[%d].region %q is not a listed region", i, f.Region)
		case RTTSpike:
			check(names[f.A] && names[f.B] && f.A != f.B && f.Ms > 0, "faults[%d] (rtt-spike) needs regions a and b and a positive ms", i)
		case LinkLoss:
			check(names[f.A] && names[f.B] && f.A != f.B && f.Loss > 0 && f.Loss <= 1, "faults[%d] (link-loss) needs regions a and b and a loss in (0, 1]", i)
		default:
			errs = append(errs, fmt.Errorf("faults[%d].kind must be replica-crash, replica-hang, region-outage, rtt-spike or link-loss, not %q", i, f.Kind))
		}
		check(f.At >= 0 && f.Duration > 0, "faults[%d] needs at >= 0 and a positive duration", i)
	}
	return errors.Join(errs...)
}

// firstProfile is the first region's profile, or the first model's.
func (s *Scenario) firstProfile() string {
	if len(s.Models) > 0 {
		return s.Models[0].Profile
	}
	return s.Regions[0].Profile
}

// model is the listed model named name (validated to exist).
// Serves reports whether the scenario places replicas of model in region
// (a pool of it with at least one replica).
func (s *Scenario) Serves(region, model string) bool {
	for _, r := range s.Regions {
		if r.Name != region {
			continue
		}
		for _, p := range r.Pools {
			if p.Model == model && p.Replicas > 0 {
				return true
			}
		}
	}
	return false
}

func (s *Scenario) model(name string) ScenarioModel {
	for _, m := range s.Models {
		if m.Name == name {
			return m
		}
	}
	return ScenarioModel{}
}

// PolicyNames returns the scenario's policies, or all of them.
func (s *Scenario) PolicyNames() []string {
	if len(s.Policies) > 0 {
		return s.Policies
	}
	return policy.Names
}

// Build returns the simulation config (without a policy) and the workload
// for the scenario. trace overrides the scenario's trace file when set.
func (s *Scenario) Build(trace string) (Config, *Workload, error) {
	cfg := Config{Seed: s.Seed, SLO: s.SLO.Objective(), Jitter: time.Duration(s.JitterMs * float64(time.Millisecond)),
		ClientRTT: time.Duration(s.ClientRTTMs * float64(time.Millisecond)),
		Balancer: balancer.Config{MaxQueue: s.Balancer.MaxQueue, MaxWait: s.Balancer.MaxWait, FIFO: s.Balancer.FIFO,
			TenantMaxHeld: s.Balancer.TenantMaxHeld},
		MaxInFlight: s.Balancer.MaxInFlight, ResponsesStartOver: s.Balancer.ResponsesStartOver, Control: region.ControlPlane{LoadInterval: s.Control.LoadInterval,
			DigestInterval: s.Control.DigestInterval, ScrapeInterval: s.Control.Scrape, ProbeInterval: s.Control.ProbeInterval,
			MaxWANRTT: s.Control.MaxWANRTT}}
	cfg.NoCacheTruth, cfg.KVEvents = s.Balancer.CacheSource == "belief", s.Balancer.CacheSource == "events"
	cfg.NoDispatchSharing = s.Balancer.DispatchSharing != nil && !*s.Balancer.DispatchSharing
	if s.Balancer.AdmissionOn() {
		for c := range cfg.Balancer.Objectives {
			cfg.Balancer.Objectives[c] = cfg.SLO
		}
	}
	first, err := profile.Lookup(s.firstProfile())
	if err != nil {
		return Config{}, nil, err
	}
	maxWAN := region.DefaultControlPlane().MaxWANRTT
	if s.Control.MaxWANRTT > 0 {
		maxWAN = s.Control.MaxWANRTT
	}
	pc := policy.ConfigFor(first, maxWAN)
	cfg.PolicyConfig = &pc
	idx := map[string]int{}
	var loads []workload.RegionLoad
	for i, r := range s.Regions {
		idx[r.Name] = i
		spec := RegionSpec{Name: r.Name, Replicas: r.Replicas, Jurisdiction: r.Jurisdiction,
			MaxNumSeqs: r.MaxNumSeqs, KVBlocks: r.KVBlocks, BelievedCacheTokens: r.BelievedCacheTokens, Proxies: r.Proxies, EngineSlowdown: r.EngineSlowdown}
		if len(s.Models) == 0 {
			if spec.Profile, err = profile.Lookup(r.Profile); err != nil {
				return Config{}, nil, err
			}
		}
		for _, p := range r.Pools {
			m := s.model(p.Model)
			ps := PoolSpec{Model: p.Model, Replicas: p.Replicas, MaxNumSeqs: p.MaxNumSeqs, KVBlocks: p.KVBlocks}
			if ps.Profile, err = profile.Lookup(m.Profile); err != nil {
				return Config{}, nil, err
			}
			if a := m.Adapters; a != nil {
				ps.MaxLoRAs, ps.LoRALoad = a.MaxLoRAs, a.LoadTime
			}
			spec.Pools = append(spec.Pools, ps)
		}
		cfg.Regions = append(cfg.Regions, spec)
		loads = append(loads, workload.RegionLoad{Name: r.Name, UTCOffset: r.UTCOffset, Weight: r.Weight, Jurisdiction: r.Jurisdiction})
	}
	cfg.RTT = make([][]time.Duration, len(s.Regions))
	for i := range cfg.RTT {
		cfg.RTT[i] = make([]time.Duration, len(s.Regions))
	}
	for _, l := range s.RTT {
		d := time.Duration(l.Ms * float64(time.Millisecond))
		cfg.RTT[idx[l.A]][idx[l.B]], cfg.RTT[idx[l.B]][idx[l.A]] = d, d
	}
	for _, f := range s.Faults {
		cfg.Faults = append(cfg.Faults, Fault{Kind: FaultKind(f.Kind), At: f.At, Duration: f.Duration, Region: f.Region,
			Replica: f.Replica, A: f.A, B: f.B, RTT: time.Duration(f.Ms * float64(time.Millisecond)), Loss: f.Loss})
	}
	wl, err := s.workload(loads, trace)
	return cfg, wl, err
}

// Workload is a scenario's demand, replayable any number of times.
type Workload struct {
	// Source returns a fresh stream of the same arrivals.
	Source      func() (workload.Source, error)
	Span        time.Duration // arrival span
	BlockTokens int
	Lengths     string // where prompt/output lengths came from
	Diurnal     *workload.Diurnal
}

func (s *Scenario) workload(loads []workload.RegionLoad, trace string) (*Workload, error) {
	w := s.Workload
	switch w.Kind {
	case "diurnal":
		d := &workload.Diurnal{Regions: loads, Day: w.Day, Duration: w.Duration, StartHour: w.StartHour, PeakRPS: w.PeakRPS,
			ValleyRatio: w.ValleyRatio, PeakHour: w.PeakHour, MeanTurns: w.MeanTurns, ThinkTime: w.ThinkTime, FollowUpShare: w.FollowUpShare,
			Tenants: w.Tenants, TenantPromptTokens: w.TenantPromptTokens, TenantShares: w.TenantShares, CriticalShare: w.CriticalShare, SheddableShare: w.SheddableShare, ResidencyShare: w.ResidencyShare, ResponsesShare: w.ResponsesShare,
			MaxPromptTokens: w.MaxPromptTokens, MaxOutputTokens: w.MaxOutputTokens, BlockTokens: w.BlockTokens, Seed: s.Seed}
		for _, m := range s.Models {
			mix := workload.ModelMix{Name: m.Name, Share: m.Share}
			if a := m.Adapters; a != nil {
				mix.Adapters, mix.ZipfS, mix.BaseShare = a.Count, a.ZipfS, a.BaseShare
			}
			d.Models = append(d.Models, mix)
		}
		if d.BlockTokens == 0 {
			d.BlockTokens = 128
		}
		for _, b := range w.Bursts {
			d.Bursts = append(d.Bursts, workload.Burst{Region: b.Region, Tenant: b.Tenant, At: b.At, Duration: b.Duration, Multiplier: b.Multiplier})
		}
		lengths := w.Lengths
		if lengths == "" {
			lengths = "azure_conv_2023.csv"
		}
		if lengths == "synthetic" {
			d.Lengths = workload.Synthetic()
		} else {
			dist, err := workload.LengthsFromTrace(lengths)
			if err != nil {
				return nil, fmt.Errorf("workload.lengths: %w", err)
			}
			d.Lengths = dist
		}
		return &Workload{Source: d.Source, Span: w.Duration, BlockTokens: d.BlockTokens, Lengths: d.Lengths.Name, Diurnal: d}, nil
	default:
		name := w.Trace
		if trace != "" {
			name = trace
		}
		recs, err := workload.LoadTrace(name, w.Kind)
		if err != nil {
			return nil, err
		}
		if w.Limit > 0 && len(recs) > w.Limit {
			recs = recs[:w.Limit]
		}
		bt := w.BlockTokens
		if bt == 0 {
			bt = workload.MooncakeBlockTokens
		}
		r := workload.Replay{Records: recs, Regions: loads, BlockTokens: bt, Assign: w.Assign, Speedup: w.Speedup, AssignSeed: s.Seed}
		speed := math.Max(w.Speedup, 1)
		if w.Speedup > 0 {
			speed = w.Speedup
		}
		span := time.Duration(float64(recs[len(recs)-1].At) / speed)
		return &Workload{Source: r.Source, Span: span, BlockTokens: bt, Lengths: name}, nil
	}
}
