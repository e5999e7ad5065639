// Package profile is the hardware profiles: the step-time model of one
// model on one kind of GPU, and the engine defaults that go with it. The
// engine model runs them; the routing policies and the proxy read their
// prefill and decode costs (policy.PrefillOf, policy.ConfigFor). It imports
// nothing of the product, so the decision core and the engine model both
// depend on it and not on each other.
package profile

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Profile is the step-time model of one model on one kind of hardware, plus
// the engine defaults that go with it. One scheduler iteration that
// prefills P tokens, decodes D sequences, attends over K cached tokens for
// those decodes and A (token, earlier-token) pairs inside prefill chunks
// takes the larger of its memory time and its compute time (a roofline:
// the GPU streams weights and KV while its tensor cores compute):
//
//	memory  = StepOverhead + K·AttendPerKVToken
//	compute = P·PrefillPerToken + D·DecodePerSeq + A·AttendPerPair
//	step    = max(memory, compute)
//
// StepOverhead is reading the weights once per iteration at the bandwidth
// the engine achieves (it absorbs launch and scheduling overheads: the
// batch-1 anchor below is measured, not datasheet); AttendPerKVToken is
// reading one cached token's K and V for a decode. PrefillPerToken and
// DecodePerSeq are the matmul FLOPs of one token; AttendPerPair is the
// attention FLOPs of one query token against one key token during prefill
// (the quadratic term of long prompts). Decode stays memory-bound up to a
// batch of StepOverhead ÷ DecodePerSeq (~120 sequences on an A100), as
// published vLLM decode throughput shows; summing the two terms, as this
// model once did, made batch-128 decode 1.3–2.2× slower than vLLM's.
type Profile struct {
	Name        string
	Description string
	// GPU is the GPU model one replica runs on (as the price book names
	// it) and GPUs how many of them a replica takes.
	GPU              string
	GPUs             int
	StepOverhead     time.Duration
	PrefillPerToken  time.Duration
	DecodePerSeq     time.Duration
	AttendPerKVToken float64 // nanoseconds
	AttendPerPair    float64 // nanoseconds
	// QueuePerToken is how much a new request's TTFT grows per prompt
	// token already in flight at the replica (GORGO's c_queue), as
	// engine.FitQueueCost measures it on this profile; a test keeps the two
	// within 25%.
	QueuePerToken time.Duration
	// Engine defaults for this hardware.
	KVBlocks            int // paged KV-cache blocks
	BlockSize           int // tokens per KV block (vLLM's default 16)
	MaxNumSeqs          int // most sequences running at once
	MaxNumBatchedTokens int // token budget per iteration (chunked prefill)
}

// The shipped profiles. Sources for the fits (all Llama 3 family, BF16,
// vLLM with default scheduling):
//
//   - Decode at batch 1 on an A100-40GB runs ~75 tok/s (13.3 ms/token), 77%
//     of the memory-bandwidth roofline (johnmusgrave.com, "vLLM
//     throughput-latency sweep on NVIDIA A100", vLLM 0.23, Llama-3.1-8B,
//     1024 in / 128 out). StepOverhead on every profile is weights ÷ (0.77 ×
//     datasheet bandwidth): L4 300 GB/s, A100-80GB SXM 2.0 TB/s, H100 SXM
//     3.35 TB/s.
//   - Prefill per token is 2 × parameters FLOPs at 60% (L4, A100) or 50%
//     (H100) of datasheet dense BF16 (121, 312, 989 TFLOPS); attention pairs
//     cost 4 × layers × hidden FLOPs at the same rate.
//   - The same A100-40GB sweep: concurrency 8 gives 6.6× the batch-1
//     throughput (~495 tok/s, 16.2 ms a step at ~1.1k context). The
//     roofline gives 14.3 ms on that GPU; the decode step is memory-bound
//     there, as it is up to ~120 sequences on an A100-80GB.
//   - Llama-3.1-8B on one H100 reaches ~12,500 output tok/s at high
//     concurrency (vLLM V1, FlashInfer; morphllm.com vLLM benchmarks, 2026);
//     the roofline H100 profile gives ~13,300 tok/s at 256 sequences of 1k
//     context (the summed model gave ~9,500).
//   - KV blocks: (GPU memory × 0.9 − weights − ~1.5-8 GB activations) ÷ KV
//     bytes per token (8B: 128 KiB; 70B: 320 KiB) ÷ 16 tokens per block.
//   - The SkyWalker paper (EuroSys'26) ran Llama-3.1-8B on one L4 per
//     replica: that is llama3-8b-l4, the default.
var profiles = map[string]Profile{
	"llama3-8b-l4": {
		Name: "llama3-8b-l4", Description: "Llama-3.1-8B BF16 on one NVIDIA L4 24GB (the SkyWalker paper's testbed)", GPU: "L4", GPUs: 1,
		StepOverhead: 69 * time.Millisecond, PrefillPerToken: 220 * time.Microsecond, DecodePerSeq: 220 * time.Microsecond,
		AttendPerKVToken: 550, AttendPerPair: 8.7, QueuePerToken: 523 * time.Microsecond,
		KVBlocks: 2000, BlockSize: 16, MaxNumSeqs: 256, MaxNumBatchedTokens: 2048,
	},
	"llama3-8b-a100": {
		Name: "llama3-8b-a100", Description: "Llama-3.1-8B BF16 on one NVIDIA A100 80GB SXM", GPU: "A100-80GB", GPUs: 1,
		StepOverhead: 10400 * time.Microsecond, PrefillPerToken: 85 * time.Microsecond, DecodePerSeq: 85 * time.Microsecond,
		AttendPerKVToken: 85, AttendPerPair: 2.8, QueuePerToken: 3410 * time.Nanosecond,
		KVBlocks: 25000, BlockSize: 16, MaxNumSeqs: 256, MaxNumBatchedTokens: 8192,
	},
	"llama3-8b-h100": {
		Name: "llama3-8b-h100", Description: "Llama-3.1-8B BF16 on one NVIDIA H100 80GB SXM", GPU: "H100-80GB", GPUs: 1,
		StepOverhead: 6200 * time.Microsecond, PrefillPerToken: 32 * time.Microsecond, DecodePerSeq: 32 * time.Microsecond,
		AttendPerKVToken: 50, AttendPerPair: 1.06, QueuePerToken: 1111 * time.Nanosecond,
		KVBlocks: 25000, BlockSize: 16, MaxNumSeqs: 256, MaxNumBatchedTokens: 8192,
	},
	"llama3-70b-h100x4": {
		Name: "llama3-70b-h100x4", Description: "Llama-3.1-70B BF16 on four NVIDIA H100 80GB SXM, tensor parallel 4", GPU: "H100-80GB", GPUs: 4,
		StepOverhead: 16500 * time.Microsecond, PrefillPerToken: 79 * time.Microsecond, DecodePerSeq: 79 * time.Microsecond,
		AttendPerKVToken: 31, AttendPerPair: 1.47, QueuePerToken: 2821 * time.Nanosecond,
		KVBlocks: 27000, BlockSize: 16, MaxNumSeqs: 256, MaxNumBatchedTokens: 8192,
	},
}

// Default is the profile used when none is named.
const Default = "llama3-8b-l4"

// Lookup returns a shipped profile by name ("" is Default).
func Lookup(name string) (Profile, error) {
	if name == "" {
		name = Default
	}
	p, ok := profiles[name]
	if !ok {
		return Profile{}, fmt.Errorf("unknown engine profile %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	return p, nil
}

// Names lists the shipped profiles.
func Names() []string {
	names := make([]string, 0, len(profiles))
	for n := range profiles {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// StepTime is the duration of one iteration with the given work.
func (p *Profile) StepTime(prefillTokens, decodeSeqs, decodeKVTokens int, prefillPairs float64) time.Duration {
	memory := p.StepOverhead + time.Duration(float64(decodeKVTokens)*p.AttendPerKVToken)
	compute := time.Duration(prefillTokens)*p.PrefillPerToken + time.Duration(decodeSeqs)*p.DecodePerSeq +
		time.Duration(prefillPairs*p.AttendPerPair)
	return max(memory, compute)
}

// DecodeStep is the time per output token of one request at a light batch:
// decode is memory-bound there, one iteration's memory time.
func (p *Profile) DecodeStep() time.Duration { return p.StepOverhead }

// Slowed is p on engines factor times slower than it says in every step
// (a CPU llama.cpp server behind an L4 profile, a throttled or shared
// GPU): what the simulator runs when a scenario's engines are not what
// their routers believe (sim.RegionSpec.EngineSlowdown). A factor of 1 or
// less returns p.
func (p Profile) Slowed(factor float64) Profile {
	if factor <= 1 {
		return p
	}
	scale := func(d time.Duration) time.Duration { return time.Duration(float64(d) * factor) }
	p.StepOverhead, p.PrefillPerToken, p.DecodePerSeq, p.QueuePerToken = scale(p.StepOverhead), scale(p.PrefillPerToken), scale(p.DecodePerSeq), scale(p.QueuePerToken)
	p.AttendPerKVToken *= factor
	p.AttendPerPair *= factor
	return p
}
