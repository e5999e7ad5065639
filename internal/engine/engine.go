package engine

import (
	"errors"
	"fmt"
	"time"

	"skywalker/internal/kvevents"
	"skywalker/internal/profile"
)

// Config sizes one engine. Zero fields take the profile's defaults.
type Config struct {
	Profile             profile.Profile
	KVBlocks            int
	BlockSize           int
	MaxNumSeqs          int
	MaxNumBatchedTokens int
	// MaxModelLen bounds prompt + output tokens of one sequence; default
	// the KV capacity (a sequence must fit in the cache on its own).
	MaxModelLen int
	// MaxLoRAs is how many LoRA adapters the engine holds at once (vLLM's
	// --max-loras): a sequence of an adapter that is not resident waits
	// until a slot is free of running sequences, whose least recently
	// used adapter is then evicted and the new one loaded, which adds
	// LoRALoad to that step (vLLM loads adapters before the forward pass,
	// so the whole batch waits). Zero: adapters are not modelled (a
	// sequence's adapter costs nothing).
	MaxLoRAs int
	LoRALoad time.Duration
	// KVEvents makes the engine record what its prefix cache stores and
	// evicts, as vLLM's KV events say it (TakeKVEvents): each run of
	// prompt units a sequence registers is one BlockStored (the units are
	// its blocks, of UnitTokens tokens, chained from the unit before), each
	// evicted unit a BlockRemoved.
	KVEvents bool
}

func (c Config) resolved() Config {
	p := c.Profile
	if c.KVBlocks <= 0 {
		c.KVBlocks = p.KVBlocks
	}
	if c.BlockSize <= 0 {
		c.BlockSize = max(p.BlockSize, 1)
	}
	if c.MaxNumSeqs <= 0 {
		c.MaxNumSeqs = max(p.MaxNumSeqs, 1)
	}
	if c.MaxNumBatchedTokens <= 0 {
		c.MaxNumBatchedTokens = max(p.MaxNumBatchedTokens, 1)
	}
	if capacity := c.KVBlocks * c.BlockSize; c.MaxModelLen <= 0 || c.MaxModelLen > capacity {
		c.MaxModelLen = capacity
	}
	return c
}

// Sequence is one request inside the engine. Drivers fill the exported
// input fields before Add and read the outcome fields after events.
type Sequence struct {
	ID           string
	PromptTokens int
	MaxTokens    int      // tokens to generate, at least 1
	Units        []uint64 // chained prefix hashes (request.Request.Blocks); may be empty
	UnitTokens   int      // tokens per unit (request.Request.BlockTokens)
	// Adapter is the LoRA adapter the sequence runs with; "" for the base
	// model. (Its prefix units are salted by it: see request.SetPool.)
	Adapter string
	Arrival time.Time
	// Data is the driver's own payload; the engine never touches it.
	Data any

	// Outcome.
	CachedTokens int // prompt tokens served from the prefix cache at first admission
	Generated    int
	// StartedAt is when its first step was scheduled: the end of its wait
	// in the engine's queue and the start of its prefill.
	StartedAt    time.Time
	FirstTokenAt time.Time
	FinishedAt   time.Time
	Preemptions  int

	state         seqState
	computed      int // tokens whose KV is in the cache
	prefillTarget int // tokens to prefill before decoding: the prompt, plus output so far after a preemption
	refs          []*unit
	private       int // KV blocks held privately
	scheduled     int // tokens in the current step
	admitted      bool
	holdsLoRA     bool // it counts as a user of its adapter's slot
}

type seqState uint8

const (
	stateNew seqState = iota
	stateWaiting
	stateRunning
	stateFinished
	stateAborted
)

// Sink receives the events of a step. Calls happen inside EndStep, in
// batch order.
type Sink interface {
	// FirstToken: the sequence's prefill completed and its first output
	// token was sampled.
	FirstToken(s *Sequence, now time.Time)
	// Token: one more output token.
	Token(s *Sequence, now time.Time)
	// Finished: the sequence generated its last token and left the engine.
	Finished(s *Sequence, now time.Time)
}

// Stats are cumulative counters, the model's side of the engine's metrics.
type Stats struct {
	Steps             int64
	BusyTime          time.Duration
	PromptTokens      int64 // prompt tokens of admitted sequences
	GenerationTokens  int64
	PrefixQueryTokens int64 // prompt tokens looked up in the prefix cache
	PrefixHitTokens   int64 // of those, tokens found cached
	Preemptions       int64
	Evictions         int64 // prefix units evicted to make room
	Finished          int64
	Aborted           int64
	LoRALoads         int64 // adapters loaded into a slot
}

// Engine is one simulated inference server.
type Engine struct {
	cfg      Config
	cache    kvCache
	waiting  []*Sequence // FIFO from waitHead; preempted sequences rejoin at the front
	waitHead int
	running  []*Sequence // in admission order; preemption takes from the tail
	batch    []*Sequence
	// batchTokens is the tokens the running step scheduled.
	batchTokens int
	busy        bool
	stats       Stats
	loras       []loraSlot // resident adapters, at most MaxLoRAs
	loraClock   int64      // orders the slots' last use
	loaded      int        // adapters loaded for the step being formed
	kvEvents    []kvevents.Event
}

// loraSlot is one resident LoRA adapter.
type loraSlot struct {
	name     string
	users    int   // running sequences with it
	lastUsed int64 // loraClock at its last use
}

// New returns an idle engine.
func New(cfg Config) *Engine {
	cfg = cfg.resolved()
	e := &Engine{cfg: cfg, cache: newKVCache(cfg.KVBlocks)}
	e.cache.trackEvictions = cfg.KVEvents
	return e
}

// Config returns the resolved configuration.
func (e *Engine) Config() Config { return e.cfg }

// ErrTooLong is wrapped by Add when prompt + output cannot fit the model.
var ErrTooLong = errors.New("sequence longer than the model's maximum length")

// Add queues a new sequence. It fails if the sequence can never run.
func (e *Engine) Add(s *Sequence) error {
	if s.state != stateNew {
		return fmt.Errorf("sequence %s was already added", s.ID)
	}
	if s.PromptTokens < 1 || s.MaxTokens < 1 {
		return fmt.Errorf("sequence %s: prompt and output must each be at least one token", s.ID)
	}
	if n := s.PromptTokens + s.MaxTokens; n > e.cfg.MaxModelLen {
		return fmt.Errorf("%w: %d tokens (%d prompt + %d output) > %d", ErrTooLong, n, s.PromptTokens, s.MaxTokens, e.cfg.MaxModelLen)
	}
	s.prefillTarget = s.PromptTokens
	s.state = stateWaiting
	e.waiting = append(e.waiting, s)
	return nil
}

// Abort removes a sequence wherever it is and frees its blocks (a client
// went away). Aborting a finished or unknown sequence does nothing.
func (e *Engine) Abort(s *Sequence) {
	switch s.state {
	case stateWaiting:
		for i := e.waitHead; i < len(e.waiting); i++ {
			if e.waiting[i] == s {
				e.waiting = append(e.waiting[:i], e.waiting[i+1:]...)
				break
			}
		}
	case stateRunning:
		e.release(s)
	default:
		return
	}
	s.state = stateAborted
	e.stats.Aborted++
	if !e.busy {
		e.compactRunning()
	}
}

// ForEach calls fn for every sequence in the engine, running then waiting
// (a crashed replica's driver uses it to recover or fail its requests).
func (e *Engine) ForEach(fn func(*Sequence)) {
	for _, s := range e.running {
		if s.state == stateRunning {
			fn(s)
		}
	}
	for _, s := range e.waiting[e.waitHead:] {
		fn(s)
	}
}

// BudgetShare is the share of the step token budget (MaxNumBatchedTokens)
// the running step scheduled: its utilization of the engine's token
// capacity, in [0, 1]; 0 when no step runs.
func (e *Engine) BudgetShare() float64 {
	if !e.busy {
		return 0
	}
	return float64(e.batchTokens) / float64(e.cfg.MaxNumBatchedTokens)
}

// Busy reports whether a step is in progress (between BeginStep and EndStep).
func (e *Engine) Busy() bool { return e.busy }

// Idle reports whether the engine has nothing to do.
func (e *Engine) Idle() bool { return len(e.running) == 0 && e.waitingLen() == 0 }

// Waiting is the number of queued sequences (vllm:num_requests_waiting).
func (e *Engine) Waiting() int { return e.waitingLen() }

// Running is the number of admitted sequences (vllm:num_requests_running).
func (e *Engine) Running() int { return len(e.running) }

// KVUsage is the fraction of KV blocks held by running sequences.
func (e *Engine) KVUsage() float64 {
	return min(float64(e.cache.inUse())/float64(e.cfg.KVBlocks), 1)
}

// Stats returns the cumulative counters.
func (e *Engine) Stats() Stats {
	s := e.stats
	s.Evictions = e.cache.evictions
	return s
}

func (e *Engine) waitingLen() int { return len(e.waiting) - e.waitHead }

// BeginStep forms the next batch, vLLM-style: running sequences first, in
// admission order (a decode takes one token of the budget, a prefill the
// rest of its prompt up to the budget: chunked prefill), then waiting
// sequences while there is budget, a free slot and cache room. A running
// sequence that cannot get KV blocks preempts the most recently admitted
// one, which will recompute. It returns the step's duration, or false if
// there is nothing to run.
func (e *Engine) BeginStep(now time.Time) (time.Duration, bool) {
	if e.busy {
		return 0, false
	}
	budget := e.cfg.MaxNumBatchedTokens
	e.batch = e.batch[:0]
	var prefillTokens, decodeSeqs, decodeKV int
	var pairs float64
	schedule := func(s *Sequence, n int) {
		s.scheduled = n
		budget -= n
		e.batch = append(e.batch, s)
		if s.computed < s.prefillTarget {
			prefillTokens += n
			pairs += float64(n) * (float64(s.computed) + float64(n+1)/2)
		} else {
			decodeSeqs++
			decodeKV += s.computed
		}
	}
	for i := 0; i < len(e.running) && budget > 0; i++ {
		s := e.running[i]
		n := 1
		if s.computed < s.prefillTarget {
			n = min(s.prefillTarget-s.computed, budget)
		}
		for !e.reserve(s, s.computed+n) {
			victim := e.running[len(e.running)-1]
			e.preempt(victim)
			if victim == s {
				s = nil
				break
			}
		}
		if s == nil {
			break
		}
		schedule(s, n)
	}
	// Waiting sequences in order; one whose adapter can get no slot (every
	// slot serves running sequences) is skipped, as vLLM's scheduler
	// skips it, and keeps its place.
	for i := e.waitHead; i < len(e.waiting) && len(e.running) < e.cfg.MaxNumSeqs && budget > 0; {
		s := e.waiting[i]
		if !e.loraRoom(s.Adapter) {
			i++
			continue
		}
		e.admit(s)
		n := min(s.prefillTarget-s.computed, budget)
		if !e.reserve(s, s.computed+n) {
			e.releaseRefs(s)
			break
		}
		e.takeLoRA(s)
		if i == e.waitHead {
			e.waiting[e.waitHead] = nil
			e.waitHead++
			i++
		} else {
			e.waiting = append(e.waiting[:i], e.waiting[i+1:]...)
		}
		if e.waitHead == len(e.waiting) {
			e.waiting, e.waitHead, i = e.waiting[:0], 0, 0
		}
		s.state = stateRunning
		if s.StartedAt.IsZero() {
			s.StartedAt = now
		}
		e.running = append(e.running, s)
		schedule(s, n)
	}
	if len(e.batch) == 0 {
		return 0, false
	}
	e.busy = true
	e.batchTokens = e.cfg.MaxNumBatchedTokens - budget
	d := e.cfg.Profile.StepTime(prefillTokens, decodeSeqs, decodeKV, pairs) + time.Duration(e.loaded)*e.cfg.LoRALoad
	e.loaded = 0
	e.stats.Steps++
	e.stats.BusyTime += d
	return d, true
}

// EndStep applies the batch formed by BeginStep at the step's end time:
// prefill chunks advance (and register completed prefix units in the
// cache), finished prefills and decodes each produce a token, and
// sequences that reached MaxTokens finish and release their blocks.
func (e *Engine) EndStep(now time.Time, sink Sink) {
	if !e.busy {
		return
	}
	e.busy = false
	for _, s := range e.batch {
		if s.state != stateRunning {
			continue // aborted or preempted during the step
		}
		if s.computed < s.prefillTarget {
			s.computed += s.scheduled
			e.commitUnits(s)
			if s.computed < s.prefillTarget {
				continue
			}
		} else {
			s.computed++
		}
		s.Generated++
		e.stats.GenerationTokens++
		if s.Generated == 1 {
			s.FirstTokenAt = now
			sink.FirstToken(s, now)
		} else {
			sink.Token(s, now)
		}
		if s.Generated >= s.MaxTokens {
			e.release(s)
			s.state = stateFinished
			s.FinishedAt = now
			e.stats.Finished++
			sink.Finished(s, now)
		}
	}
	clear(e.batch)
	e.batch = e.batch[:0]
	e.compactRunning()
}

func (e *Engine) compactRunning() {
	kept := e.running[:0]
	for _, s := range e.running {
		if s.state == stateRunning {
			kept = append(kept, s)
		}
	}
	clear(e.running[len(kept):])
	e.running = kept
}

// unitEnd is the prompt token at which unit i ends.
func (s *Sequence) unitEnd(i int) int { return min((i+1)*s.UnitTokens, s.PromptTokens) }

// sharedTokens is how many prompt tokens the sequence's unit references cover.
func (s *Sequence) sharedTokens() int {
	if len(s.refs) == 0 {
		return 0
	}
	return s.unitEnd(len(s.refs) - 1)
}

// admit looks up the longest cached prefix of a sequence about to start,
// references it, and counts the lookup.
func (e *Engine) admit(s *Sequence) {
	if s.UnitTokens > 0 {
		for i, h := range s.Units {
			if i*s.UnitTokens >= s.PromptTokens {
				break
			}
			u, ok := e.cache.acquire(h)
			if !ok {
				break
			}
			s.refs = append(s.refs, u)
		}
	}
	// At least one token is always computed, so the step samples from it.
	s.computed = min(s.sharedTokens(), s.prefillTarget-1)
	e.stats.PrefixQueryTokens += int64(s.PromptTokens)
	e.stats.PrefixHitTokens += int64(min(s.computed, s.PromptTokens))
	if !s.admitted {
		s.admitted = true
		s.CachedTokens = min(s.computed, s.PromptTokens)
		e.stats.PromptTokens += int64(s.PromptTokens)
	}
}

// reserve makes sure the sequence holds blocks for kv tokens, evicting
// unreferenced prefix units if needed.
func (e *Engine) reserve(s *Sequence, kv int) bool {
	need := e.privateBlocks(s, kv) - s.private
	if need <= 0 {
		return true
	}
	if !e.cache.ensure(need) {
		return false
	}
	e.cache.usedPrivate += need
	s.private += need
	return true
}

func (e *Engine) privateBlocks(s *Sequence, kv int) int {
	tokens := max(kv-s.sharedTokens(), 0)
	return (tokens + e.cfg.BlockSize - 1) / e.cfg.BlockSize
}

// commitUnits turns prompt blocks the sequence has just computed into
// shared prefix units (or, if another sequence registered the same prefix
// meanwhile, drops its own copy and references that one).
func (e *Engine) commitUnits(s *Sequence) {
	if s.UnitTokens <= 0 {
		return
	}
	var stored kvevents.Event // the run of units this call registers, for KV events
	defer func() {
		if len(stored.Hashes) > 0 {
			e.kvEvents = append(e.kvEvents, stored)
		}
	}()
	for i := len(s.refs); i < len(s.Units); i++ {
		start, end := i*s.UnitTokens, s.unitEnd(i)
		if start >= s.PromptTokens || end > s.computed {
			return
		}
		before := s.private
		u, ok := e.cache.acquire(s.Units[i])
		if !ok {
			u = e.cache.insert(s.Units[i], (end-start+e.cfg.BlockSize-1)/e.cfg.BlockSize)
			if e.cfg.KVEvents {
				if len(stored.Hashes) == 0 {
					stored = kvevents.Event{Kind: kvevents.Stored, BlockSize: s.UnitTokens, Medium: "GPU", LoRAName: s.Adapter}
					if i > 0 {
						stored.Parent, stored.HasParent = s.Units[i-1], true
					}
				}
				stored.Hashes = append(stored.Hashes, s.Units[i])
				stored.Tokens += end - start
			}
		} else if len(stored.Hashes) > 0 { // another sequence registered it meanwhile: the run ends
			e.kvEvents = append(e.kvEvents, stored)
			stored = kvevents.Event{}
		}
		s.refs = append(s.refs, u)
		s.private = e.privateBlocks(s, s.computed)
		e.cache.usedPrivate -= before - s.private
	}
}

// TakeKVEvents returns the KV events recorded since the last call (with
// Config.KVEvents), evictions first. The engine publishes them after
// BeginStep — as vLLM's scheduler does at the end of schedule(), so the
// blocks evicted to make room for a step are heard before it runs — and
// after EndStep, for the prompt units the step computed (vLLM announces
// those at the schedule of the step that computes them, a step earlier:
// a router hears of a stored block late, never of an evicted one).
func (e *Engine) TakeKVEvents() []kvevents.Event {
	var out []kvevents.Event
	if ev := e.cache.evicted; len(ev) > 0 {
		out = append(out, kvevents.Event{Kind: kvevents.Removed, Hashes: ev, Medium: "GPU"})
		e.cache.evicted = nil
	}
	out = append(out, e.kvEvents...)
	e.kvEvents = e.kvEvents[:0]
	return out
}

// KVEventsPending reports whether the engine recorded KV events since
// TakeKVEvents was last called: a driver that publishes after every
// BeginStep and EndStep leaves none between steps.
func (e *Engine) KVEventsPending() bool { return len(e.cache.evicted) > 0 || len(e.kvEvents) > 0 }

// release frees everything a sequence holds. Units are released deepest
// first, so a prefix's root is the most recently used and evicted last.
func (e *Engine) release(s *Sequence) {
	e.cache.usedPrivate -= s.private
	s.private = 0
	e.releaseRefs(s)
	e.dropLoRA(s)
}

// loraRoom reports whether a sequence of adapter may start now: it is the
// base model, adapters are not modelled, or the adapter is resident or a
// slot can take it (one is free, or serves no running sequence).
func (e *Engine) loraRoom(adapter string) bool {
	if adapter == "" || e.cfg.MaxLoRAs <= 0 || len(e.loras) < e.cfg.MaxLoRAs {
		return true
	}
	for _, l := range e.loras {
		if l.name == adapter || l.users == 0 {
			return true
		}
	}
	return false
}

// takeLoRA makes s a user of its adapter's slot, loading the adapter into
// a free slot or over the least recently used idle one (loraRoom said
// there is one).
func (e *Engine) takeLoRA(s *Sequence) {
	if s.Adapter == "" || e.cfg.MaxLoRAs <= 0 || s.holdsLoRA {
		return
	}
	e.loraClock++
	s.holdsLoRA = true
	victim := -1
	for i := range e.loras {
		l := &e.loras[i]
		if l.name == s.Adapter {
			l.users++
			l.lastUsed = e.loraClock
			return
		}
		if l.users == 0 && (victim < 0 || l.lastUsed < e.loras[victim].lastUsed) {
			victim = i
		}
	}
	slot := loraSlot{name: s.Adapter, users: 1, lastUsed: e.loraClock}
	if len(e.loras) < e.cfg.MaxLoRAs || victim < 0 {
		e.loras = append(e.loras, slot)
	} else {
		e.loras[victim] = slot
	}
	e.loaded++
	e.stats.LoRALoads++
}

// dropLoRA ends s's use of its adapter's slot (it stays resident).
func (e *Engine) dropLoRA(s *Sequence) {
	if !s.holdsLoRA {
		return
	}
	s.holdsLoRA = false
	for i := range e.loras {
		if e.loras[i].name == s.Adapter {
			e.loras[i].users--
			return
		}
	}
}

// LoRAs lists the adapters of running sequences and of waiting ones (what
// vLLM's vllm:lora_requests_info names), and the resident ones.
func (e *Engine) LoRAs() (running, waiting, resident []string) {
	seen := map[string]bool{}
	add := func(dst []string, name, kind string) []string {
		if name == "" || seen[kind+name] {
			return dst
		}
		seen[kind+name] = true
		return append(dst, name)
	}
	for _, s := range e.running {
		if s.state == stateRunning {
			running = add(running, s.Adapter, "r")
		}
	}
	for _, s := range e.waiting[e.waitHead:] {
		waiting = add(waiting, s.Adapter, "w")
	}
	for _, l := range e.loras {
		resident = append(resident, l.name)
	}
	return running, waiting, resident
}

func (e *Engine) releaseRefs(s *Sequence) {
	for i := len(s.refs) - 1; i >= 0; i-- {
		e.cache.release(s.refs[i])
	}
	clear(s.refs)
	s.refs = s.refs[:0]
}

// preempt evicts a running sequence to the front of the waiting queue; it
// will recompute its prompt and the output it already produced.
func (e *Engine) preempt(s *Sequence) {
	e.release(s)
	s.computed = 0
	s.prefillTarget = s.PromptTokens + s.Generated
	s.Preemptions++
	e.stats.Preemptions++
	s.state = stateWaiting
	for i, r := range e.running {
		if r == s {
			e.running = append(e.running[:i], e.running[i+1:]...)
			break
		}
	}
	if e.waitHead > 0 {
		e.waitHead--
		e.waiting[e.waitHead] = s
	} else {
		e.waiting = append([]*Sequence{s}, e.waiting...)
	}
}
