package sim

import (
	"math"
	"slices"
	"time"

	"skywalker/internal/engine"
)

// Result is one policy's outcome on one scenario. JSON field names are the
// `skywalker sim --format json` contract.
type Result struct {
	Policy    string         `json:"policy"`
	Requests  int            `json:"requests"`
	Completed int            `json:"completed"`
	Dropped   int            `json:"dropped"`
	Drops     map[string]int `json:"drop_reasons,omitempty"`
	Retried   int            `json:"retried"`

	TTFTP50Ms float64 `json:"ttft_p50_ms"`
	TTFTP90Ms float64 `json:"ttft_p90_ms"`
	TTFTP99Ms float64 `json:"ttft_p99_ms"`
	E2EP50Ms  float64 `json:"e2e_p50_ms"`
	E2EP99Ms  float64 `json:"e2e_p99_ms"`
	TPOTMs    float64 `json:"tpot_ms"` // mean time per output token after the first

	ThroughputTokS  float64 `json:"throughput_tok_s"`       // output tokens per second
	PaperThroughput float64 `json:"paper_throughput_tok_s"` // (input + 2·output) tokens per second, as the SkyWalker paper reports
	GoodputRPS      float64 `json:"goodput_rps"`            // requests meeting the TTFT SLO per second
	SLOAttainment   float64 `json:"slo_attainment"`         // share of all requests (dropped included) meeting the SLO
	CacheHitRate    float64 `json:"cache_hit_rate"`         // prompt tokens served from prefix caches
	CrossRegion     float64 `json:"cross_region_share"`     // completed requests served outside their ingress region

	Utilization map[string]float64     `json:"utilization"`
	Regions     map[string]RegionStats `json:"regions"`

	// RegionOrder names the regions in Series order; ReplicaCounts gives
	// each region's replicas (for utilization plots).
	RegionOrder   []string       `json:"-"`
	ReplicaCounts map[string]int `json:"-"`

	Preemptions int64   `json:"preemptions"` // engine preemptions (recomputations) over all replicas
	HoldP99Ms   float64 `json:"hold_p99_ms"` // time requests spent held in balancer queues, p99

	Makespan float64 `json:"makespan_s"`
	Events   int64   `json:"events"`

	Series *Series `json:"-"`
}

// RegionStats are per-region counts.
type RegionStats struct {
	Arrivals     int     `json:"arrivals"`
	ServedLocal  int     `json:"served_local"`
	ForwardedOut int     `json:"forwarded_out"`
	Received     int     `json:"received"`
	TTFTP50Ms    float64 `json:"ttft_p50_ms"`
	TTFTP99Ms    float64 `json:"ttft_p99_ms"`
}

type collector struct {
	slo                 time.Duration
	requests, completed int
	drops               map[string]int
	retried             int
	ttft, e2e, hold     []float64
	regionTTFT          map[int][]float64
	arrivals            map[int]int
	tpotSum             float64
	tpotN               int
	inTokens, outTokens int64
	cachedTokens        int64
	sloHits             int
	cross               int
	first, last         time.Duration
	started             bool
}

func newCollector(cfg Config) *collector {
	return &collector{slo: cfg.SLO, drops: map[string]int{}, regionTTFT: map[int][]float64{}, arrivals: map[int]int{}}
}

func (c *collector) arrival(sr *simRequest) {
	c.requests++
	c.arrivals[sr.ingress]++
	if !c.started {
		c.first, c.started = sr.arrival, true
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (c *collector) complete(sr *simRequest, s *engine.Sequence, ttft, e2e time.Duration) {
	c.completed++
	c.retried += min(sr.retries, 1)
	c.ttft = append(c.ttft, ms(ttft))
	c.hold = append(c.hold, ms(sr.dispatched-sr.arrival))
	c.e2e = append(c.e2e, ms(e2e))
	c.regionTTFT[sr.ingress] = append(c.regionTTFT[sr.ingress], ms(ttft))
	if s.Generated > 1 {
		c.tpotSum += ms(e2e-ttft) / float64(s.Generated-1)
		c.tpotN++
	}
	c.inTokens += int64(s.PromptTokens)
	c.outTokens += int64(s.Generated)
	c.cachedTokens += int64(s.CachedTokens)
	if c.slo <= 0 || ttft <= c.slo {
		c.sloHits++
	}
	if sr.served != sr.ingress {
		c.cross++
	}
	c.last = max(c.last, sr.arrival+e2e)
}

func (c *collector) drop(sr *simRequest, reason string) {
	c.drops[reason]++
	c.retried += min(sr.retries, 1)
}

// percentile is the nearest-rank percentile of sorted values.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// round keeps results readable and stable across platforms.
func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}

func (w *world) result() *Result {
	c := w.collect
	slices.Sort(c.ttft)
	slices.Sort(c.e2e)
	slices.Sort(c.hold)
	res := &Result{
		Policy: w.cfg.Policy, Requests: c.requests, Completed: c.completed, Retried: c.retried,
		TTFTP50Ms: round(percentile(c.ttft, 0.50), 1), TTFTP90Ms: round(percentile(c.ttft, 0.90), 1),
		TTFTP99Ms: round(percentile(c.ttft, 0.99), 1), E2EP50Ms: round(percentile(c.e2e, 0.50), 1),
		E2EP99Ms: round(percentile(c.e2e, 0.99), 1), Utilization: map[string]float64{}, Regions: map[string]RegionStats{},
		Events: w.events, Series: &w.series.Series, ReplicaCounts: map[string]int{},
	}
	for _, r := range w.regions {
		res.RegionOrder = append(res.RegionOrder, r.spec.Name)
		res.ReplicaCounts[r.spec.Name] = len(r.replicas)
	}
	for _, n := range c.drops {
		res.Dropped += n
	}
	if len(c.drops) > 0 {
		res.Drops = c.drops
	}
	if c.tpotN > 0 {
		res.TPOTMs = round(c.tpotSum/float64(c.tpotN), 2)
	}
	span := (c.last - c.first).Seconds()
	if span > 0 {
		res.Makespan = round(span, 1)
		res.ThroughputTokS = round(float64(c.outTokens)/span, 1)
		res.PaperThroughput = round(float64(c.inTokens+2*c.outTokens)/span, 1)
		res.GoodputRPS = round(float64(c.sloHits)/span, 3)
	}
	if c.requests > 0 {
		res.SLOAttainment = round(float64(c.sloHits)/float64(c.requests), 4)
	}
	if c.inTokens > 0 {
		res.CacheHitRate = round(float64(c.cachedTokens)/float64(c.inTokens), 4)
	}
	if c.completed > 0 {
		res.CrossRegion = round(float64(c.cross)/float64(c.completed), 4)
	}
	res.HoldP99Ms = round(percentile(c.hold, 0.99), 1)
	for i, r := range w.regions {
		res.Preemptions += r.preemptions
		for _, rp := range r.replicas {
			res.Preemptions += rp.eng.Stats().Preemptions
		}
		if span > 0 {
			res.Utilization[r.spec.Name] = round(r.busy.Seconds()/(span*float64(len(r.replicas))), 4)
		}
		tt := c.regionTTFT[i]
		slices.Sort(tt)
		res.Regions[r.spec.Name] = RegionStats{Arrivals: c.arrivals[i], ServedLocal: r.servedLocal, ForwardedOut: r.forwardedOut,
			Received: r.received, TTFTP50Ms: round(percentile(tt, 0.5), 1), TTFTP99Ms: round(percentile(tt, 0.99), 1)}
	}
	return res
}

// Series are per-region time series in fixed buckets, for plots.
type Series struct {
	Bucket    time.Duration
	Arrivals  [][]int           // [region][bucket]
	Forwarded [][]int           // requests forwarded out
	Queue     [][]int           // balancer queue length at the bucket's last summary
	Busy      [][]time.Duration // engine busy time started in the bucket
}

func newSeries(regions int, bucket time.Duration) *series {
	return &series{Series{Bucket: bucket, Arrivals: make([][]int, regions), Forwarded: make([][]int, regions),
		Queue: make([][]int, regions), Busy: make([][]time.Duration, regions)}}
}

type series struct{ Series }

func grow[T any](s []T, i int) []T {
	for len(s) <= i {
		s = append(s, *new(T))
	}
	return s
}

func (s *series) bucket(t time.Duration) int { return int(t / s.Bucket) }

func (s *series) arrival(r int, t time.Duration) {
	b := s.bucket(t)
	s.Arrivals[r] = grow(s.Arrivals[r], b)
	s.Arrivals[r][b]++
}

func (s *series) forward(r int, t time.Duration) {
	b := s.bucket(t)
	s.Forwarded[r] = grow(s.Forwarded[r], b)
	s.Forwarded[r][b]++
}

func (s *series) queue(r int, t time.Duration, n int) {
	b := s.bucket(t)
	s.Queue[r] = grow(s.Queue[r], b)
	s.Queue[r][b] = n
}

func (s *series) busy(r int, t, d time.Duration) {
	b := s.bucket(t)
	s.Busy[r] = grow(s.Busy[r], b)
	s.Busy[r][b] += d
}
