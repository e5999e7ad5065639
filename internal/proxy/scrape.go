package proxy

import (
	"fmt"
	"io"
	"strconv"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"skywalker/internal/region"
)

// maxScrapeBytes bounds a replica's metrics page.
const maxScrapeBytes = 4 << 20

// Metric names understood, first match wins: vLLM's current names, its
// deprecated ones (still served by older versions and scraped by older
// routers), and SGLang's.
var (
	waitingNames = []string{"vllm:num_requests_waiting", "sglang:num_queue_reqs"}
	runningNames = []string{"vllm:num_requests_running", "sglang:num_running_reqs"}
	kvNames      = []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"}
)

// parseEngineMetrics reads a Prometheus text exposition. A page without
// any known name is not an error: the replica is balanced on the proxy's
// own in-flight counts instead.
func parseEngineMetrics(r io.Reader) (region.Metrics, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(io.LimitReader(r, maxScrapeBytes))
	if err != nil {
		return region.Metrics{}, fmt.Errorf("parse metrics: %w", err)
	}
	var m region.Metrics
	if v, ok := sum(families, waitingNames); ok {
		m.Waiting, m.Known = int(v), true
	}
	if v, ok := sum(families, runningNames); ok {
		m.Running, m.Known = int(v), true
	}
	if v, ok := sum(families, kvNames); ok {
		m.KVUsage = min(max(v, 0), 1)
	}
	if f := families["vllm:cache_config_info"]; f != nil && len(f.Metric) > 0 {
		for _, lp := range f.Metric[0].Label {
			n, _ := strconv.Atoi(lp.GetValue())
			switch lp.GetName() {
			case "num_gpu_blocks":
				m.KVBlocks = n
			case "block_size":
				m.BlockSize = n
			}
		}
	}
	return m, nil
}

// sum adds the samples of the first family present (a vLLM server with
// several engines reports one series per engine).
func sum(families map[string]*dto.MetricFamily, names []string) (float64, bool) {
	for _, name := range names {
		f := families[name]
		if f == nil {
			continue
		}
		total := 0.0
		for _, m := range f.Metric {
			switch {
			case m.Gauge != nil:
				total += m.Gauge.GetValue()
			case m.Counter != nil:
				total += m.Counter.GetValue()
			case m.Untyped != nil:
				total += m.Untyped.GetValue()
			}
		}
		return total, true
	}
	return 0, false
}
