package eval

import (
	"encoding/json"
	"fmt"
	"math"
)

// Stat is a mean over seeds with its 95% confidence interval (Student's t).
// A sample that is infinite (a latency percentile that falls on a request
// never answered) makes the mean infinite.
type Stat struct {
	Mean, Low, High float64
	N               int
}

// tQuantile975 is Student's t at 0.975 for 1..30 degrees of freedom.
var tQuantile975 = []float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
	2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060,
	2.056, 2.052, 2.048, 2.045, 2.042}

// Summarize is the mean and 95% interval of xs.
func Summarize(xs []float64) Stat {
	s := Stat{N: len(xs)}
	if len(xs) == 0 {
		return s
	}
	sum := 0.0
	for _, x := range xs {
		if math.IsInf(x, 1) {
			inf := math.Inf(1)
			return Stat{Mean: inf, Low: inf, High: inf, N: len(xs)}
		}
		sum += x
	}
	s.Mean = sum / float64(len(xs))
	if len(xs) == 1 {
		s.Low, s.High = s.Mean, s.Mean
		return s
	}
	ss := 0.0
	for _, x := range xs {
		ss += (x - s.Mean) * (x - s.Mean)
	}
	sd := math.Sqrt(ss / float64(len(xs)-1))
	t := 1.96
	if df := len(xs) - 1; df <= len(tQuantile975) {
		t = tQuantile975[df-1]
	}
	half := t * sd / math.Sqrt(float64(len(xs)))
	s.Low, s.High = s.Mean-half, s.Mean+half
	return s
}

// Infinite reports whether the mean is infinite.
func (s Stat) Infinite() bool { return math.IsInf(s.Mean, 1) }

// Ties reports whether two stats cannot be told apart: their intervals
// overlap.
func (s Stat) Ties(o Stat) bool {
	if s.Infinite() || o.Infinite() {
		return s.Infinite() && o.Infinite()
	}
	return s.Low <= o.High && o.Low <= s.High
}

// Format prints the mean with its interval's half width in the given
// number of decimals ("∞" when infinite).
func (s Stat) Format(decimals int) string {
	switch {
	case s.N == 0:
		return "-"
	case s.Infinite():
		return "∞"
	case s.High-s.Mean < math.Pow(10, -float64(decimals))/2:
		return fmt.Sprintf("%.*f", decimals, s.Mean)
	}
	return fmt.Sprintf("%.*f ± %.*f", decimals, s.Mean, decimals, s.High-s.Mean)
}

// MarshalJSON writes infinite bounds as null.
func (s Stat) MarshalJSON() ([]byte, error) {
	num := func(x float64) any {
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return nil
		}
		return x
	}
	return json.Marshal(struct {
		Mean any `json:"mean"`
		Low  any `json:"ci95_low"`
		High any `json:"ci95_high"`
		N    int `json:"seeds"`
	}{num(s.Mean), num(s.Low), num(s.High), s.N})
}

// UnmarshalJSON reads what MarshalJSON writes: a null bound is infinite.
func (s *Stat) UnmarshalJSON(data []byte) error {
	var raw struct {
		Mean *float64 `json:"mean"`
		Low  *float64 `json:"ci95_low"`
		High *float64 `json:"ci95_high"`
		N    int      `json:"seeds"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return fmt.Errorf("stat: %w", err)
	}
	if raw.N < 0 {
		return fmt.Errorf("stat: %d seeds", raw.N)
	}
	num := func(p *float64) float64 {
		if p == nil {
			return math.Inf(1)
		}
		return *p
	}
	*s = Stat{Mean: num(raw.Mean), Low: num(raw.Low), High: num(raw.High), N: raw.N}
	return nil
}
