package proxy

import (
	"skywalker/internal/balancer"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the proxy's Prometheus series, namespace skywalker_.
type metrics struct {
	reg       *prometheus.Registry
	requests  *prometheus.CounterVec // ingress, served, outcome
	forwarded *prometheus.CounterVec // peer
	queueWait prometheus.Histogram
	ttft      prometheus.Histogram
	match     prometheus.Histogram
	admission *prometheus.CounterVec // priority, tenant, decision
	// upstreamTimeouts counts attempts the proxy ended: first_byte (none
	// in time; retried elsewhere), stall (a stream went silent).
	upstreamTimeouts *prometheus.CounterVec
	failovers        prometheus.Counter // streams continued elsewhere after breaking midway
	// forwardWasted counts forwards abandoned before their first byte
	// (peer; why: first_byte_timeout, client_left, drained): work the
	// peer began for nobody, cancelled at its engine as the connection
	// closed.
	forwardWasted *prometheus.CounterVec
	// kvEvents counts each replica's KV-event stream: batch (applied),
	// restart (the engine's sequence began again), lost (a gap no replay
	// filled, a batch that could not be read, the subscription failing).
	kvEvents *prometheus.CounterVec
	// chainsStartedOver counts Responses chains whose home was gone and
	// that started over (responses_start_over).
	chainsStartedOver prometheus.Counter
	tenants           *tenantLabels
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
	m.admission = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "skywalker", Name: "admission_total",
		Help: "Requests by priority class, tenant (the first 20 seen; the rest are \"other\") and how the balancer took them: " +
			"admitted (dispatched or forwarded), refused (429 on arrival: overloaded, queue full), shed (429: held past its objective), " +
			"timed_out (503: held past its deadline), unavailable (503: nowhere may serve it).", ConstLabels: constLabels},
		[]string{"priority", "tenant", "decision"})
	m.upstreamTimeouts = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "skywalker", Name: "upstream_timeouts_total",
		Help:        "Attempts the proxy ended: first_byte (no first byte in time; the request is retried elsewhere), stall (a stream sent nothing for the stall timeout).",
		ConstLabels: constLabels}, []string{"kind"})
	m.forwardWasted = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "skywalker", Name: "forward_wasted_total",
		Help: "Forwards abandoned before their first byte, by peer region and why: first_byte_timeout (cut at the deadline estimated for that peer; served again here), " +
			"client_left, drained. The peer's engine worked on each for nobody until the closed connection cancelled it there.", ConstLabels: constLabels},
		[]string{"peer", "why"})
	m.failovers = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "skywalker", Name: "midstream_failovers_total",
		Help: "Streams that broke midway and were continued on another replica or region (mid-stream failover).", ConstLabels: constLabels})
	m.kvEvents = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "skywalker", Name: "kv_events_total",
		Help: "Each replica's KV-cache event stream (kv_events): batch (applied), restart (the engine's sequence began again: its cache is empty), " +
			"lost (a gap no replay filled, an unreadable batch, the subscription failing: its index rests on belief until rebuilt).", ConstLabels: constLabels},
		[]string{"replica", "event"})
	m.chainsStartedOver = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "skywalker", Name: "responses_chains_started_over_total",
		Help:        "Responses requests whose previous response was gone (its replica out of service or restarted) and that were served as a new chain: they resent the whole conversation and responses_start_over is on.",
		ConstLabels: constLabels})
	m.tenants = newTenantLabels(maxTenantLabels)
	m.reg.MustRegister(m.requests, m.forwarded, m.queueWait, m.ttft, m.match, m.admission, m.upstreamTimeouts, m.forwardWasted, m.failovers, m.kvEvents, m.chainsStartedOver,
		stateCollector{r: r, constLabels: constLabels, tenants: m.tenants},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// maxTenantLabels bounds the tenants metrics name; later ones are "other".
const maxTenantLabels = 20

// tenantLabels turns tenants into metric labels with bounded
// cardinality: the first max tenants seen keep their name, every later
// one is "other". Safe for concurrent use.
type tenantLabels struct {
	mu    sync.Mutex
	max   int
	known map[string]bool
}

func newTenantLabels(max int) *tenantLabels { return &tenantLabels{max: max, known: map[string]bool{}} }

func (t *tenantLabels) label(tenant string) string {
	switch tenant {
	case "":
		return "none"
	case balancer.OverflowTenant:
		return "other"
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.known[tenant] {
		return tenant
	}
	if len(t.known) < t.max {
		t.known[tenant] = true
		return tenant
	}
	return "other"
}

// stateCollector exports live state at scrape time: queue, replicas,
// peers' RTT, gate and data age.
type stateCollector struct {
	r           *Router
	constLabels prometheus.Labels
	tenants     *tenantLabels
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
		c.desc("queued_requests", "Requests held in the balancer queue by priority class and tenant.", "priority", "tenant"),
		c.desc("replica_dispatch_cap", "Requests the balancer may have in flight at the replica: max_in_flight, or the cap learned from first-token times for an engine without metrics.", "replica"),
		c.desc("replica_cache_tokens", "KV cache, in tokens, the prefix index believes the replica holds (reported or configured, corrected by cache truth).", "replica"),
		c.desc("prefix_cached_tokens_total", "Prompt tokens the prefix index predicted cached on the replica it chose, and the engine reported cached (usage.prompt_tokens_details.cached_tokens), over the requests whose engines reported it.", "replica", "source"),
	}
}

func (c stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs() {
		ch <- d
	}
}

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	d := c.descs()
	snap := c.r.snapshot()
	ch <- prometheus.MustNewConstMetric(d[0], prometheus.GaugeValue, float64(snap.Queued))
	for _, h := range snap.Replicas {
		ch <- prometheus.MustNewConstMetric(d[1], prometheus.GaugeValue, b2f(h.Healthy), h.Name)
		ch <- prometheus.MustNewConstMetric(d[2], prometheus.GaugeValue, float64(h.InFlight), h.Name)
		ch <- prometheus.MustNewConstMetric(d[8], prometheus.GaugeValue, float64(h.DispatchCap), h.Name)
		ch <- prometheus.MustNewConstMetric(d[9], prometheus.GaugeValue, float64(h.CacheTokens), h.Name)
		ch <- prometheus.MustNewConstMetric(d[10], prometheus.CounterValue, float64(h.Truth.Predicted), h.Name, "predicted")
		ch <- prometheus.MustNewConstMetric(d[10], prometheus.CounterValue, float64(h.Truth.Actual), h.Name, "reported")
	}
	queued := map[[2]string]int{}
	for k, n := range snap.HeldBy {
		queued[[2]string{k.Class.String(), c.tenants.label(k.Tenant)}] += n
	}
	for k, n := range queued {
		ch <- prometheus.MustNewConstMetric(d[7], prometheus.GaugeValue, float64(n), k[0], k[1])
	}
	for _, p := range snap.Peers {
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
