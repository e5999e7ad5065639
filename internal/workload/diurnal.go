package workload

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"skywalker/internal/request"
)

// RegionLoad is one region's share of a diurnal workload.
type RegionLoad struct {
	Name         string
	UTCOffset    float64 // hours: -5 for us-east, +9 for ap-east
	Weight       float64 // multiplies the peak rate; 0 means 1
	Jurisdiction string  // for requests with data residency
}

// Burst multiplies demand for a while: one region's (the burst
// scenario), one tenant's in every region (the noisy neighbour), or one
// tenant's in one region.
type Burst struct {
	Region     string // "" with a Tenant: every region
	Tenant     string // "" for every tenant; else "tenant-<i>"
	At         time.Duration
	Duration   time.Duration
	Multiplier float64
}

func (b Burst) active(t time.Duration) bool { return t >= b.At && t < b.At+b.Duration }

// Diurnal describes a multi-region workload whose demand follows each
// region's 24-hour curve: a raised cosine peaking at PeakHour local time
// with the night valley at ValleyRatio of the peak. A day is compressed to
// Day of simulated time; service times are not compressed.
//
// Requests come from sessions: multi-turn conversations whose every turn's
// prompt extends the previous turn's prompt and answer (prefixes shared
// within a user), opened under one of Tenants shared system prompts
// (prefixes shared across users and regions).
type Diurnal struct {
	Regions     []RegionLoad
	Day         time.Duration
	Duration    time.Duration // arrivals stop after this
	StartHour   float64       // UTC hour at time zero
	PeakRPS     float64       // requests/s of one region at its peak
	ValleyRatio float64       // night rate over peak rate, in (0, 1]
	PeakHour    float64       // local hour of the peak; default 14
	Bursts      []Burst

	MeanTurns          float64       // mean turns per session (geometric); >= 1
	ThinkTime          time.Duration // mean gap between turns
	FollowUpShare      float64       // a later turn's new message, as a fraction of a drawn prompt length; default 0.25
	Tenants            int           // tenants, each with its own shared system prompt; 0 for none
	TenantPromptTokens int
	// TenantShares weighs how often a new session belongs to each tenant
	// (len Tenants); empty for equal shares.
	TenantShares []float64
	// CriticalShare and SheddableShare are the fractions of sessions whose
	// requests are of those priority classes; the rest are standard.
	CriticalShare, SheddableShare float64
	ResidencyShare                float64 // fraction of sessions that must stay in their region's jurisdiction
	// ResponsesShare is the fraction of sessions that are Responses API
	// chains: each turn after the first names the previous one
	// (request.PreviousResponse: the session key) and asks it stored
	// (request.Store), so it must go where the previous one was served.
	// At 0 or 1 nothing is drawn: the arrivals are those of the same
	// workload without chains.
	ResponsesShare  float64
	MaxPromptTokens int // a session ends before its prompt would exceed this
	MaxOutputTokens int // drawn outputs are capped here; 0 for no cap
	Lengths         *LengthDist
	BlockTokens     int
	Seed            uint64
	HashSeed        uint64 // request hash chain seed; default request.DefaultSeed
	// Models, if set, are the models sessions ask for, each session one
	// (and one adapter) for all its turns; empty: every request is for the
	// unnamed model "" (and draws nothing: the stream is as it always was).
	Models []ModelMix
}

// ModelMix is one model's part of a workload.
type ModelMix struct {
	Name  string
	Share float64 // weight of new sessions
	// Adapters is how many LoRA adapters the model has (named
	// NAME-lora-1 … NAME-lora-N), of Zipf popularity with exponent ZipfS:
	// adapter k is chosen with weight 1/k^ZipfS. BaseShare of the
	// sessions use the base model itself.
	Adapters  int
	ZipfS     float64
	BaseShare float64
}

// AdapterName is the name of model's k-th adapter (k from 1).
func AdapterName(model string, k int) string { return model + "-lora-" + strconv.Itoa(k) }

func (d *Diurnal) validate() error {
	switch {
	case len(d.Regions) == 0:
		return errors.New("diurnal workload: no regions")
	case d.Day <= 0 || d.Duration <= 0:
		return errors.New("diurnal workload: day and duration must be positive")
	case d.PeakRPS <= 0:
		return errors.New("diurnal workload: peak rate must be positive")
	case d.ValleyRatio <= 0 || d.ValleyRatio > 1:
		return errors.New("diurnal workload: valley ratio must be in (0, 1]")
	case d.ResponsesShare < 0 || d.ResponsesShare > 1:
		return errors.New("diurnal workload: responses share must be in [0, 1]")
	case d.MeanTurns < 1:
		return errors.New("diurnal workload: mean turns must be at least 1")
	case d.BlockTokens < 1:
		return errors.New("diurnal workload: block tokens must be positive")
	case d.Lengths == nil:
		return errors.New("diurnal workload: no length distribution")
	case d.CriticalShare < 0 || d.SheddableShare < 0 || d.CriticalShare+d.SheddableShare > 1:
		return errors.New("diurnal workload: priority shares must be non-negative and sum to at most 1")
	case len(d.TenantShares) > 0 && len(d.TenantShares) != d.Tenants:
		return fmt.Errorf("diurnal workload: %d tenant shares for %d tenants", len(d.TenantShares), d.Tenants)
	}
	for i, m := range d.Models {
		if !(m.Share > 0) || m.Adapters < 0 || m.ZipfS < 0 || m.BaseShare < 0 || m.BaseShare > 1 || math.IsInf(m.Share, 0) {
			return fmt.Errorf("diurnal workload: model %d (%q) needs a positive share, adapters >= 0, zipf_s >= 0 and base_share in [0, 1]", i, m.Name)
		}
	}
	for i, s := range d.TenantShares {
		if s < 0 || math.IsNaN(s) || math.IsInf(s, 0) {
			return fmt.Errorf("diurnal workload: tenant share %d is %v", i, s)
		}
	}
	return nil
}

// tenantName is tenant i's key, as requests carry it.
func tenantName(i int) string { return "tenant-" + strconv.Itoa(i) }

// share is tenant i's share of new sessions, unnormalised.
func (d *Diurnal) share(i int) float64 {
	if len(d.TenantShares) == 0 {
		return 1
	}
	return d.TenantShares[i]
}

// tenantWeights are each tenant's weight among region i's new sessions at
// t (share × its active bursts' multipliers), and their sum over the sum
// of plain shares: how much tenant bursts raise the region's rate.
func (d *Diurnal) tenantWeights(region int, t time.Duration, into []float64) ([]float64, float64) {
	into = into[:0]
	var total, plain float64
	for k := range d.Tenants {
		w := d.share(k)
		plain += w
		for _, b := range d.Bursts {
			if b.Tenant == tenantName(k) && (b.Region == "" || b.Region == d.Regions[region].Name) && b.active(t) {
				w *= b.Multiplier
			}
		}
		into = append(into, w)
		total += w
	}
	if plain <= 0 {
		return into, 1
	}
	return into, total / plain
}

// Shape is the demand curve at a local hour, in (0, 1], 1 at the peak.
func (d *Diurnal) Shape(localHour float64) float64 {
	peak := d.PeakHour
	if peak == 0 {
		peak = 14
	}
	return d.ValleyRatio + (1-d.ValleyRatio)*(1+math.Cos(2*math.Pi*(localHour-peak)/24))/2
}

// Hour is the UTC hour of day at offset t.
func (d *Diurnal) Hour(t time.Duration) float64 {
	return math.Mod(d.StartHour+24*float64(t)/float64(d.Day), 24)
}

// Rate is region i's request rate (requests/s) at offset t.
func (d *Diurnal) Rate(i int, t time.Duration) float64 {
	r := d.Regions[i]
	w := r.Weight
	if w == 0 {
		w = 1
	}
	rate := d.PeakRPS * w * d.Shape(math.Mod(d.Hour(t)+r.UTCOffset+48, 24))
	for _, b := range d.Bursts {
		if b.Tenant == "" && b.Region == r.Name && b.active(t) {
			rate *= b.Multiplier
		}
	}
	if d.Tenants > 0 && d.tenantBursts() {
		_, f := d.tenantWeights(i, t, nil)
		rate *= f
	}
	return rate
}

// tenantBursts reports whether any burst is a tenant's.
func (d *Diurnal) tenantBursts() bool {
	for _, b := range d.Bursts {
		if b.Tenant != "" {
			return true
		}
	}
	return false
}

// maxRate bounds Rate for region i over all time (for thinning).
func (d *Diurnal) maxRate(i int) float64 {
	w := d.Regions[i].Weight
	if w == 0 {
		w = 1
	}
	m := 1.0
	for _, b := range d.Bursts {
		if b.Tenant == "" && b.Region == d.Regions[i].Name {
			m *= max(b.Multiplier, 1)
		}
	}
	// Tenant bursts raise a region's rate by at most the largest
	// multiplier applied to every tenant.
	tm := 1.0
	for _, b := range d.Bursts {
		if b.Tenant != "" && (b.Region == "" || b.Region == d.Regions[i].Name) {
			tm *= max(b.Multiplier, 1)
		}
	}
	return d.PeakRPS * w * m * tm
}

// Source returns the workload's arrivals in time order. Each call starts a
// fresh, identical stream.
func (d Diurnal) Source() (Source, error) {
	if err := d.validate(); err != nil {
		return nil, err
	}
	if d.HashSeed == 0 {
		d.HashSeed = request.DefaultSeed
	}
	if d.FollowUpShare <= 0 {
		d.FollowUpShare = 0.25
	}
	g := &diurnalSource{d: &d, rng: rand.New(rand.NewPCG(d.Seed, d.Seed^0xd1))}
	blocks := d.TenantPromptTokens / d.BlockTokens
	for t := range d.Tenants {
		chain := make([]uint64, blocks)
		parent := d.HashSeed
		for i := range chain {
			parent = request.ChainBlockID(parent, uint64(1)<<62|uint64(t)<<32|uint64(i), d.HashSeed)
			chain[i] = parent
		}
		g.tenants = append(g.tenants, chain)
	}
	for _, m := range d.Models {
		g.modelTotal += m.Share
		var cdf []float64
		total := 0.0
		for k := 1; k <= m.Adapters; k++ {
			total += 1 / math.Pow(float64(k), m.ZipfS)
			cdf = append(cdf, total)
		}
		g.adapterCDF = append(g.adapterCDF, cdf)
	}
	for i := range d.Regions {
		g.scheduleNewSession(i, 0)
	}
	return g, nil
}

// pickModel draws a new session's model and adapter.
func (g *diurnalSource) pickModel(s *session) {
	x := g.rng.Float64() * g.modelTotal
	i := 0
	for ; i < len(g.d.Models)-1 && x >= g.d.Models[i].Share; i++ {
		x -= g.d.Models[i].Share
	}
	m := g.d.Models[i]
	s.model = m.Name
	if cdf := g.adapterCDF[i]; len(cdf) > 0 && g.rng.Float64() >= m.BaseShare {
		k, _ := slices.BinarySearch(cdf, g.rng.Float64()*cdf[len(cdf)-1])
		s.adapter = AdapterName(m.Name, min(k, len(cdf)-1)+1)
	}
}

type diurnalSource struct {
	d       *Diurnal
	rng     *rand.Rand
	pending eventHeap
	tenants [][]uint64
	weights []float64 // pickTenant's scratch
	// modelTotal and adapterCDF are Models' total share and each model's
	// cumulative adapter weights.
	modelTotal float64
	adapterCDF [][]float64
	sessions   uint64
	requests   uint64
	order      uint64
}

type session struct {
	id        uint64
	region    int
	chain     []uint64 // chained hashes of the conversation's complete blocks
	tokens    int      // conversation tokens so far (tenant prompt, turns, answers)
	turns     int      // turns emitted so far
	turnsLeft int
	residency string
	chained   bool   // a Responses chain (ResponsesShare)
	tenant    string // "" without tenants
	class     request.Class
	model     string // base model and LoRA adapter ("" and "" without Models)
	adapter   string
}

type event struct {
	at     time.Duration
	order  uint64 // tie-break: insertion order, for determinism
	region int    // new session in this region, if sess is nil
	sess   *session
}

type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].order < h[j].order
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

func (g *diurnalSource) push(e event) {
	g.order++
	e.order = g.order
	heap.Push(&g.pending, e)
}

// scheduleNewSession draws the next session start in region i after t by
// thinning a Poisson process at the region's maximum session rate.
func (g *diurnalSource) scheduleNewSession(i int, t time.Duration) {
	lmax := g.d.maxRate(i) / g.d.MeanTurns
	for {
		t += time.Duration(g.rng.ExpFloat64() / lmax * float64(time.Second))
		if t >= g.d.Duration {
			return
		}
		if g.rng.Float64()*lmax <= g.d.Rate(i, t)/g.d.MeanTurns {
			g.push(event{at: t, region: i})
			return
		}
	}
}

// Next implements Source.
func (g *diurnalSource) Next() (Arrival, bool) {
	for len(g.pending) > 0 {
		e := heap.Pop(&g.pending).(event)
		s := e.sess
		if s == nil {
			s = g.newSession(e.region, e.at)
			g.scheduleNewSession(e.region, e.at)
		}
		if a, ok := g.turn(s, e.at); ok {
			return a, true
		}
	}
	return Arrival{}, false
}

func (g *diurnalSource) newSession(region int, at time.Duration) *session {
	g.sessions++
	s := &session{id: g.sessions, region: region}
	// Geometric number of turns with the configured mean.
	p := 1 / g.d.MeanTurns
	s.turnsLeft = 1
	for g.rng.Float64() > p {
		s.turnsLeft++
	}
	if len(g.tenants) > 0 {
		t := g.pickTenant(region, at)
		s.chain = append(s.chain, g.tenants[t]...)
		s.tokens = len(s.chain) * g.d.BlockTokens
		s.tenant = tenantName(t)
	}
	if g.rng.Float64() < g.d.ResidencyShare {
		s.residency = g.d.Regions[region].Jurisdiction
	}
	if g.d.CriticalShare > 0 || g.d.SheddableShare > 0 {
		switch x := g.rng.Float64(); {
		case x < g.d.CriticalShare:
			s.class = request.Critical
		case x < g.d.CriticalShare+g.d.SheddableShare:
			s.class = request.Sheddable
		}
	}
	if len(g.d.Models) > 0 {
		g.pickModel(s)
	}
	switch share := g.d.ResponsesShare; {
	case share >= 1:
		s.chained = true
	case share > 0:
		s.chained = g.rng.Float64() < share
	}
	return s
}

// pickTenant draws a new session's tenant by the tenants' weights at.
func (g *diurnalSource) pickTenant(region int, at time.Duration) int {
	if len(g.d.TenantShares) == 0 && !g.d.tenantBursts() {
		return g.rng.IntN(len(g.tenants)) // equal shares: one draw, as always
	}
	var total float64
	g.weights, _ = g.d.tenantWeights(region, at, g.weights)
	for _, w := range g.weights {
		total += w
	}
	x := g.rng.Float64() * total
	for k, w := range g.weights {
		if x < w {
			return k
		}
		x -= w
	}
	return len(g.weights) - 1
}

// extend appends n tokens of new conversation text to the session.
func (g *diurnalSource) extend(s *session, n int) {
	before := s.tokens / g.d.BlockTokens
	s.tokens += n
	parent := g.d.HashSeed
	if len(s.chain) > 0 {
		parent = s.chain[len(s.chain)-1]
	}
	for b := before; b < s.tokens/g.d.BlockTokens; b++ {
		parent = request.ChainBlockID(parent, s.id<<24|uint64(b), g.d.HashSeed)
		s.chain = append(s.chain, parent)
	}
}

// turn emits one request of the session and schedules its next turn.
func (g *diurnalSource) turn(s *session, at time.Duration) (Arrival, bool) {
	in, out := g.d.Lengths.Sample(g.rng)
	if s.turns > 0 {
		in = max(int(float64(in)*g.d.FollowUpShare), 1)
	}
	if g.d.MaxOutputTokens > 0 {
		out = min(out, g.d.MaxOutputTokens)
	}
	if g.d.MaxPromptTokens > 0 && s.tokens+in > g.d.MaxPromptTokens {
		if s.turns > 0 {
			return Arrival{}, false // the conversation is full: the session ends
		}
		in = max(g.d.MaxPromptTokens-s.tokens, 1)
	}
	g.extend(s, in)
	g.requests++
	req := &request.Request{
		ID:           "r" + strconv.FormatUint(g.requests, 10),
		Region:       g.d.Regions[s.region].Name,
		PromptTokens: s.tokens,
		MaxTokens:    max(out, 1),
		Blocks:       s.chain[:len(s.chain):len(s.chain)], // shares the session's backing array; never written again
		BlockTokens:  g.d.BlockTokens,
		Session:      fmt.Sprintf("s%d", s.id),
		Residency:    s.residency,
		Tenant:       s.tenant,
		Class:        s.class,
		Store:        s.chained,
	}
	if s.chained && s.turns > 0 {
		req.PreviousResponse = req.Session // the previous turn's response, by its session
	}
	if s.model != "" || s.adapter != "" {
		// Salted by the model: a copy, since the chain is the session's.
		req.Model = s.model
		if s.adapter != "" {
			req.Model = s.adapter
		}
		req.Blocks = slices.Clone(req.Blocks)
		req.SetPool(s.model, s.adapter)
	}
	g.extend(s, out) // the answer becomes part of the next turn's prompt
	s.turns++
	s.turnsLeft--
	if next := at + time.Duration(g.rng.ExpFloat64()*float64(g.d.ThinkTime)); s.turnsLeft > 0 && next < g.d.Duration {
		g.push(event{at: next, sess: s})
	}
	return Arrival{At: at, Region: req.Region, Request: req}, true
}
