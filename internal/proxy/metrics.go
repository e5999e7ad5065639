package proxy

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the proxy's Prometheus series, namespace skywalker_.
type metrics struct {
	reg       *prometheus.Registry
	requests  *prometheus.CounterVec // ingress, served, outcome
	forwarded *prometheus.CounterVec // peer
	queueWait prometheus.Histogram
	ttft      prometheus.Histogram
	match     prometheus.Histogram
}

func newMetrics(region string, r *Router) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	constLabels := prometheus.Labels{"region": region}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "skywalker", Name: "requests_total",
		Help: "Requests by ingress region, serving region and outcome.", ConstLabels: constLabels}, []string{"ingress", "served", "outcome"})
	m.forwarded = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "skywalker", Name: "forwarded_total",
		Help: "Requests forwarded to a peer region.", ConstLabels: constLabels}, []string{"peer"})
	m.queueWait = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "skywalker", Name: "queue_wait_seconds",
		Help: "Time requests were held in the balancer queue.", ConstLabels: constLabels,
		Buckets: []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}})
	m.ttft = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "skywalker", Name: "time_to_first_byte_seconds",
		Help: "Time from a request's arrival to the first response byte, as the proxy sees it.", ConstLabels: constLabels,
		Buckets: []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}})
	m.match = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "skywalker", Name: "prefix_match_ratio",
		Help: "Share of a routed request's prompt the chosen replica was believed to hold.", ConstLabels: constLabels,
		Buckets: []float64{0, 0.1, 0.25, 0.5, 0.75, 0.9, 1}})
	m.reg.MustRegister(m.requests, m.forwarded, m.queueWait, m.ttft, m.match, stateCollector{r: r, constLabels: constLabels})
	return m
}

// stateCollector exports live state at scrape time: queue, replicas,
// peers' RTT, gate and data age.
type stateCollector struct {
	r           *Router
	constLabels prometheus.Labels
}

func (c stateCollector) desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("skywalker_"+name, help, labels, c.constLabels)
}

func (c stateCollector) descs() []*prometheus.Desc {
	return []*prometheus.Desc{
		c.desc("queue_length", "Requests held in the balancer queue."),
		c.desc("replica_healthy", "1 if the replica is in service.", "replica"),
		c.desc("replica_in_flight", "Requests this proxy has in flight on the replica.", "replica"),
		c.desc("peer_rtt_seconds", "Smoothed round-trip time to a peer region.", "peer"),
		c.desc("peer_gate_open", "1 while the WAN gate to a peer region is open.", "peer", "reason"),
		c.desc("peer_data_age_seconds", "Age of the newest load summary from a peer region.", "peer"),
		c.desc("peer_healthy", "1 if a peer region has live nodes with fresh data.", "peer"),
	}
}

func (c stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs() {
		ch <- d
	}
}

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	d := c.descs()
	r := c.r
	r.mu.Lock()
	ch <- prometheus.MustNewConstMetric(d[0], prometheus.GaugeValue, float64(r.core.Queued()))
	for _, h := range r.core.Replicas() {
		ch <- prometheus.MustNewConstMetric(d[1], prometheus.GaugeValue, b2f(h.Healthy()), h.Name())
		ch <- prometheus.MustNewConstMetric(d[2], prometheus.GaugeValue, float64(h.InFlight()), h.Name())
	}
	peers := r.core.Peers()
	r.mu.Unlock()
	for _, p := range peers {
		ch <- prometheus.MustNewConstMetric(d[3], prometheus.GaugeValue, p.RTT.Seconds(), p.Region)
		ch <- prometheus.MustNewConstMetric(d[4], prometheus.GaugeValue, b2f(p.GateOpen), p.Region, p.Gate)
		ch <- prometheus.MustNewConstMetric(d[5], prometheus.GaugeValue, p.DataAge.Seconds(), p.Region)
		ch <- prometheus.MustNewConstMetric(d[6], prometheus.GaugeValue, b2f(p.Healthy), p.Region)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
