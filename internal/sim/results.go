package sim

import (
	"time"

	"skywalker/internal/results"
)

// result assembles the run's Result: the clients' figures from the
// collector, and what only the simulator knows (engine utilization,
// preemptions, events, time series).
func (w *world) result() *results.Result {
	label := w.cfg.Policy
	if w.cfg.Router != "" {
		label += "@" + w.cfg.Router
	}
	res := w.collect.Result(label)
	res.Events, res.Series, res.Stopped = w.events, &w.series.Series, w.stopped
	res.Utilization, res.ReplicaCounts = map[string]float64{}, map[string]int{}
	for i, spec := range w.cfg.Regions {
		res.RegionOrder = append(res.RegionOrder, spec.Name)
		res.ReplicaCounts[spec.Name] = spec.TotalReplicas()
		res.Preemptions += w.sitePreemptions[i]
		if res.Makespan > 0 {
			res.Utilization[spec.Name] = results.Round(w.siteBusy[i].Seconds()/(res.Makespan*float64(spec.TotalReplicas())), 4)
		}
	}
	var predicted, hits, cached, foreseen int64
	for _, r := range w.routers {
		for _, rp := range r.replicas {
			if rp.router != r {
				continue // an engine another proxy of its region steps: counted there
			}
			st := rp.eng.Stats()
			res.Preemptions += st.Preemptions
			res.AdapterLoads += st.LoRALoads
		}
		for _, st := range r.core.Snapshot(r.now()).Replicas {
			tr := st.Truth
			predicted, hits = predicted+tr.PredictedHits, hits+tr.Hits
			cached, foreseen = cached+tr.Cached, foreseen+tr.Foreseen
		}
	}
	if predicted > 0 {
		res.PrefixPrecision = results.Round(float64(hits)/float64(predicted), 4)
	}
	if cached > 0 {
		res.PrefixRecall = results.Round(float64(foreseen)/float64(cached), 4)
	}
	res.FirstTokenTimeouts = w.timeouts
	res.ForwardTimeouts, res.ForwardsWasted, res.WastedEngineSeconds = w.forwardTimeouts, w.forwardsWasted, w.wastedEngineTime.Seconds()
	w.chains.report(res)
	return res
}

func newSeries(regions int, bucket time.Duration) *series {
	return &series{results.Series{Bucket: bucket, Arrivals: make([][]int, regions), Forwarded: make([][]int, regions),
		Queue: make([][]int, regions), Busy: make([][]time.Duration, regions), Work: make([][]time.Duration, regions)}}
}

// series records the per-region time series as the run goes.
type series struct{ results.Series }

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

// busy books a step of d starting at t that used share of its token
// budget, split over the buckets it spans.
func (s *series) busy(r int, t, d time.Duration, share float64) {
	for d > 0 {
		b := s.bucket(t)
		s.Busy[r] = grow(s.Busy[r], b)
		s.Work[r] = grow(s.Work[r], b)
		part := min(d, time.Duration(b+1)*s.Bucket-t)
		s.Busy[r][b] += part
		s.Work[r][b] += time.Duration(float64(part) * share)
		t, d = t+part, d-part
	}
}
