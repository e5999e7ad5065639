package engine

import (
	"fmt"
	"math/rand/v2"
	"time"

	"skywalker/internal/profile"

	"gonum.org/v1/gonum/stat"
)

// FitQueueCost measures on profile p's engine model how much a request's
// time to first token grows per prompt token already in flight at the
// replica when it arrives — GORGO's c_queue (arXiv 2602.11688 fits it on
// its testbed: 0.010 ms against 0.063 ms per uncached prefill token). A
// replica takes background chat requests (prompts of 500–3,000 tokens,
// 50–300 output tokens) at a rate that ramps from a tenth to all of its
// capacity over ten minutes; every two seconds a 1,000-token probe
// arrives. The slope of the least-squares line of probe TTFT against the
// prompt tokens in flight at its arrival is the answer, averaged over five
// seeded runs. Deterministic.
func FitQueueCost(p profile.Profile) (time.Duration, error) {
	var sum time.Duration
	const runs = 5
	for seed := uint64(1); seed <= runs; seed++ {
		d, err := fitQueueCost(p, seed)
		if err != nil {
			return 0, err
		}
		sum += d
	}
	return sum / runs, nil
}

func fitQueueCost(p profile.Profile, seed uint64) (time.Duration, error) {
	rng := rand.New(rand.NewPCG(seed, seed^0xc0ffee))
	const (
		span      = 10 * time.Minute
		probeGap  = 2 * time.Second
		probeToks = 1000
	)
	// Requests/s the replica serves: prefill of a mean prompt plus decode
	// steps shared by a batch of about 32.
	meanPrompt, meanOut := 1750.0, 175.0
	capacity := 1 / (meanPrompt*p.PrefillPerToken.Seconds() + meanOut*p.StepOverhead.Seconds()/32)
	var arrivals []Arrival
	var probes []*Sequence
	unit := uint64(1)
	blocks := func(tokens int) []uint64 { // unique: no prefix reuse in the fit
		out := make([]uint64, tokens/128)
		for i := range out {
			out[i] = unit
			unit++
		}
		return out
	}
	for at := time.Duration(0); at < span; {
		frac := 0.1 + 0.9*float64(at)/float64(span)
		at += time.Duration(rng.ExpFloat64() / (frac * capacity) * float64(time.Second))
		prompt := 500 + rng.IntN(2501)
		s := &Sequence{ID: fmt.Sprint("bg", len(arrivals)), PromptTokens: prompt, MaxTokens: 50 + rng.IntN(251), Units: blocks(prompt), UnitTokens: 128}
		arrivals = append(arrivals, Arrival{At: at, Seq: s})
	}
	for at := probeGap; at < span; at += probeGap {
		s := &Sequence{ID: fmt.Sprint("probe", len(probes)), PromptTokens: probeToks, MaxTokens: 1, Units: blocks(probeToks), UnitTokens: 128}
		probes = append(probes, s)
		arrivals = append(arrivals, Arrival{At: at, Seq: s})
	}
	start := time.Unix(0, 0)
	if _, err := RunVirtual(New(Config{Profile: p}), start, arrivals, nil); err != nil {
		return 0, fmt.Errorf("fit queue cost of %s: %w", p.Name, err)
	}
	queued := make([]float64, len(probes))
	ttft := make([]float64, len(probes))
	for i, pr := range probes {
		for _, a := range arrivals {
			s := a.Seq
			if s != pr && !s.Arrival.After(pr.Arrival) && s.FinishedAt.After(pr.Arrival) {
				queued[i] += float64(s.PromptTokens)
			}
		}
		ttft[i] = float64(pr.FirstTokenAt.Sub(pr.Arrival))
	}
	_, slope := stat.LinearRegression(queued, ttft, nil, false)
	if slope <= 0 {
		return 0, fmt.Errorf("fit queue cost of %s: no positive slope (%g ns per token)", p.Name, slope)
	}
	return time.Duration(slope), nil
}
