package proxy

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

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

// understood is every family parseEngineMetrics reads.
var understood = func() map[string]bool {
	names := map[string]bool{"vllm:cache_config_info": true, "vllm:lora_requests_info": true}
	for _, list := range [][]string{waitingNames, runningNames, kvNames} {
		for _, n := range list {
			names[n] = true
		}
	}
	return names
}()

// onlyUnderstood keeps the lines of a metrics page that parseEngineMetrics
// reads — the understood families' samples and their HELP and TYPE — and
// whatever it cannot tell is a metric's (the parser then says what is
// wrong with it): an engine's page is mostly histograms the proxy does not
// read (vLLM's TTFT, latency and token histograms), and parsing them was
// most of a scrape's cost, ten times a second per replica.
func onlyUnderstood(page []byte) []byte {
	out := page[:0:0]
	for len(page) > 0 {
		line := page
		if i := bytes.IndexByte(page, '\n'); i >= 0 {
			line, page = page[:i+1], page[i+1:]
		} else {
			page = nil
		}
		name, ok := lineMetric(line)
		if !ok || understood[string(name)] { // no allocation: the compiler looks the bytes up
			out = append(out, line...)
		}
	}
	return out
}

// lineMetric is the family a line of a text exposition belongs to: a
// sample's metric name, or the name a HELP or TYPE comment is about. ok
// is false when the line is not plainly either (the parser judges it);
// other comments and blank lines belong to no family (nil, true).
func lineMetric(line []byte) (name []byte, ok bool) {
	text := bytes.TrimSpace(line)
	if len(text) == 0 {
		return nil, true
	}
	if text[0] == '#' {
		rest := bytes.TrimLeft(text[1:], " \t")
		for _, kw := range [...]string{"HELP", "TYPE"} {
			if after, found := bytes.CutPrefix(rest, []byte(kw)); found && len(after) > 0 && (after[0] == ' ' || after[0] == '\t') {
				after = bytes.TrimLeft(after, " \t")
				end := bytes.IndexAny(after, " \t")
				if end < 0 {
					end = len(after)
				}
				return after[:end], validName(after[:end])
			}
		}
		return nil, true
	}
	end := bytes.IndexAny(text, "{ \t")
	if end < 0 {
		end = len(text)
	}
	return text[:end], validName(text[:end])
}

// validName reports whether b is a metric name in the classic charset.
func validName(b []byte) bool {
	for i, c := range b {
		if !(c == '_' || c == ':' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || i > 0 && '0' <= c && c <= '9') {
			return false
		}
	}
	return len(b) > 0
}

// parseEngineMetrics reads a Prometheus text exposition. A page without
// any known name is not an error: the replica is balanced on the proxy's
// own in-flight counts instead.
//
// A data-parallel vLLM server runs several engines behind one address and
// labels each engine's series engine="0", "1", …; the server sends a new
// request to its least loaded engine. So the engines are combined as the
// replica they make up: its KV cache is theirs together (blocks summed,
// usage the block-weighted mean — two engines at 48% are a replica 48%
// full, not 96%), a new request waits behind the shortest engine queue
// (Waiting), and every other request the engines hold counts as running
// (Running), so Waiting + Running is all the replica holds.
func parseEngineMetrics(r io.Reader) (region.Metrics, error) {
	page, err := io.ReadAll(io.LimitReader(r, maxScrapeBytes))
	if err != nil {
		return region.Metrics{}, fmt.Errorf("read metrics: %w", err)
	}
	families, err := metricFamilies(onlyUnderstood(page))
	if err != nil {
		return region.Metrics{}, err
	}
	return metricsOf(families), nil
}

// metricFamilies parses a text exposition.
func metricFamilies(page []byte) (map[string]*dto.MetricFamily, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(page))
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	return families, nil
}

// metricsOf reads a replica's load from its engines' metric families.
func metricsOf(families map[string]*dto.MetricFamily) region.Metrics {
	var m region.Metrics
	waiting, okW := perEngine(families, waitingNames)
	running, okR := perEngine(families, runningNames)
	m.Known = okW || okR
	total := 0.0
	for _, v := range running {
		total += v
	}
	if okW {
		least := -1.0
		for _, v := range waiting {
			total += v
			if least < 0 || v < least {
				least = v
			}
		}
		m.Waiting = count(least)
		total -= max(least, 0)
	}
	m.Running = count(total)
	blocks := map[string]float64{}
	if f := families["vllm:cache_config_info"]; f != nil {
		for _, s := range f.Metric {
			var n, size int
			for _, lp := range s.Label {
				switch lp.GetName() {
				case "num_gpu_blocks":
					n, _ = strconv.Atoi(lp.GetValue())
				case "block_size":
					size, _ = strconv.Atoi(lp.GetValue())
				}
			}
			blocks[engineOf(s)] = float64(min(max(n, 0), 1<<40))
			m.BlockSize = size
		}
	}
	if usage, ok := perEngine(families, kvNames); ok {
		if len(blocks) == 1 && len(usage) > 1 { // one config series for identical engines
			for _, n := range blocks {
				blocks = make(map[string]float64, len(usage))
				for e := range usage {
					blocks[e] = n
				}
			}
		}
		var weighted, weights float64
		for engine, v := range usage {
			w := blocks[engine]
			if w <= 0 {
				w = 1 // sizes unknown: engines weigh alike
			}
			if math.IsNaN(v) {
				v = 0
			}
			weighted += min(max(v, 0), 1) * w
			weights += w
		}
		m.KVUsage = weighted / weights
	}
	for _, n := range blocks {
		m.KVBlocks += int(n)
	}
	m.MaxLoRAs, m.RunningAdapters = loraInfo(families["vllm:lora_requests_info"])
	return m
}

// loraInfo reads vllm:lora_requests_info: the engine's adapter slots
// (max_lora, summed over data-parallel engines) and the adapters of its
// running requests (running_lora_adapters, comma-separated), from each
// engine's newest sample (the value is when it was taken).
func loraInfo(f *dto.MetricFamily) (slots int, running []string) {
	if f == nil {
		return 0, nil
	}
	newest := map[string]*dto.Metric{}
	for _, s := range f.Metric {
		e := engineOf(s)
		if old := newest[e]; old == nil || s.GetGauge().GetValue() > old.GetGauge().GetValue() {
			newest[e] = s
		}
	}
	for _, s := range newest {
		for _, lp := range s.Label {
			switch lp.GetName() {
			case "max_lora":
				n, _ := strconv.Atoi(lp.GetValue())
				slots += min(max(n, 0), 1<<16)
			case "running_lora_adapters":
				for _, a := range strings.Split(lp.GetValue(), ",") {
					if a = strings.TrimSpace(a); a != "" && len(running) < 1024 && !slices.Contains(running, a) {
						running = append(running, a)
					}
				}
			}
		}
	}
	slices.Sort(running)
	return slots, running
}

// count turns a sample into a request count: NaN and negatives are 0, and
// absurd values are capped.
func count(v float64) int {
	if math.IsNaN(v) || v <= 0 {
		return 0
	}
	return int(min(v, 1e9))
}

// perEngine returns the samples of the first family present, summed per
// engine (the "engine" label; "" when absent: one engine).
func perEngine(families map[string]*dto.MetricFamily, names []string) (map[string]float64, bool) {
	for _, name := range names {
		f := families[name]
		if f == nil {
			continue
		}
		out := map[string]float64{}
		for _, m := range f.Metric {
			v := 0.0
			switch {
			case m.Gauge != nil:
				v = m.Gauge.GetValue()
			case m.Counter != nil:
				v = m.Counter.GetValue()
			case m.Untyped != nil:
				v = m.Untyped.GetValue()
			}
			out[engineOf(m)] += v
		}
		return out, true
	}
	return nil, false
}

// engineOf is a sample's engine label ("" when it has none).
func engineOf(m *dto.Metric) string {
	for _, lp := range m.Label {
		if lp.GetName() == "engine" {
			return lp.GetValue()
		}
	}
	return ""
}
