// Package results is how every run is summarised: the simulator's, a live
// bench run's and the demo's. One Result type, one percentile, one
// Collector that turns requests as a client saw them into a Result, so a
// simulated run and a live one print the same table computed the same
// way. It must not know where samples come from.
package results

import (
	"fmt"
	"maps"
	"math"
	"skywalker/internal/request"
	"slices"
	"strconv"
	"time"
)

// Result is one run's outcome: one policy on one scenario, or one live
// run. JSON field names are the `skywalker sim --format json` contract.
type Result struct {
	Policy    string         `json:"policy"`
	Requests  int            `json:"requests"`
	Completed int            `json:"completed"`
	Dropped   int            `json:"dropped"`
	Drops     map[string]int `json:"drop_reasons,omitempty"`
	// FollowUpsMoved is the share of a session's later turns served on
	// another replica than its turn before (simulator only): each would
	// have broken a Responses chain, whose state lives where its previous
	// response was made. ChainTurns counts the later turns of Responses
	// chains, ChainsRestarted those whose previous turn was never served
	// (the client starts over); a chain whose home is gone is a drop
	// (previous_response_not_found), or, when the balancers let it start
	// over (responses_start_over), one of ChainsStartedOver: served as a
	// new chain wherever the policy chose.
	FollowUpsMoved    float64 `json:"follow_ups_moved,omitempty"`
	ChainTurns        int     `json:"chain_turns,omitempty"`
	ChainsRestarted   int     `json:"chains_restarted,omitempty"`
	ChainsStartedOver int     `json:"chains_started_over,omitempty"`
	// Unservable counts the requests no region of the fleet may serve
	// (data that must stay in a jurisdiction where no region serves the
	// model): they are in no other number, as no router could serve them.
	Unservable int `json:"unservable,omitempty"`
	Retried    int `json:"retried"`

	// Latency percentiles are over every request: one dropped, rejected
	// or timed out counts as never answered (+Inf, null in JSON), so a
	// policy that drops 2% has an infinite p99.
	TTFTP50Ms Millis  `json:"ttft_p50_ms"`
	TTFTP90Ms Millis  `json:"ttft_p90_ms"`
	TTFTP99Ms Millis  `json:"ttft_p99_ms"`
	E2EP50Ms  Millis  `json:"e2e_p50_ms"`
	E2EP99Ms  Millis  `json:"e2e_p99_ms"`
	TTFTMaxMs Millis  `json:"ttft_max_ms"` // the longest TTFT of a completed request
	TPOTMs    float64 `json:"tpot_ms"`     // mean time per output token after the first

	ThroughputTokS  float64 `json:"throughput_tok_s"`       // output tokens per second
	PaperThroughput float64 `json:"paper_throughput_tok_s"` // (input + 2·output) tokens per second, as the SkyWalker paper reports
	GoodputRPS      float64 `json:"goodput_rps"`            // requests meeting the TTFT SLO per second
	SLOAttainment   float64 `json:"slo_attainment"`         // share of all requests (dropped included) meeting the SLO
	CacheHitRate    float64 `json:"cache_hit_rate"`         // prompt tokens served from prefix caches
	// PrefixPrecision is the share of requests routed as holding a cached
	// prefix whose engine really held it (to within a block), when the
	// engines report cached tokens (simulator only).
	PrefixPrecision float64 `json:"prefix_precision,omitempty"`
	// PrefixRecall is the share of requests whose engine held a block or
	// more of the prompt that were routed as holding it (simulator only).
	PrefixRecall float64 `json:"prefix_recall,omitempty"`
	CrossRegion  float64 `json:"cross_region_share"` // completed requests served outside their ingress region

	// Utilization is, per region, the share of time its replicas were
	// busy (stepping), whatever the size of their batches.
	Utilization map[string]float64     `json:"utilization,omitempty"`
	Regions     map[string]RegionStats `json:"regions"`

	// RegionOrder names the regions in Series order; ReplicaCounts gives
	// each region's replicas (for utilization plots). Simulator only.
	RegionOrder   []string       `json:"-"`
	ReplicaCounts map[string]int `json:"-"`

	Preemptions int64   `json:"preemptions"` // engine preemptions (recomputations) over all replicas
	HoldP99Ms   float64 `json:"hold_p99_ms"` // time requests spent held in balancer queues, p99
	// TimeParts is where the completed requests' time to first token
	// went and what each SLO miss is owed to, when the driver knows
	// (the simulator); nil otherwise.
	TimeParts *TimeParts `json:"time_parts,omitempty"`

	// Admission: Refused is requests refused on arrival (429: overloaded,
	// queue full), Shed those shed from a queue past their objective;
	// AdmittedSLOAttainment is the share of the requests not refused that
	// met the SLO (shed ones count as misses).
	Refused               int     `json:"refused"`
	Shed                  int     `json:"shed"`
	AdmittedSLOAttainment float64 `json:"admitted_slo_attainment"`
	// Tenants and Classes break the run down by tenant and by priority
	// class, when it has more than one of either.
	Tenants map[string]GroupStats `json:"tenants,omitempty"`
	Classes map[string]GroupStats `json:"classes,omitempty"`
	// Models breaks the run down by base model, when it served several.
	Models map[string]GroupStats `json:"models,omitempty"`
	// AdapterLoads is how many LoRA adapters the engines loaded into a
	// slot (simulator only; zero without adapters).
	AdapterLoads int64 `json:"adapter_loads,omitempty"`
	// FirstTokenTimeouts is how many dispatches waited past their learned
	// first-token timeout and were routed again (simulator only).
	FirstTokenTimeouts int64 `json:"first_token_timeouts,omitempty"`
	// ForwardTimeouts is how many forwards waited past their first-token
	// timeout at their ingress and were routed again there;
	// ForwardsWasted how many forwards were withdrawn (timed out, or their
	// client left) after the peer's engine had begun them, and
	// WastedEngineSeconds the engine time they had taken there: work the
	// peers computed for nobody (simulator only; the proxy counts
	// skywalker_forward_wasted_total).
	ForwardTimeouts     int64   `json:"forward_timeouts,omitempty"`
	ForwardsWasted      int64   `json:"forwards_wasted,omitempty"`
	WastedEngineSeconds float64 `json:"wasted_engine_seconds,omitempty"`

	Makespan float64 `json:"makespan_s"`
	Events   int64   `json:"events,omitempty"`
	// Stopped: the simulation ended early, once the SLO target could no
	// longer be met; only the SLO attainment's upper bound is known.
	Stopped bool `json:"stopped,omitempty"`

	Series *Series `json:"-"`
	// Outcomes are every request's outcome by id, when the run recorded
	// them (Collector.RecordOutcomes).
	Outcomes map[string]string `json:"-"`
}

// RefusedButServable counts the requests refused or shed in r that were
// answered within the SLO in without, a run of the same arrivals without
// admission: what admission refused that could have been served. Both
// must have recorded their outcomes.
func RefusedButServable(r, without *Result) int {
	n := 0
	for id, o := range r.Outcomes {
		if (Refusal(o) || o == "shed") && without.Outcomes[id] == OutcomeMet {
			n++
		}
	}
	return n
}

// RegionStats are one ingress region's figures.
type RegionStats struct {
	Arrivals int `json:"arrivals"`
	Dropped  int `json:"dropped"`
	// Refused and Shed are the drops answered with a 429 the client can
	// act on (refused on arrival; shed from a queue); counted in Dropped.
	Refused      int     `json:"refused"`
	Shed         int     `json:"shed"`
	ServedLocal  int     `json:"served_local"`
	ForwardedOut int     `json:"forwarded_out"`
	Received     int     `json:"received"`
	TTFTP50Ms    Millis  `json:"ttft_p50_ms"`
	TTFTP99Ms    Millis  `json:"ttft_p99_ms"`
	CacheHitRate float64 `json:"cache_hit_rate"`
}

// TTFTParts splits one completed request's time to first token: held in
// balancer queues (the ingress's and, forwarded, the serving region's),
// on the network (the client's link, a forward's WAN crossings, a
// dispatch to a remote replica), waiting in the engine's queue, and in
// prefill (from its first scheduled step to its first token, a
// preemption's recomputation included).
type TTFTParts struct {
	Hold, Network, EngineQueue, Prefill time.Duration
}

// The causes a miss is put down to: the largest part of a late request's
// time to first token, or how a request that was never answered ended.
const (
	CauseHold        = "hold"
	CauseNetwork     = "network"
	CauseEngineQueue = "engine_queue"
	CausePrefill     = "prefill"
	CauseRefused     = "refused"
	CauseShed        = "shed"
	CauseFailed      = "failed" // dropped otherwise: timed out, failed, given up
)

// MissCauses lists the causes in the order tables print them.
var MissCauses = []string{CauseHold, CauseNetwork, CauseEngineQueue, CausePrefill, CauseRefused, CauseShed, CauseFailed}

// cause is what a late request's miss is put down to: its largest part.
func (p TTFTParts) cause() string {
	c, most := CauseHold, p.Hold
	for _, x := range []struct {
		name string
		d    time.Duration
	}{{CauseNetwork, p.Network}, {CauseEngineQueue, p.EngineQueue}, {CausePrefill, p.Prefill}} {
		if x.d > most {
			c, most = x.name, x.d
		}
	}
	return c
}

// dropCause is what a request that was never answered is put down to.
func dropCause(reason string) string {
	switch {
	case Refusal(reason):
		return CauseRefused
	case reason == "shed":
		return CauseShed
	}
	return CauseFailed
}

// TimeParts are a run's TTFT parts: mean and p99 of each over completed
// requests, and how many SLO misses each cause accounts for.
type TimeParts struct {
	HoldMeanMs        float64        `json:"hold_mean_ms"`
	HoldP99Ms         float64        `json:"hold_p99_ms"`
	NetworkMeanMs     float64        `json:"network_mean_ms"`
	NetworkP99Ms      float64        `json:"network_p99_ms"`
	EngineQueueMeanMs float64        `json:"engine_queue_mean_ms"`
	EngineQueueP99Ms  float64        `json:"engine_queue_p99_ms"`
	PrefillMeanMs     float64        `json:"prefill_mean_ms"`
	PrefillP99Ms      float64        `json:"prefill_p99_ms"`
	Misses            map[string]int `json:"miss_causes,omitempty"`
}

// MissSummary says in a few words what the misses are owed to, largest
// share first: "hold 61% · refused 30% · prefill 9%", or "none".
func (tp *TimeParts) MissSummary() string {
	if tp == nil {
		return ""
	}
	total := 0
	for _, n := range tp.Misses {
		total += n
	}
	if total == 0 {
		return "none"
	}
	causes := slices.Clone(MissCauses)
	slices.SortStableFunc(causes, func(a, b string) int { return tp.Misses[b] - tp.Misses[a] })
	out := ""
	for _, c := range causes {
		n := tp.Misses[c]
		if n == 0 {
			continue
		}
		if out != "" {
			out += " · "
		}
		out += fmt.Sprintf("%s %.0f%%", c, 100*float64(n)/float64(total))
	}
	return out
}

// GroupStats are one tenant's or one priority class's figures.
type GroupStats struct {
	Requests              int     `json:"requests"`
	Refused               int     `json:"refused"`
	Shed                  int     `json:"shed"`
	SLOAttainment         float64 `json:"slo_attainment"`
	AdmittedSLOAttainment float64 `json:"admitted_slo_attainment"`
	GoodputRPS            float64 `json:"goodput_rps"`
}

// Refusal reports whether a drop reason is a refusal on arrival (the
// request was never admitted) rather than a failure after admission.
func Refusal(reason string) bool { return reason == "overloaded" || reason == "queue_full" }

// Millis is a latency in milliseconds. +Inf stands for a request that
// never got its answer (a percentile that falls on a drop); JSON writes it
// as null.
type Millis float64

// Never is the latency of a request that was never answered.
var Never = Millis(math.Inf(1))

// Missed reports whether the latency is Never.
func (m Millis) Missed() bool { return math.IsInf(float64(m), 1) }

// MarshalJSON writes Never as null.
func (m Millis) MarshalJSON() ([]byte, error) {
	if m.Missed() || math.IsNaN(float64(m)) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, float64(m), 'f', -1, 64), nil
}

// UnmarshalJSON reads null as Never.
func (m *Millis) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*m = Never
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return fmt.Errorf("latency %s: %w", b, err)
	}
	*m = Millis(f)
	return nil
}

// Totals are the run's figures in the form of one region's: every request
// sent away was received somewhere.
func (r *Result) Totals() RegionStats {
	cross := int(math.Round(float64(r.Completed) * r.CrossRegion))
	return RegionStats{Arrivals: r.Requests, Dropped: r.Dropped, Refused: r.Refused, Shed: r.Shed, ServedLocal: r.Completed - cross, ForwardedOut: cross, Received: cross,
		TTFTP50Ms: r.TTFTP50Ms, TTFTP99Ms: r.TTFTP99Ms, CacheHitRate: r.CacheHitRate}
}

// Report is every policy's result on one scenario.
type Report struct {
	Scenario string    `json:"scenario"`
	Seed     uint64    `json:"seed"`
	Lengths  string    `json:"lengths,omitempty"`
	Results  []*Result `json:"results"`
}

// Find returns the report's result for policy, or nil.
func (r *Report) Find(policy string) *Result {
	for _, res := range r.Results {
		if res.Policy == policy {
			return res
		}
	}
	return nil
}

// Series are per-region time series in fixed buckets, for plots.
type Series struct {
	Bucket    time.Duration
	Arrivals  [][]int           // [region][bucket]
	Forwarded [][]int           // requests forwarded out
	Queue     [][]int           // balancer queue length at the bucket's last summary
	Busy      [][]time.Duration // engine busy time in the bucket
	// Work is busy time weighted by the share of the step token budget each
	// step used: Work / (Bucket × replicas) is the share of the region's
	// token capacity used, never above 1.
	Work [][]time.Duration
}

// Percentile is the nearest-rank percentile of sorted values (0 for none).
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// ms is a rounded percentile of sorted milliseconds.
func ms(sorted []float64, p float64) Millis { return Millis(Round(Percentile(sorted, p), 1)) }

// Round keeps results readable and stable across platforms.
func Round(x float64, digits int) float64 {
	if math.IsInf(x, 0) {
		return x
	}
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}

// Ms converts a duration to float milliseconds.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Sample is one request as its client saw it.
type Sample struct {
	ID      string // the request's id, for a collector that records outcomes
	Ingress string // the region the client sent it to
	Served  string // the region that served it ("" if it failed)
	// Start is when the request arrived, End when its last byte did,
	// both as offsets from any fixed origin shared by the run.
	Start, End time.Duration
	TTFT       time.Duration // to the first token
	Held       time.Duration // spent in balancer queues, when known
	// Parts splits a completed request's TTFT, when the driver knows
	// where its time went (the simulator does); nil otherwise.
	Parts        *TTFTParts
	PromptTokens int
	OutputTokens int
	CachedTokens int
	Retried      bool
	// Dropped names why the request failed ("" when it completed): an
	// apierr code such as overloaded, shed or queue_timeout, or
	// client_timeout.
	Dropped string
	// Tenant, Class and Model group the request for the breakdowns (""
	// and "standard" when unknown; Model is the base model).
	Tenant, Class, Model string
}

// Collector turns samples into a Result. It keeps three numbers per
// completed request, so a million-request simulated day fits easily. Not
// safe for concurrent use.
type Collector struct {
	slo                 request.SLO
	requests, completed int
	unservable          int
	retried             int
	drops               map[string]int
	ttft, e2e, hold     []float64
	tpotSum             float64
	tpotN               int
	in, out, cached     int64
	sloHits, cross      int
	ttftMax             float64
	first, last         time.Duration
	started             bool
	regions             map[string]*regionAcc
	regionOrder         []string
	refused, shed       int
	tenants, classes    map[string]*groupAcc
	models              map[string]*groupAcc
	// parts: each completed request's TTFT parts (when known), and what
	// every miss is put down to.
	partsKnown                    bool
	network, engineQueue, prefill []float64
	partHold                      []float64
	misses                        map[string]int
	// outcomes, when recorded: each request id's outcome (see Outcomes).
	outcomes map[string]string
}

// The outcomes RecordOutcomes keeps besides a drop's reason.
const (
	OutcomeMet  = "met"  // answered within the SLO
	OutcomeLate = "late" // answered, after it
)

// RecordOutcomes makes the collector keep every request's outcome by id
// (OutcomeMet, OutcomeLate or the drop reason), for Outcomes: to compare
// two runs of the same arrivals request by request.
func (c *Collector) RecordOutcomes() { c.outcomes = map[string]string{} }

// Outcomes are the recorded outcomes by request id, or nil when not
// recorded.
func (c *Collector) Outcomes() map[string]string { return c.outcomes }

// groupAcc accumulates a GroupStats.
type groupAcc struct {
	requests, refused, shed, hits int
}

func (g *groupAcc) stats(span float64) GroupStats {
	s := GroupStats{Requests: g.requests, Refused: g.refused, Shed: g.shed}
	if g.requests > 0 {
		s.SLOAttainment = Round(float64(g.hits)/float64(g.requests), 4)
	}
	if admitted := g.requests - g.refused; admitted > 0 {
		s.AdmittedSLOAttainment = Round(float64(g.hits)/float64(admitted), 4)
	}
	if span > 0 {
		s.GoodputRPS = Round(float64(g.hits)/span, 3)
	}
	return s
}

func group(m map[string]*groupAcc, name string) *groupAcc {
	g := m[name]
	if g == nil {
		g = &groupAcc{}
		m[name] = g
	}
	return g
}

type regionAcc struct {
	stats         RegionStats
	ttft          []float64
	prompt, cache int64
}

// NewCollector returns an empty collector judging TTFT against slo (zero:
// every completed request meets it).
func NewCollector(slo request.SLO) *Collector {
	return &Collector{slo: slo, drops: map[string]int{}, regions: map[string]*regionAcc{}, tenants: map[string]*groupAcc{}, classes: map[string]*groupAcc{},
		models: map[string]*groupAcc{}, misses: map[string]int{}}
}

func (c *Collector) region(name string) *regionAcc {
	a := c.regions[name]
	if a == nil {
		a = &regionAcc{}
		c.regions[name] = a
		c.regionOrder = append(c.regionOrder, name)
	}
	return a
}

// AddUnservable counts a request no region of the fleet may serve (see
// Result.Unservable).
func (c *Collector) AddUnservable() { c.unservable++ }

// Add counts one request.
func (c *Collector) Add(s Sample) {
	c.requests++
	if !c.started || s.Start < c.first {
		c.first, c.started = s.Start, true
	}
	if s.Retried {
		c.retried++
	}
	in := c.region(s.Ingress)
	in.stats.Arrivals++
	class := s.Class
	if class == "" {
		class = "standard"
	}
	tg, cg, mg := group(c.tenants, s.Tenant), group(c.classes, class), group(c.models, s.Model)
	tg.requests++
	cg.requests++
	mg.requests++
	if s.Dropped != "" {
		c.drops[s.Dropped]++
		in.stats.Dropped++
		switch {
		case Refusal(s.Dropped):
			c.refused++
			tg.refused++
			cg.refused++
			mg.refused++
			in.stats.Refused++
		case s.Dropped == "shed":
			c.shed++
			tg.shed++
			cg.shed++
			mg.shed++
			in.stats.Shed++
		}
		inf := math.Inf(1)
		c.ttft, c.e2e, in.ttft = append(c.ttft, inf), append(c.e2e, inf), append(in.ttft, inf)
		c.misses[dropCause(s.Dropped)]++
		if c.outcomes != nil {
			c.outcomes[s.ID] = s.Dropped
		}
		return
	}
	if p := s.Parts; p != nil {
		c.partsKnown = true
		c.partHold = append(c.partHold, Ms(p.Hold))
		c.network = append(c.network, Ms(p.Network))
		c.engineQueue = append(c.engineQueue, Ms(p.EngineQueue))
		c.prefill = append(c.prefill, Ms(p.Prefill))
	}
	c.completed++
	ttft, e2e := Ms(s.TTFT), Ms(s.End-s.Start)
	c.ttftMax = max(c.ttftMax, ttft)
	c.ttft = append(c.ttft, ttft)
	c.e2e = append(c.e2e, e2e)
	c.hold = append(c.hold, Ms(s.Held))
	in.ttft = append(in.ttft, ttft)
	if s.OutputTokens > 1 {
		c.tpotSum += (e2e - ttft) / float64(s.OutputTokens-1)
		c.tpotN++
	}
	c.in += int64(s.PromptTokens)
	c.out += int64(s.OutputTokens)
	c.cached += int64(s.CachedTokens)
	in.prompt += int64(s.PromptTokens)
	in.cache += int64(s.CachedTokens)
	met := c.slo.TTFT <= 0 || s.TTFT <= c.slo.For(s.PromptTokens)
	if met {
		c.sloHits++
		tg.hits++
		cg.hits++
		mg.hits++
	} else if s.Parts != nil {
		c.misses[s.Parts.cause()]++
	}
	if c.outcomes != nil {
		c.outcomes[s.ID] = OutcomeLate
		if met {
			c.outcomes[s.ID] = OutcomeMet
		}
	}
	if s.Served == s.Ingress || s.Served == "" {
		in.stats.ServedLocal++
	} else {
		c.cross++
		in.stats.ForwardedOut++
		c.region(s.Served).stats.Received++
	}
	c.last = max(c.last, s.End)
}

// Misses counts the requests so far that missed the SLO: dropped, or
// answered later than it.
func (c *Collector) Misses() int {
	return c.requests - c.sloHits
}

// Result summarises what was added, labelled with the policy's name.
func (c *Collector) Result(policy string) *Result {
	slices.Sort(c.ttft)
	slices.Sort(c.e2e)
	slices.Sort(c.hold)
	res := &Result{Policy: policy, Requests: c.requests, Completed: c.completed, Retried: c.retried, Unservable: c.unservable,
		TTFTP50Ms: ms(c.ttft, 0.50), TTFTP90Ms: ms(c.ttft, 0.90), TTFTP99Ms: ms(c.ttft, 0.99),
		E2EP50Ms: ms(c.e2e, 0.50), E2EP99Ms: ms(c.e2e, 0.99), HoldP99Ms: Round(Percentile(c.hold, 0.99), 1),
		TTFTMaxMs: Millis(Round(c.ttftMax, 1)),
		Regions:   map[string]RegionStats{}}
	for _, n := range c.drops {
		res.Dropped += n
	}
	if len(c.drops) > 0 {
		res.Drops = c.drops
	}
	if c.tpotN > 0 {
		res.TPOTMs = Round(c.tpotSum/float64(c.tpotN), 2)
	}
	if span := (c.last - c.first).Seconds(); span > 0 {
		res.Makespan = Round(span, 1)
		res.ThroughputTokS = Round(float64(c.out)/span, 1)
		res.PaperThroughput = Round(float64(c.in+2*c.out)/span, 1)
		res.GoodputRPS = Round(float64(c.sloHits)/span, 3)
	}
	if c.requests > 0 {
		res.SLOAttainment = Round(float64(c.sloHits)/float64(c.requests), 4)
	}
	res.Refused, res.Shed = c.refused, c.shed
	if c.partsKnown {
		res.TimeParts = c.timeParts()
	}
	res.Outcomes = c.outcomes
	if admitted := c.requests - c.refused; admitted > 0 {
		res.AdmittedSLOAttainment = Round(float64(c.sloHits)/float64(admitted), 4)
	}
	span := (c.last - c.first).Seconds()
	breakdown := func(m map[string]*groupAcc) map[string]GroupStats {
		if len(m) < 2 {
			return nil
		}
		out := make(map[string]GroupStats, len(m))
		for name, g := range m {
			out[name] = g.stats(span)
		}
		return out
	}
	res.Tenants, res.Classes, res.Models = breakdown(c.tenants), breakdown(c.classes), breakdown(c.models)
	if c.in > 0 {
		res.CacheHitRate = Round(float64(c.cached)/float64(c.in), 4)
	}
	if c.completed > 0 {
		res.CrossRegion = Round(float64(c.cross)/float64(c.completed), 4)
	}
	for _, name := range c.regionOrder {
		a := c.regions[name]
		slices.Sort(a.ttft)
		a.stats.TTFTP50Ms, a.stats.TTFTP99Ms = ms(a.ttft, 0.5), ms(a.ttft, 0.99)
		if a.prompt > 0 {
			a.stats.CacheHitRate = Round(float64(a.cache)/float64(a.prompt), 4)
		}
		res.Regions[name] = a.stats
	}
	return res
}

// timeParts summarises the TTFT parts of the completed requests.
func (c *Collector) timeParts() *TimeParts {
	stat := func(xs []float64) (mean, p99 float64) {
		if len(xs) == 0 {
			return 0, 0
		}
		sum := 0.0
		for _, x := range xs {
			sum += x
		}
		slices.Sort(xs)
		return Round(sum/float64(len(xs)), 1), Round(Percentile(xs, 0.99), 1)
	}
	tp := &TimeParts{}
	tp.HoldMeanMs, tp.HoldP99Ms = stat(c.partHold)
	tp.NetworkMeanMs, tp.NetworkP99Ms = stat(c.network)
	tp.EngineQueueMeanMs, tp.EngineQueueP99Ms = stat(c.engineQueue)
	tp.PrefillMeanMs, tp.PrefillP99Ms = stat(c.prefill)
	if len(c.misses) > 0 {
		tp.Misses = maps.Clone(c.misses)
	}
	return tp
}
