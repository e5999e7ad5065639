package workload

import (
	"math"
	"math/rand/v2"
)

// LengthDist draws (prompt, output) token lengths.
type LengthDist struct {
	Name    string
	samples [][2]int // empirical pairs, drawn jointly to keep their correlation
	// lognormal fallback parameters, used when samples is empty
	inMu, inSigma, outMu, outSigma float64
}

// Sample draws one (input, output) pair.
func (d *LengthDist) Sample(rng *rand.Rand) (int, int) {
	if len(d.samples) > 0 {
		s := d.samples[rng.IntN(len(d.samples))]
		return s[0], s[1]
	}
	in := math.Exp(d.inMu + d.inSigma*rng.NormFloat64())
	out := math.Exp(d.outMu + d.outSigma*rng.NormFloat64())
	return max(int(in), 1), max(int(out), 1)
}

// Synthetic is a lognormal stand-in with the Azure conversation trace's
// medians (1,020 prompt and 129 output tokens) and roughly its spread, for
// machines without the trace files.
func Synthetic() *LengthDist {
	return &LengthDist{Name: "synthetic-lognormal", inMu: math.Log(1020), inSigma: 0.8, outMu: math.Log(129), outSigma: 1.0}
}

// LengthsFromTrace loads an Azure trace (a file, or a built-in one; see LoadTrace) as an
// empirical length distribution.
func LengthsFromTrace(name string) (*LengthDist, error) {
	recs, err := LoadTrace(name, FormatAzure)
	if err != nil {
		return nil, err
	}
	d := &LengthDist{Name: name, samples: make([][2]int, len(recs))}
	for i, r := range recs {
		d.samples[i] = [2]int{r.InputTokens, r.OutputTokens}
	}
	return d, nil
}
