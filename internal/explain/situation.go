package explain

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"skywalker/internal/policy"
	"skywalker/internal/request"
	"skywalker/internal/strictyaml"
)

// Situation is one request and the view of the region it arrived at.
type Situation struct {
	Title   string      `yaml:"title"`
	Request RequestSpec `yaml:"request"`
	Local   LocalSpec   `yaml:"local"`
	Peers   []PeerSpec  `yaml:"peers"`
	Config  *ConfigSpec `yaml:"config"`
}

// RequestSpec describes the request by size rather than content.
type RequestSpec struct {
	PromptTokens int    `yaml:"prompt_tokens"`
	BlockTokens  int    `yaml:"block_tokens"`
	Residency    string `yaml:"residency"`
	Session      string `yaml:"session"`
	Forwarded    bool   `yaml:"forwarded"`
}

// PrefillSpec is a policy.PrefillProfile in YAML.
type PrefillSpec struct {
	Fixed           time.Duration `yaml:"fixed"`
	PerToken        time.Duration `yaml:"per_token"`
	PerTokenSquared float64       `yaml:"per_token_squared_ns"`
}

// LocalSpec is the ingress region.
type LocalSpec struct {
	Name           string        `yaml:"name"`
	Jurisdiction   string        `yaml:"jurisdiction"`
	Queued         int           `yaml:"queued"`
	PerRequestWait time.Duration `yaml:"per_request_wait"`
	Prefill        PrefillSpec   `yaml:"prefill"`
	Replicas       []ReplicaSpec `yaml:"replicas"`
}

// ReplicaSpec is one local replica; Healthy defaults to true.
type ReplicaSpec struct {
	Name         string  `yaml:"name"`
	Healthy      *bool   `yaml:"healthy"`
	Waiting      int     `yaml:"waiting"`
	Running      int     `yaml:"running"`
	InFlight     int     `yaml:"in_flight"`
	MaxInFlight  int     `yaml:"max_in_flight"`
	KVUsage      float64 `yaml:"kv_usage"`
	PrefixTokens int     `yaml:"prefix_tokens"`
}

// PeerSpec is one peer region; Healthy and GateOpen default to true.
type PeerSpec struct {
	Name         string        `yaml:"name"`
	Jurisdiction string        `yaml:"jurisdiction"`
	Healthy      *bool         `yaml:"healthy"`
	DataAge      time.Duration `yaml:"data_age"`
	RTT          time.Duration `yaml:"rtt"`
	GateOpen     *bool         `yaml:"gate_open"`
	QueueWait    time.Duration `yaml:"queue_wait"`
	Queued       int           `yaml:"queued"`
	Replicas     int           `yaml:"replicas"`
	Slots        int           `yaml:"slots"`
	Outstanding  int           `yaml:"outstanding"`
	PrefixTokens int           `yaml:"prefix_tokens"`
	Prefill      PrefillSpec   `yaml:"prefill"`
}

// ConfigSpec overrides SkyWalker policy parameters.
type ConfigSpec struct {
	CongestionWeight      *time.Duration `yaml:"congestion_weight"`
	LoadMargin            *int           `yaml:"load_margin"`
	MinRemotePrefixTokens *int           `yaml:"min_remote_prefix_tokens"`
	MaxWANRTT             *time.Duration `yaml:"max_wan_rtt"`
	MaxDataAge            *time.Duration `yaml:"max_data_age"`
}

// maxSituationBytes bounds the input; situations are hand-written.
const maxSituationBytes = 1 << 20

// Parse reads a situation, strictly: unknown fields, wrong types, negative
// counts and inconsistent sizes are errors naming the field.
func Parse(data []byte) (*Situation, error) {
	if len(data) > maxSituationBytes {
		return nil, fmt.Errorf("situation is %d bytes, over the %d-byte limit", len(data), maxSituationBytes)
	}
	var s Situation
	if err := strictyaml.Decode(data, &s); err != nil {
		if errors.Is(err, strictyaml.ErrEmpty) {
			return nil, errors.New("situation is empty")
		}
		return nil, fmt.Errorf("parse situation: %w", err)
	}
	if err := s.validate(); err != nil {
		return nil, fmt.Errorf("invalid situation: %w", err)
	}
	return &s, nil
}

func (s *Situation) validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	r := s.Request
	check(r.PromptTokens > 0, "request.prompt_tokens must be positive")
	check(r.BlockTokens >= 0, "request.block_tokens must not be negative")
	check(s.Local.Name != "", "local.name is required")
	check(s.Local.Queued >= 0, "local.queued must not be negative")
	check(s.Local.PerRequestWait >= 0, "local.per_request_wait must not be negative")
	check(len(s.Local.Replicas) > 0, "local.replicas must list at least one replica")
	check(len(s.Local.Replicas) <= 64, "local.replicas lists more than 64 replicas")
	check(len(s.Peers) <= 64, "peers lists more than 64 regions")
	checkPrefill := func(where string, p PrefillSpec) {
		check(p.Fixed >= 0 && p.PerToken >= 0 && p.PerTokenSquared >= 0, "%s.prefill values must not be negative", where)
	}
	checkPrefill("local", s.Local.Prefill)
	for i, rep := range s.Local.Replicas {
		where := fmt.Sprintf("local.replicas[%d]", i)
		check(rep.Name != "", "%s.name is required", where)
		check(rep.Waiting >= 0 && rep.Running >= 0 && rep.InFlight >= 0 && rep.MaxInFlight >= 0, "%s counts must not be negative", where)
		check(rep.KVUsage >= 0 && rep.KVUsage <= 1, "%s.kv_usage must be in [0, 1]", where)
		check(rep.PrefixTokens >= 0 && rep.PrefixTokens <= r.PromptTokens, "%s.prefix_tokens must be in [0, request.prompt_tokens]", where)
	}
	names := map[string]bool{s.Local.Name: true}
	for i, p := range s.Peers {
		where := fmt.Sprintf("peers[%d]", i)
		check(p.Name != "", "%s.name is required", where)
		check(!names[p.Name], "%s.name %q is used twice", where, p.Name)
		names[p.Name] = true
		check(p.DataAge >= 0 && p.RTT >= 0 && p.QueueWait >= 0, "%s durations must not be negative", where)
		check(p.Queued >= 0 && p.Replicas >= 0 && p.Slots >= 0 && p.Outstanding >= 0, "%s counts must not be negative", where)
		check(p.PrefixTokens >= 0 && p.PrefixTokens <= r.PromptTokens, "%s.prefix_tokens must be in [0, request.prompt_tokens]", where)
		checkPrefill(where, p.Prefill)
	}
	return errors.Join(errs...)
}

func (p PrefillSpec) profile() policy.PrefillProfile {
	return policy.PrefillProfile{Fixed: p.Fixed, PerToken: p.PerToken, PerTokenSquared: p.PerTokenSquared}
}

func orTrue(b *bool) bool { return b == nil || *b }

// Build returns the request and view the situation describes. Prefix
// lengths given in tokens are turned into whole blocks.
func (s *Situation) Build() (*request.Request, *policy.View) {
	bt := s.Request.BlockTokens
	if bt <= 0 {
		bt = request.DefaultBlockBytes / request.BytesPerToken
	}
	nblocks := s.Request.PromptTokens / bt
	blocks := make([]uint64, nblocks)
	for i := range blocks {
		blocks[i] = uint64(i + 1)
	}
	req := &request.Request{ID: "explain", Region: s.Local.Name, PromptTokens: s.Request.PromptTokens, Blocks: blocks,
		BlockTokens: bt, Residency: strings.ToLower(s.Request.Residency), Session: s.Request.Session, Forwarded: s.Request.Forwarded}
	v := &policy.View{Local: policy.LocalRegion{Name: s.Local.Name, Jurisdiction: s.Local.Jurisdiction, Queued: s.Local.Queued,
		PerRequestWait: s.Local.PerRequestWait, Prefill: s.Local.Prefill.profile()}}
	for _, r := range s.Local.Replicas {
		v.Local.Replicas = append(v.Local.Replicas, policy.Replica{Name: r.Name, Healthy: orTrue(r.Healthy), Waiting: r.Waiting,
			Running: r.Running, InFlight: r.InFlight, MaxInFlight: r.MaxInFlight, KVUsage: r.KVUsage, PrefixBlocks: r.PrefixTokens / bt})
	}
	for _, p := range s.Peers {
		v.Peers = append(v.Peers, policy.PeerRegion{Name: p.Name, Jurisdiction: p.Jurisdiction, Healthy: orTrue(p.Healthy),
			DataAge: p.DataAge, RTT: p.RTT, GateOpen: orTrue(p.GateOpen), QueueWait: p.QueueWait, Queued: p.Queued,
			Replicas: p.Replicas, Slots: p.Slots, Outstanding: p.Outstanding, PrefixBlocks: p.PrefixTokens / bt, Prefill: p.Prefill.profile()})
	}
	return req, v
}

// PolicyConfig returns the default policy configuration with the
// situation's overrides applied.
func (s *Situation) PolicyConfig() policy.Config {
	cfg := policy.DefaultConfig()
	if c := s.Config; c != nil {
		sw := &cfg.Skywalker
		if c.CongestionWeight != nil {
			sw.CongestionWeight = *c.CongestionWeight
		}
		if c.LoadMargin != nil {
			sw.LoadMargin = *c.LoadMargin
		}
		if c.MinRemotePrefixTokens != nil {
			sw.MinRemotePrefixTokens = *c.MinRemotePrefixTokens
		}
		if c.MaxWANRTT != nil {
			sw.MaxWANRTT = *c.MaxWANRTT
		}
		if c.MaxDataAge != nil {
			sw.MaxDataAge = *c.MaxDataAge
		}
	}
	return cfg
}

// Row is one policy's decision on the situation.
type Row struct {
	Policy   string        `json:"policy"`
	Action   string        `json:"action"`
	Region   string        `json:"region"`
	Replica  string        `json:"replica,omitempty"`
	Reason   string        `json:"reason"`
	Estimate time.Duration `json:"estimate_ns,omitempty"`
}

// Evaluate routes the situation through the named policies (all of them
// when names is empty).
func (s *Situation) Evaluate(names []string) ([]Row, error) {
	if len(names) == 0 {
		names = policy.Names
	}
	cfg := s.PolicyConfig()
	var rows []Row
	for _, name := range names {
		p, err := policy.New(name, cfg)
		if err != nil {
			return nil, err
		}
		req, v := s.Build()
		d := p.Route(req, v)
		row := Row{Policy: name, Action: d.Action.String(), Region: d.Region, Reason: string(d.Reason), Estimate: d.Estimate}
		if d.Action == policy.Dispatch {
			row.Replica = v.Local.Replicas[d.Replica].Name
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// WriteTable prints rows as an aligned text table.
func WriteTable(w io.Writer, rows []Row) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%-16s %-9s %-9s %-8s %-18s %s\n", "POLICY", "ACTION", "REGION", "REPLICA", "REASON", "EST. TTFT")
	for _, r := range rows {
		est := "-"
		if r.Estimate > 0 {
			est = r.Estimate.Round(time.Millisecond).String()
		}
		rep := r.Replica
		if rep == "" {
			rep = "-"
		}
		fmt.Fprintf(&b, "%-16s %-9s %-9s %-8s %-18s %s\n", r.Policy, r.Action, r.Region, rep, r.Reason, est)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
