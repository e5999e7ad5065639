package region

import (
	"slices"
	"time"

	"skywalker/internal/policy"
)

// What a region learns of its engines' real speed, from first tokens. The
// profile (Config.Prefill) says how long a prefill should take on the
// hardware it names; the engines in front of a proxy may be nothing like
// it (a llama.cpp server on one CPU thread is 5–20× slower than the L4
// profile, a misconfigured profile 2× off either way). So every first token
// is compared with what the profile expected of it — the prefill of the
// work queued at its replica when it was sent, its own included — and the
// ratio is kept:
//
//   - per replica and for the region, the last firstTokenWindow ratios:
//     their high percentile bounds how long an attempt may wait for its
//     first token (Attempt.FirstTokenTimeout), so a slow engine is waited
//     for and a hung one is not;
//   - for the region, the ratio of requests sent to an idle replica (no
//     other work there, so nothing but the engine's speed is in it),
//     smoothed: the region's speed, by which it scales the profile in every
//     estimate it makes (its views, hence routing and admission, the
//     queue-wait prior, and the load summary its peers route by).
//
// A timeout at a replica that is answering others is evidence too: its
// time, a lower bound of the first token's, is counted as a sample, so a
// slow replica is waited for longer next time instead of being timed out
// again and again; at a replica that answers nobody it is a failure (see
// pool.timedOut).

// firstTokenWindow is how many recent first tokens a replica's (and the
// region's) timeout is learned from.
const firstTokenWindow = 32

// minFirstTokenSamples: below this many samples a replica's timeout is the
// region's, and the region's is InitialFirstTokenTimeout.
const minFirstTokenSamples = 3

// The first-token timeout (Attempt.FirstTokenTimeout): FirstTokenFactor ×
// the 95th percentile of recent first tokens' ratio to the profile's
// expectation × this attempt's expectation, never below
// MinFirstTokenTimeout; InitialFirstTokenTimeout while nothing is known.
const (
	FirstTokenFactor = 4
	// MinFirstTokenTimeout is the least an attempt is waited for: a first
	// token takes at least a scheduling step, and a busy host stalls for
	// seconds; a timeout is a failure and three eject a replica.
	MinFirstTokenTimeout = 5 * time.Second
	// InitialFirstTokenTimeout is the wait before the region has seen any
	// first token: generous, because nothing says how slow its engines
	// are (two cold 2,600-token prompts on a one-thread llama.cpp server
	// take 6 s; a 16k prompt on a CPU a minute).
	InitialFirstTokenTimeout = 60 * time.Second
	// MaxFirstTokenTimeout bounds what is learned.
	MaxFirstTokenTimeout = 10 * time.Minute
)

// firstTokenTimes is a window of recent ratios of a first token's time to
// the profile's expectation.
type firstTokenTimes struct {
	ratios [firstTokenWindow]float64
	n      int // samples held, at most firstTokenWindow
	next   int // where the next sample goes
}

func (f *firstTokenTimes) add(ratio float64) {
	f.ratios[f.next] = ratio
	f.next = (f.next + 1) % firstTokenWindow
	f.n = min(f.n+1, firstTokenWindow)
}

// quantile is the q-quantile of the held ratios (nearest rank), and
// whether there are enough of them to say.
func (f *firstTokenTimes) quantile(q float64) (float64, bool) {
	if f.n < minFirstTokenSamples {
		return 0, false
	}
	s := slices.Clone(f.ratios[:f.n])
	slices.Sort(s)
	return s[min(int(q*float64(f.n)), f.n-1)], true
}

// The learned speed is at most maxSpeed (an engine 64× slower than its
// profile is learned as such) and never below 1: a first token faster
// than the profile leaves the estimates as they are (they err on the safe
// side). A first token of a prefill the profile puts under
// speedSampleFloor is compared with the floor instead: it is mostly fixed
// costs the profile does not model (the HTTP exchange, a scheduling step,
// a busy host), and a 20 ms prefill answered in 70 ms would otherwise read
// as an engine 3.5× slower than it is. The floor is the cap learner's
// allowance for the same costs (saturatedSlack).
const (
	maxSpeed         = 64
	speedSampleFloor = saturatedSlack
)

// speed is how much longer than the profile's prefill the region's
// engines take to a first token when nothing else runs on them, from
// minFirstTokenSamples such first tokens on: the scale of every estimate
// the region makes. Until then it is what peers of the same hardware
// measured of theirs (borrowedSpeed), else 1: a region that has served
// nothing yet is as slow as its twins have shown they are, not as fast as
// the profile says.
func (r *pool) speed() float64 {
	if !r.speedMeasured() {
		return max(r.borrowedSpeed, 1)
	}
	return r.idleSpeed.ratioWithin(1, maxSpeed)
}

// speedMeasured reports whether speed rests on the region's own first
// tokens.
func (r *pool) speedMeasured() bool { return r.idleSamples >= minFirstTokenSamples }

// borrowedSpeed is the median speed of the peers running hardware (the
// same profile) that have measured theirs (Load.SpeedMeasured), 0 if
// none has: the median, so that one peer's odd engines do not slow every
// estimate. Peers of an earlier release say no hardware and lend nothing.
func borrowedSpeed(hardware string, peers []Peer) float64 {
	if hardware == "" {
		return 0
	}
	var speeds []float64
	for i := range peers {
		if l := &peers[i].Load; l.SpeedMeasured && l.Hardware == hardware && !peers[i].Left {
			speeds = append(speeds, l.Speed)
		}
	}
	if len(speeds) == 0 {
		return 0
	}
	slices.Sort(speeds)
	return speeds[len(speeds)/2]
}

// judgeSpeed corrects the view of a peer that has not measured its
// engines' speed and runs the same hardware as this region, which has:
// its prefill is taken to be as slow as this region's engines (what the
// peer would borrow, before its own summary says so).
func (r *pool) judgeSpeed(pr *policy.PeerRegion, l Load) {
	if l.SpeedMeasured || l.Hardware == "" || l.Hardware != r.cfg.Hardware || !r.speedMeasured() {
		return
	}
	if own, theirs := r.speed(), max(l.Speed, 1); own > theirs {
		pr.Prefill = l.Prefill.Scaled(own / theirs)
	}
}

// prefill is the region's prefill profile as its engines bear it out.
func (r *pool) prefill() policy.PrefillProfile { return r.cfg.Prefill.Scaled(r.speed()) }

// unmeasured reports whether the region's estimates rest on the profile
// alone (policy.LocalRegion.Unmeasured): it has seen no first token, and
// an engine was scraped and reports no metrics (one not yet scraped is
// given the benefit of the doubt for the first scrape interval).
func (r *pool) unmeasured() bool {
	if r.firstTokens.n > 0 {
		return false
	}
	for _, rp := range r.replicas {
		if rp.healthy && rp.scraped && !rp.metrics.Known {
			return true
		}
	}
	return false
}

// expectedFirstToken is what the profile expects of a first token on rp
// with prefillTokens of uncached prompt queued there, its own included: at
// least one block's prefill (a cached prompt still computes its last,
// partial block, and the engine takes a step).
func (r *pool) expectedFirstToken(prefillTokens int) time.Duration {
	return max(r.cfg.Prefill.Time(max(prefillTokens, r.cfg.BlockTokens)), time.Millisecond)
}

// observeFirstTokenTime learns from a first token that came ttft after b
// was sent.
func (r *pool) observeFirstTokenTime(b *booking, ttft time.Duration, now time.Time) {
	ratio := float64(ttft) / float64(b.ttftExpected)
	b.rp.firstTokens.add(ratio)
	r.firstTokens.add(ratio)
	b.rp.lastFirstToken = now
	if b.alone {
		if r.idleSamples++; r.idleSamples == minFirstTokenSamples {
			r.speedKnownAt = now
		}
		r.idleSpeed.observe(float64(ttft), float64(max(b.ttftExpected, speedSampleFloor)))
	}
}

// firstTokenTimeout is how long the attempt booked as b may wait for its
// first token (see FirstTokenFactor).
func (r *pool) firstTokenTimeout(b *booking) time.Duration {
	q, ok := b.rp.firstTokens.quantile(0.95)
	if !ok {
		if q, ok = r.firstTokens.quantile(0.95); !ok {
			return InitialFirstTokenTimeout
		}
	}
	d := time.Duration(FirstTokenFactor * q * float64(b.ttftExpected))
	return min(max(d, MinFirstTokenTimeout), MaxFirstTokenTimeout)
}

// timedOut books an attempt that had no first token within its timeout,
// and reports whether the replica looks hung: it gave nobody a first token
// while this attempt waited (then it counts toward ejection, and its
// timeout says nothing of its speed). A replica that answered others is
// slow or overloaded, and ejecting it would turn a slow engine into a
// dead one; instead the wait, a lower bound of the first token's time, is
// a sample of the replica's (so it is waited for longer next time) and of
// what a slot takes (the queue-wait estimate), and a replica that had
// others in flight is taken to have been full (its learned dispatch cap
// drops, see observeFirstToken).
func (r *pool) timedOut(b *booking, waited time.Duration) (hung bool) {
	rp := b.rp
	if !rp.lastFirstToken.After(b.sent) {
		return true
	}
	rp.firstTokens.add(float64(waited) / float64(b.ttftExpected))
	r.service.Observe(waited)
	if r.learnsCap(rp) && b.inflight > 1 {
		rp.learned.saturated(b.inflight)
	}
	return false
}
