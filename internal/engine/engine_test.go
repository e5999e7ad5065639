package engine

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"skywalker/internal/policy"
	"skywalker/internal/profile"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func testProfile() profile.Profile {
	p, _ := profile.Lookup("llama3-8b-a100")
	return p
}

// seq is a sequence whose prompt is nUnits units of 128 tokens rooted at root.
func seq(id string, root uint64, nUnits, out int) *Sequence {
	units := make([]uint64, nUnits)
	h := root
	for i := range units {
		h = h*0x9E3779B97F4A7C15 + uint64(i) + 1
		units[i] = h
	}
	return &Sequence{ID: id, PromptTokens: nUnits * 128, MaxTokens: out, Units: units, UnitTokens: 128}
}

func ttft(s *Sequence) time.Duration { return s.FirstTokenAt.Sub(s.Arrival) }

func TestPrefixReuseShortensTTFTByTheCachedPrefill(t *testing.T) {
	p := testProfile()
	e := New(Config{Profile: p})
	first, again := seq("a", 1, 32, 4), seq("b", 1, 32, 4) // same 4,096-token prompt
	if _, err := RunVirtual(e, t0, []Arrival{{0, first}, {10 * time.Second, again}}, nil); err != nil {
		t.Fatal(err)
	}
	if first.CachedTokens != 0 || again.CachedTokens != 4095 {
		t.Fatalf("cached tokens %d then %d, want 0 then 4095 (all but the last token)", first.CachedTokens, again.CachedTokens)
	}
	// The saving is exactly the prefill of 4,095 tokens (their linear and
	// attention cost); 4096 tokens fit one 8192-token step, so each TTFT is
	// one step.
	saved := ttft(first) - ttft(again)
	want := p.StepTime(4096, 0, 0, 4096*4097/2.0) - p.StepTime(1, 0, 0, 4096)
	if d := saved - want; d < -time.Microsecond || d > time.Microsecond {
		t.Errorf("saved %v, want %v", saved, want)
	}
	st := e.Stats()
	if st.PrefixQueryTokens != 8192 || st.PrefixHitTokens != 4095 {
		t.Errorf("prefix queries %d hits %d, want 8192 and 4095", st.PrefixQueryTokens, st.PrefixHitTokens)
	}
}

func TestPartialPrefixReuse(t *testing.T) {
	e := New(Config{Profile: testProfile()})
	a := seq("a", 1, 10, 2)
	b := seq("b", 1, 20, 2) // extends a's prompt: 10 units shared
	if _, err := RunVirtual(e, t0, []Arrival{{0, a}, {time.Second, b}}, nil); err != nil {
		t.Fatal(err)
	}
	if b.CachedTokens != 1280 {
		t.Errorf("b reused %d tokens, want the 1,280 of a's prompt", b.CachedTokens)
	}
}

func TestQueueingAppearsWhenArrivalsExceedCapacity(t *testing.T) {
	// One engine, four sequences at a time; arrivals faster than it serves.
	run := func(gap time.Duration) time.Duration {
		e := New(Config{Profile: testProfile(), MaxNumSeqs: 4})
		var arr []Arrival
		var seqs []*Sequence
		for i := range 40 {
			s := seq(fmt.Sprint(i), uint64(i+100), 4, 64)
			seqs = append(seqs, s)
			arr = append(arr, Arrival{time.Duration(i) * gap, s})
		}
		if _, err := RunVirtual(e, t0, arr, nil); err != nil {
			t.Fatal(err)
		}
		return ttft(seqs[len(seqs)-1])
	}
	relaxed, overloaded := run(2*time.Second), run(10*time.Millisecond)
	if overloaded < 10*relaxed {
		t.Errorf("last TTFT %v overloaded vs %v relaxed: want queueing to dominate", overloaded, relaxed)
	}
}

func TestKVExhaustionPreempts(t *testing.T) {
	// 40 blocks of 16 tokens = 640 tokens; three sequences of 128 + 120
	// tokens each fit at admission but not once they have all decoded.
	e := New(Config{Profile: testProfile(), KVBlocks: 40})
	var arr []Arrival
	var seqs []*Sequence
	for i := range 3 {
		s := seq(fmt.Sprint(i), uint64(i+1), 1, 120)
		seqs = append(seqs, s)
		arr = append(arr, Arrival{0, s})
	}
	if _, err := RunVirtual(e, t0, arr, nil); err != nil {
		t.Fatal(err)
	}
	if e.Stats().Preemptions == 0 {
		t.Fatal("no preemption though the cache cannot hold all three")
	}
	for _, s := range seqs {
		if s.Generated != 120 || s.FinishedAt.IsZero() {
			t.Errorf("%s generated %d, finished %v: a preempted sequence must still complete", s.ID, s.Generated, s.FinishedAt)
		}
	}
	if e.cache.usedPrivate != 0 || e.cache.inUse() != 0 {
		t.Errorf("blocks leaked: private %d in use %d", e.cache.usedPrivate, e.cache.inUse())
	}
}

func TestEvictionIsLRUAndKeepsRoots(t *testing.T) {
	e := New(Config{Profile: testProfile(), KVBlocks: 64}) // 1,024 tokens
	a := seq("a", 1, 4, 1)                                 // 512 tokens, 32 blocks
	b := seq("b", 2, 4, 1)
	c := seq("c", 3, 2, 1) // needs 16 blocks: evicts a's two deepest units (least recent)
	again := seq("a2", 1, 4, 1)
	if _, err := RunVirtual(e, t0, []Arrival{{0, a}, {time.Second, b}, {2 * time.Second, c}, {3 * time.Second, again}}, nil); err != nil {
		t.Fatal(err)
	}
	if again.CachedTokens != 256 {
		t.Errorf("a's prompt kept %d cached tokens, want its two root units (256 tokens) kept", again.CachedTokens)
	}
	if e.Stats().Evictions == 0 {
		t.Error("no eviction recorded")
	}
}

func TestAbortFreesBlocks(t *testing.T) {
	e := New(Config{Profile: testProfile()})
	s := seq("a", 1, 8, 100)
	if err := e.Add(s); err != nil {
		t.Fatal(err)
	}
	d, _ := e.BeginStep(t0)
	e.EndStep(t0.Add(d), NopSink{})
	if e.Running() != 1 || e.KVUsage() == 0 {
		t.Fatal("sequence should be running and holding blocks")
	}
	e.Abort(s)
	if e.Running() != 0 || e.KVUsage() != 0 || e.cache.usedPrivate != 0 {
		t.Errorf("after abort: running %d usage %v private %d", e.Running(), e.KVUsage(), e.cache.usedPrivate)
	}
	waiting := seq("w", 2, 1, 1)
	_ = e.Add(waiting)
	e.Abort(waiting)
	if e.Waiting() != 0 {
		t.Error("aborted waiting sequence still queued")
	}
}

func TestAddRejectsWhatCanNeverRun(t *testing.T) {
	e := New(Config{Profile: testProfile(), KVBlocks: 10})
	if err := e.Add(seq("big", 1, 2, 1)); err == nil {
		t.Error("a 256-token prompt cannot fit 160 tokens of cache")
	}
	if err := e.Add(&Sequence{ID: "empty", PromptTokens: 0, MaxTokens: 1}); err == nil {
		t.Error("an empty prompt must be rejected")
	}
}

func TestContinuousBatchingSharesSteps(t *testing.T) {
	e := New(Config{Profile: testProfile()})
	a, b := seq("a", 1, 2, 50), seq("b", 2, 2, 50)
	end, err := RunVirtual(e, t0, []Arrival{{0, a}, {0, b}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st := e.Stats(); st.Steps != 50 {
		t.Errorf("two sequences of 50 tokens took %d steps, want 50 (batched)", st.Steps)
	}
	if !a.FinishedAt.Equal(end) || !b.FinishedAt.Equal(end) {
		t.Error("both should finish on the last step")
	}
}

func TestChunkedPrefillSplitsLongPrompts(t *testing.T) {
	e := New(Config{Profile: testProfile(), MaxNumBatchedTokens: 1024})
	long := seq("long", 1, 40, 1) // 5,120 tokens: 5 chunks of 1,024
	if _, err := RunVirtual(e, t0, []Arrival{{0, long}}, nil); err != nil {
		t.Fatal(err)
	}
	if st := e.Stats(); st.Steps != 5 {
		t.Errorf("steps %d, want 5 chunks", st.Steps)
	}
}

func TestDeterministic(t *testing.T) {
	run := func() []time.Duration {
		rng := rand.New(rand.NewPCG(1, 2))
		e := New(Config{Profile: testProfile(), KVBlocks: 3000})
		var arr []Arrival
		var seqs []*Sequence
		for i := range 300 {
			s := seq(fmt.Sprint(i), uint64(rng.IntN(20)), 1+rng.IntN(30), 1+rng.IntN(200))
			seqs = append(seqs, s)
			arr = append(arr, Arrival{time.Duration(rng.IntN(60_000)) * time.Millisecond, s})
		}
		if _, err := RunVirtual(e, t0, arr, nil); err != nil {
			t.Fatal(err)
		}
		var out []time.Duration
		for _, s := range seqs {
			out = append(out, ttft(s), s.FinishedAt.Sub(s.Arrival))
		}
		return out
	}
	a, b := run(), run()
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Error("same input, different timings")
	}
	sorted := append([]time.Duration(nil), a...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	if sorted[0] <= 0 {
		t.Error("non-positive latency")
	}
}

func TestProfiles(t *testing.T) {
	for _, name := range profile.Names() {
		p, err := profile.Lookup(name)
		if err != nil || p.Name != name || p.StepOverhead <= 0 || p.KVBlocks <= 0 {
			t.Errorf("%s: %+v %v", name, p, err)
		}
		if pp := policy.PrefillOf(p); pp.Time(4096) <= pp.Time(1024) {
			t.Errorf("%s: prefill estimate not increasing", name)
		}
	}
	if _, err := profile.Lookup("gpt-5-tpu"); err == nil {
		t.Error("unknown profile must fail")
	}
	if p, _ := profile.Lookup(""); p.Name != profile.Default {
		t.Error("empty name gives the default")
	}
	// The L4 profile decodes one sequence at ~14 tok/s, as memory bandwidth allows.
	l4, _ := profile.Lookup("llama3-8b-l4")
	if itl := l4.StepTime(0, 1, 1000, 0); itl < 60*time.Millisecond || itl > 80*time.Millisecond {
		t.Errorf("L4 batch-1 ITL %v, want ~70ms", itl)
	}
}

// refill re-adds a fresh sequence whenever one finishes, keeping the batch full.
type refill struct {
	e *Engine
	n int
}

func (r *refill) FirstToken(*Sequence, time.Time) {}
func (r *refill) Token(*Sequence, time.Time)      {}
func (r *refill) Finished(*Sequence, time.Time) {
	r.n++
	if err := r.e.Add(seq(fmt.Sprint(r.n), uint64(r.n%50), 4, 128)); err != nil {
		panic(err)
	}
}

// BenchmarkEngineStep is the model's cost per simulated step in steady
// state: 256 sequences of 512-token prompts (50 shared prefixes) and 128
// output tokens, each replaced by a new one when it finishes.
func BenchmarkEngineStep(b *testing.B) {
	e := New(Config{Profile: testProfile()})
	sink := &refill{e: e}
	for i := range 256 {
		if err := e.Add(seq(fmt.Sprint(i), uint64(i%50), 4, 1+i%128)); err != nil {
			b.Fatal(err)
		}
	}
	now := t0
	step := func() {
		d, ok := e.BeginStep(now)
		if !ok {
			b.Fatal("engine went idle")
		}
		now = now.Add(d)
		e.EndStep(now, sink)
	}
	for range 500 {
		step()
	}
	b.ResetTimer()
	for b.Loop() {
		step()
	}
	b.ReportMetric(float64(e.Running()), "seqs/step")
}

// TestQueueCostsAreTheFittedOnes keeps each profile's QueuePerToken (GORGO's
// c_queue) within 25% of what FitQueueCost measures on the model: change
// the model, refit the constant.
func TestQueueCostsAreTheFittedOnes(t *testing.T) {
	for _, name := range profile.Names() {
		p, _ := profile.Lookup(name)
		fit, err := FitQueueCost(p)
		if err != nil {
			t.Fatal(err)
		}
		if r := float64(p.QueuePerToken) / float64(fit); r < 0.75 || r > 1.25 {
			t.Errorf("%s: QueuePerToken %v, the model fits %v: refit it", name, p.QueuePerToken, fit)
		}
	}
}

// TestDecodeIsARoofline: a decode step is memory-bound until the batch's
// compute exceeds reading the weights and KV, then compute-bound — never
// the sum of the two.
func TestDecodeIsARoofline(t *testing.T) {
	p, _ := profile.Lookup("llama3-8b-a100")
	tests := []struct {
		name       string
		batch, ctx int
		want       time.Duration
	}{
		{"batch 1 reads the weights", 1, 0, p.StepOverhead},
		{"batch 64 at 1k context: weights and KV", 64, 1024, p.StepOverhead + time.Duration(64*1024*p.AttendPerKVToken)},
		{"batch 256, no context: compute", 256, 0, 256 * p.DecodePerSeq},
	}
	for _, tc := range tests {
		if got := p.StepTime(0, tc.batch, tc.batch*tc.ctx, 0); got != tc.want {
			t.Errorf("%s: step %v, want %v", tc.name, got, tc.want)
		}
	}
	// Anchor: Llama-3.1-8B on one H100 reaches ~12,500 output tok/s at high
	// concurrency (vLLM V1); 256 sequences of 1k context here.
	h, _ := profile.Lookup("llama3-8b-h100")
	if tps := 256 / h.StepTime(0, 256, 256*1024, 0).Seconds(); tps < 10_000 || tps > 15_000 {
		t.Errorf("H100 decode at 256 × 1k: %.0f tok/s, published ~12,500", tps)
	}
}
