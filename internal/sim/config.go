package sim

import (
	"fmt"
	"time"

	"skywalker/internal/balancer"
	"skywalker/internal/engine"
	"skywalker/internal/policy"
	"skywalker/internal/workload"
)

// RegionSpec describes one simulated region.
type RegionSpec struct {
	Name         string
	Replicas     int
	Profile      engine.Profile
	Jurisdiction string
	// MaxNumSeqs and KVBlocks override the profile's engine defaults.
	MaxNumSeqs int
	KVBlocks   int
}

// FaultKind names a fault on the timeline.
type FaultKind string

// The fault kinds.
const (
	ReplicaCrash FaultKind = "replica-crash" // one replica down, its cache lost
	RegionOutage FaultKind = "region-outage" // every replica of a region down
	RTTSpike     FaultKind = "rtt-spike"     // a link's RTT raised
)

// Fault is one fault: it starts At and lasts Duration.
type Fault struct {
	Kind     FaultKind
	At       time.Duration
	Duration time.Duration
	Region   string        // replica-crash, region-outage
	Replica  int           // replica-crash
	A, B     string        // rtt-spike: the link
	RTT      time.Duration // rtt-spike: the RTT during the spike
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
	// MaxInFlight caps each replica's in-flight requests for dispatch
	// (policy.Replica.MaxInFlight); 0 means the profile's max-num-seqs.
	MaxInFlight int

	Refresh        time.Duration // load summaries to peers; default 250 ms
	DigestInterval time.Duration // prefix digests to peers; default 2 s
	Scrape         time.Duration // replica metrics scrape; default 100 ms
	ServiceAlpha   float64       // EWMA weight for service times; default 0.05

	SLO    time.Duration // TTFT objective
	Faults []Fault
	Seed   uint64

	// Bucket is the width of the time-series buckets for plots; default
	// 1/96 of the workload's span.
	Bucket time.Duration
	// Drain bounds how long after the last arrival the run continues; 0
	// means until every request is done.
	Drain time.Duration
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
		if r.Replicas < 1 {
			return fmt.Errorf("sim: region %s has no replicas", r.Name)
		}
		if r.Replicas > 64 {
			return fmt.Errorf("sim: region %s has %d replicas, at most 64 are supported", r.Name, r.Replicas)
		}
	}
	if c.Refresh <= 0 {
		c.Refresh = 250 * time.Millisecond
	}
	if c.DigestInterval <= 0 {
		c.DigestInterval = 2 * time.Second
	}
	if c.Scrape <= 0 {
		c.Scrape = 100 * time.Millisecond
	}
	if c.ServiceAlpha <= 0 {
		c.ServiceAlpha = 0.05
	}
	return nil
}

// Regions converts region specs to the workload's region list.
func workloadRegions(specs []RegionSpec) []workload.RegionLoad {
	out := make([]workload.RegionLoad, len(specs))
	for i, r := range specs {
		out[i] = workload.RegionLoad{Name: r.Name, Jurisdiction: r.Jurisdiction}
	}
	return out
}
