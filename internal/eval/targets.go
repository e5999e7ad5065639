package eval

import (
	"fmt"
	"strings"
)

// Target is one of the evaluation's goals on one scenario, met or not.
type Target struct {
	Goal   string `json:"goal"`
	Met    bool   `json:"met"`
	Detail string `json:"detail"`
}

// targets checks the goals SkyWalker set itself on a scenario (see the
// evaluation's README section). A missed goal is reported, never hidden.
func targets(res *ScenarioResult, p *scenarioPlan, target float64) []Target {
	byName := map[string]*VariantResult{}
	for _, v := range res.Variants {
		byName[v.Variant] = v
	}
	sky := byName["skywalker"]
	if sky == nil {
		return nil
	}
	var out []Target
	// Fewest replicas of all. A variant that misses at the cap enters the
	// mean as cap+1: a lower bound of what it needs.
	best, bestName := (*VariantResult)(nil), ""
	for _, v := range res.Variants {
		if v == sky || ParseVariant(v.Variant).Pooled {
			continue // the bound is no policy one can deploy
		}
		if best == nil || v.MinReplicas.Mean < best.MinReplicas.Mean {
			best, bestName = v, v.Variant
		}
	}
	if best != nil && sky.Missed > 0 {
		detail := fmt.Sprintf("skywalker misses the SLO at the cap (%d replicas) on %d of %d seeds", p.cap(), sky.Missed, sky.MinReplicas.N)
		out = append(out, Target{Goal: "needs the fewest replicas of all policies", Detail: detail},
			Target{Goal: "≥ 10% fewer replicas than the best other policy, or as few with a p99 TTFT ≥ 1.3× lower", Detail: detail})
	} else if best != nil {
		tie := sky.MinReplicas.Ties(best.MinReplicas)
		detail := fmt.Sprintf("skywalker %s, best other %s %s", sky.MinReplicas.Format(1), bestName, needs(best, p))
		if tie && sky.MinReplicas.Mean > best.MinReplicas.Mean {
			detail = "a tie within the intervals: " + detail
		}
		out = append(out, Target{Goal: "needs the fewest replicas of all policies", Met: sky.MinReplicas.Mean < best.MinReplicas.Mean || tie,
			Detail: detail})
		fewer := 1 - sky.MinReplicas.Mean/best.MinReplicas.Mean
		sameWithTail := sky.MinReplicas.Ties(best.MinReplicas) && best.Missed == 0 && best.AtMin.TTFTP99.Mean >= 1.3*sky.AtMin.TTFTP99.Mean
		out = append(out, Target{Goal: "≥ 10% fewer replicas than the best other policy, or as few with a p99 TTFT ≥ 1.3× lower",
			Met: fewer >= 0.10 || sameWithTail,
			Detail: fmt.Sprintf("%.1f%% fewer than %s; p99 at the smallest fleet %s vs %s ms", 100*fewer, bestName,
				sky.AtMin.TTFTP99.Format(0), best.AtMin.TTFTP99.Format(0))})
	}
	if bound := res.BoundResult(); bound != nil {
		over := sky.MinReplicas.Mean/bound.MinReplicas.Mean - 1
		t := Target{Goal: "within 10% of the pooling bound (every replica pooled at zero RTT)", Met: sky.Missed == 0 && bound.Missed == 0 && over <= 0.10,
			Detail: fmt.Sprintf("%.1f%% over it (skywalker %s, %s %s)", 100*over, needs(sky, p), bound.Variant, needs(bound, p))}
		if sky.Missed > 0 || bound.Missed > 0 {
			t.Detail = "the bound or skywalker misses the SLO at the cap: " + t.Detail
		}
		out = append(out, t)
	}
	if geo := byName["local"]; geo != nil && p.sc.Workload.Kind == "diurnal" {
		fewer := 1 - sky.MinReplicas.Mean/geo.MinReplicas.Mean
		t := Target{Goal: "≥ 25% fewer replicas than the fair GeoDNS (local)", Met: sky.Missed == 0 && fewer >= 0.25,
			Detail: fmt.Sprintf("%.1f%% fewer (skywalker %s, local %s)", 100*fewer, needs(sky, p), needs(geo, p))}
		if sky.Missed > 0 {
			t.Detail = "skywalker misses the SLO at the cap"
		}
		out = append(out, t)
	}
	if ca := byName["cache-aware@"+p.sc.Regions[0].Name]; ca != nil {
		out = append(out, remoteClientsTarget(sky, ca, p, target))
	}
	// Every load level: SLO attainment and goodput no worse than the best
	// other policy (within the interval); cache hits within 10% of
	// cache-aware's.
	var worse []string
	for i, pt := range sky.Load {
		bestSLO, bestGood := pt.SLOAttainment, pt.Goodput
		name := ""
		for _, v := range res.Variants {
			if v == sky || ParseVariant(v.Variant).Pooled {
				continue
			}
			o := v.Load[i]
			if o.SLOAttainment.Mean > bestSLO.Mean {
				bestSLO, name = o.SLOAttainment, v.Variant
			}
			if o.Goodput.Mean > bestGood.Mean {
				bestGood = o.Goodput
			}
		}
		if pt.SLOAttainment.Mean < bestSLO.Mean && !pt.SLOAttainment.Ties(bestSLO) {
			worse = append(worse, fmt.Sprintf("SLO at %g× (%.1f%% vs %s %.1f%%)", pt.X, 100*pt.SLOAttainment.Mean, name, 100*bestSLO.Mean))
		}
		if pt.Goodput.Mean < bestGood.Mean && !pt.Goodput.Ties(bestGood) {
			worse = append(worse, fmt.Sprintf("goodput at %g×", pt.X))
		}
		if ca := byName["cache-aware"]; ca != nil {
			if h, c := pt.CacheHit.Mean, ca.Load[i].CacheHit.Mean; c > 0 && h < 0.9*c {
				worse = append(worse, fmt.Sprintf("cache hits at %g× (%.1f%% vs %.1f%%)", pt.X, 100*h, 100*c))
			}
		}
	}
	detail := "at every load"
	if len(worse) > 0 {
		detail = fmt.Sprint(worse)
	}
	out = append(out, Target{Goal: "at every load: SLO attainment and goodput no worse than the best other policy; cache hits within 10% of cache-aware's",
		Met: len(worse) == 0, Detail: detail})
	return append(out, admissionTargets(sky)...)
}

// RefusedButServableLimit is the share of requests admission may refuse or
// shed that the same run without admission served within the SLO.
const RefusedButServableLimit = 0.001

// admissionTargets are the admission audit's goals: admission refuses
// almost nothing that could have been served, and at no load and no size
// does it lower SLO attainment (within the interval).
func admissionTargets(sky *VariantResult) []Target {
	if sky.RefusedButServableShare == nil {
		return nil
	}
	share := sky.RefusedButServableShare
	out := []Target{{Goal: fmt.Sprintf("refused but servable ≤ %.1f%% of requests at 1× load", 100*RefusedButServableLimit),
		Met: share.Mean <= RefusedButServableLimit,
		Detail: fmt.Sprintf("%.2f%% (%s requests per seed refused or shed that the run without admission served within the SLO)",
			100*share.Mean, sky.RefusedButServable.Format(1))}}
	if len(sky.LoadNoAdmission) == 0 {
		return out
	}
	var lower []string
	check := func(what string, with, without Point) {
		if with.SLOAttainment.Mean < without.SLOAttainment.Mean && !with.SLOAttainment.Ties(without.SLOAttainment) {
			lower = append(lower, fmt.Sprintf("%s: %.1f%% with, %.1f%% without", what, 100*with.SLOAttainment.Mean, 100*without.SLOAttainment.Mean))
		}
	}
	for i, pt := range sky.Load {
		check(fmt.Sprintf("%g× load", pt.X), pt, sky.LoadNoAdmission[i])
	}
	for i, pt := range sky.Size {
		check(fmt.Sprintf("%d replicas", pt.Replicas), pt, sky.SizeNoAdmission[i])
	}
	detail := "at every load and size"
	if len(lower) > 0 {
		detail = strings.Join(lower, "; ")
	}
	return append(out, Target{Goal: "admission never lowers SLO attainment (every load and size, against the same runs without it)",
		Met: len(lower) == 0, Detail: detail})
}

// remoteClientsTarget compares the TTFT p50 of clients outside the single
// router's region, at the smallest reservation of the size curve where
// both policies meet the SLO target: a ratio against a collapsed queue
// says nothing about routing.
func remoteClientsTarget(sky, single *VariantResult, p *scenarioPlan, target float64) Target {
	goal := fmt.Sprintf("TTFT p50 ≥ 1.5× lower than one cache-aware router in %s, for clients elsewhere", p.sc.Regions[0].Name)
	for i := range sky.Size {
		s, c := sky.Size[i], single.Size[i]
		if s.SLOAttainment.Mean < target || c.SLOAttainment.Mean < target {
			continue
		}
		ratio := c.RemoteP50.Mean / s.RemoteP50.Mean
		return Target{Goal: goal, Met: ratio >= 1.5, Detail: fmt.Sprintf("%.2f× (skywalker %s ms, %s %s ms, at %d replicas where both meet the SLO)",
			ratio, s.RemoteP50.Format(0), single.Variant, c.RemoteP50.Format(0), s.Replicas)}
	}
	return Target{Goal: goal, Met: false, Detail: fmt.Sprintf("not compared: no reservation of the size curve where both meet the SLO (%s needs %s replicas)",
		single.Variant, single.MinReplicas.Format(1))}
}

// needs says how many replicas a variant needs: its mean, or a lower
// bound when some seeds missed at the cap.
func needs(v *VariantResult, p *scenarioPlan) string {
	if v.Missed > 0 {
		return fmt.Sprintf("> %d on %d of %d seeds", p.cap(), v.Missed, v.MinReplicas.N)
	}
	return v.MinReplicas.Format(1)
}
