package server

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"skywalker/internal/engine"
)

// metrics exposes the engine's state under vLLM's metric names (or
// SGLang's), labelled as vLLM labels them.
type metrics struct {
	reg      *prometheus.Registry
	ttft     prometheus.Observer
	e2e      prometheus.Observer
	itl      prometheus.Observer
	prompt   prometheus.Counter
	gen      prometheus.Counter
	success  *prometheus.CounterVec
	abortedN prometheus.Counter
}

// Buckets as vLLM defines them, in seconds.
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	e2eBuckets  = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
	itlBuckets  = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
)

func newMetrics(s *Server) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	labels := prometheus.Labels{"model_name": s.cfg.Model, "engine": "0"}
	read := func(f func(e *engine.Engine) float64) func() float64 {
		return func() float64 {
			s.mu.Lock()
			defer s.mu.Unlock()
			return f(s.eng)
		}
	}
	gauge := func(name, help string, f func(e *engine.Engine) float64) {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, read(f)))
	}
	counter := func(name, help string, f func(e *engine.Engine) float64) {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels}, read(f)))
	}
	histogram := func(name, help string, buckets []float64) prometheus.Observer {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets, ConstLabels: labels})
		m.reg.MustRegister(h)
		return h
	}
	running := func(e *engine.Engine) float64 { return float64(e.Running()) }
	waiting := func(e *engine.Engine) float64 { return float64(e.Waiting()) }
	usage := func(e *engine.Engine) float64 { return e.KVUsage() }
	cfg := s.eng.Config()

	if s.cfg.MetricsStyle == "sglang" {
		gauge("sglang:num_running_reqs", "The number of running requests.", running)
		gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", waiting)
		gauge("sglang:token_usage", "The token usage (fraction of KV cache in use).", usage)
		gauge("sglang:cache_hit_rate", "The prefix cache hit rate.", func(e *engine.Engine) float64 {
			st := e.Stats()
			if st.PrefixQueryTokens == 0 {
				return 0
			}
			return float64(st.PrefixHitTokens) / float64(st.PrefixQueryTokens)
		})
		m.ttft = histogram("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttftBuckets)
		m.e2e = histogram("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds.", e2eBuckets)
		m.itl = histogram("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itlBuckets)
		m.prompt = prometheus.NewCounter(prometheus.CounterOpts{Name: "sglang:prompt_tokens_total", Help: "Number of prefill tokens processed.", ConstLabels: labels})
		m.gen = prometheus.NewCounter(prometheus.CounterOpts{Name: "sglang:generation_tokens_total", Help: "Number of generation tokens processed.", ConstLabels: labels})
	} else {
		gauge("vllm:num_requests_running", "Number of requests in model execution batches.", running)
		gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", waiting)
		gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", usage)
		gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage. DEPRECATED: use vllm:kv_cache_usage_perc.", usage)
		counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", func(e *engine.Engine) float64 {
			return float64(e.Stats().PrefixQueryTokens)
		})
		counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", func(e *engine.Engine) float64 {
			return float64(e.Stats().PrefixHitTokens)
		})
		counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", func(e *engine.Engine) float64 {
			return float64(e.Stats().Preemptions)
		})
		if len(s.cfg.LoRAModules) > 0 {
			m.reg.MustRegister(loraInfo{s: s})
		}
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "vllm:cache_config_info", Help: "Information of the LLMEngine CacheConfig.",
			ConstLabels: prometheus.Labels{"block_size": strconv.Itoa(cfg.BlockSize), "num_gpu_blocks": strconv.Itoa(cfg.KVBlocks), "engine": "0"}},
			func() float64 { return 1 }))
		m.ttft = histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttftBuckets)
		m.e2e = histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", e2eBuckets)
		m.itl = histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itlBuckets)
		m.prompt = prometheus.NewCounter(prometheus.CounterOpts{Name: "vllm:prompt_tokens_total", Help: "Number of prefill tokens processed.", ConstLabels: labels})
		m.gen = prometheus.NewCounter(prometheus.CounterOpts{Name: "vllm:generation_tokens_total", Help: "Number of generation tokens processed.", ConstLabels: labels})
	}
	prefix := "vllm:"
	if s.cfg.MetricsStyle == "sglang" {
		prefix = "sglang:"
	}
	m.success = prometheus.NewCounterVec(prometheus.CounterOpts{Name: prefix + "request_success_total", Help: "Count of successfully processed requests.", ConstLabels: labels}, []string{"finished_reason"})
	m.abortedN = prometheus.NewCounter(prometheus.CounterOpts{Name: prefix + "request_aborted_total", Help: "Count of requests aborted by the client.", ConstLabels: labels})
	m.reg.MustRegister(m.prompt, m.gen, m.success, m.abortedN)
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

func (m *metrics) observeTTFT(d time.Duration) { m.ttft.Observe(d.Seconds()) }
func (m *metrics) observeITL(d time.Duration)  { m.itl.Observe(d.Seconds()) }
func (m *metrics) observeE2E(d time.Duration)  { m.e2e.Observe(d.Seconds()) }
func (m *metrics) requestAdded(prompt int)     { m.prompt.Add(float64(prompt)) }
func (m *metrics) aborted()                    { m.abortedN.Inc() }
func (m *metrics) finished(reason string, generated int) {
	m.success.WithLabelValues(reason).Inc()
	m.gen.Add(float64(generated))
}

// loraInfo is vLLM's vllm:lora_requests_info: one series whose labels
// name the adapter slots (max_lora) and the adapters of the running and
// of the waiting requests, comma-separated; its value is when it was
// taken. Labels that change need a collector of their own.
type loraInfo struct{ s *Server }

var loraInfoDesc = prometheus.NewDesc("vllm:lora_requests_info", "Running stats on lora requests.",
	[]string{"max_lora", "running_lora_adapters", "waiting_lora_adapters"}, nil)

func (l loraInfo) Describe(ch chan<- *prometheus.Desc) { ch <- loraInfoDesc }

func (l loraInfo) Collect(ch chan<- prometheus.Metric) {
	l.s.mu.Lock()
	running, waiting, _ := l.s.eng.LoRAs()
	slots := l.s.eng.Config().MaxLoRAs
	l.s.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(loraInfoDesc, prometheus.GaugeValue, float64(time.Now().Unix()),
		strconv.Itoa(slots), strings.Join(running, ","), strings.Join(waiting, ","))
}
