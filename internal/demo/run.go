package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"skywalker/internal/results"
)

// Options configure Run.
type Options struct {
	// Duration bounds the whole demo (both days and the time serving
	// afterwards); zero runs the days at full length and then serves until
	// ctx ends.
	Duration time.Duration
	JSON     bool  // print the summary as JSON on Stdout (the live view goes to Stderr)
	Ports    []int // the proxies' ports; default 9000, 9001, 9002
	Stdout   io.Writer
	Stderr   io.Writer
	Logger   *slog.Logger
	// LogPath names where Logger writes, for the banner ("" says nothing).
	LogPath string
	// Live redraws the view in place (a terminal); otherwise it prints a
	// plain line every five seconds.
	Live bool
}

// DefaultPorts are the proxies' ports.
var DefaultPorts = []int{9000, 9001, 9002}

// Run is the demo.
func Run(ctx context.Context, opt Options) (Summary, error) {
	start := time.Now()
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.Ports == nil {
		opt.Ports = DefaultPorts
	}
	view := opt.Stdout
	if opt.JSON {
		view = opt.Stderr
	}
	day := 40 * time.Second
	if opt.Duration > 0 {
		day = max(4*time.Second, (opt.Duration-8*time.Second)/2)
	}
	fmt.Fprintf(view, "SkyWalker demo: 3 regions × 2 simulated Llama-3.1-8B A100 engines (%s), one Llama-3.1-70B engine (%s) in us-east and eu-west only, a proxy per region, WAN %s.\n",
		Model, LargeModel, Topology.String())
	fmt.Fprintf(view, "WAN gate ceiling %v (the product's default is 1 s; whether a link may carry a request is decided by its TTFT objective).\n", GateThreshold)
	fmt.Fprintf(view, "One day compressed to %v, demand phase-shifted by time zone; each region's peak is more than its own replicas serve.\n", day)
	fmt.Fprintf(view, "About %v in all; Ctrl-C stops at any time.", (2*day + 10*time.Second).Round(time.Second))
	if opt.LogPath != "" {
		fmt.Fprintf(view, " Logs: %s", opt.LogPath)
	}
	fmt.Fprintln(view)

	fmt.Fprintf(view, "\n[1/2] the day with forwarding off (policy local, GeoDNS-like) ...\n")
	base, err := Start(ctx, "local", nil, opt.Logger)
	if err != nil {
		return Summary{}, err
	}
	baseSamples, err := runDay(ctx, base, day, view, opt.Live)
	base.Close()
	if err != nil && ctx.Err() == nil {
		return Summary{}, err
	}
	baseRegions, baseOverall := Summarize(baseSamples)
	fmt.Fprintf(view, "      %d requests, TTFT p50 %s ms, p99 %s ms\n", baseOverall.Arrivals, msCell(baseOverall.TTFTP50Ms), msCell(baseOverall.TTFTP99Ms))

	fmt.Fprintf(view, "\n[2/2] the same day through SkyWalker (proxies on %s) ...\n", portList(opt.Ports))
	c, err := Start(ctx, "skywalker", opt.Ports, opt.Logger)
	if err != nil {
		return Summary{}, err
	}
	defer c.Close()
	samples, err := runDay(ctx, c, day, view, opt.Live)
	if err != nil && ctx.Err() == nil {
		return Summary{}, err
	}
	regions, overall := Summarize(samples)
	sum := Summary{Regions: regions, Overall: overall, Models: SummarizeModels(samples), Drops: dropReasons(samples),
		LocalBaseline: &Baseline{Regions: baseRegions, Overall: baseOverall, Models: SummarizeModels(baseSamples), Drops: dropReasons(baseSamples)}}
	if opt.JSON {
		enc := json.NewEncoder(opt.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(sum); err != nil {
			return sum, err
		}
	} else {
		printSummary(opt.Stdout, sum)
	}
	fmt.Fprintf(view, "\nTry it:\n\n  curl -s %s/v1/chat/completions -H 'Content-Type: application/json' \\\n    -d '{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello!\"}],\"stream\":true}'\n",
		c.Regions[0].URL, Model)
	fmt.Fprintf(view, "\n  from openai import OpenAI\n  client = OpenAI(base_url=\"%s/v1\", api_key=\"unused\")\n  print(client.chat.completions.create(model=\"%s\", messages=[{\"role\": \"user\", \"content\": \"Hello!\"}]).choices[0].message.content)\n",
		c.Regions[0].URL, Model)
	fmt.Fprintf(view, "\n  import anthropic  # the Anthropic Messages API, embeddings, rerank, score and tokenize are served too (README \"Endpoints\")\n  claude = anthropic.Anthropic(base_url=\"%s\", api_key=\"unused\")\n  print(claude.messages.create(model=\"%s\", max_tokens=64, messages=[{\"role\": \"user\", \"content\": \"Hello!\"}]).content[0].text)\n",
		c.Regions[0].URL, Model)
	fmt.Fprintf(view, "\n  Other regions: %s. Each proxy's view, gates and decisions: %s/debug/skywalker (and the others' admin ports: %s, %s).\n",
		c.Regions[1].URL+", "+c.Regions[2].URL, c.Regions[0].AdminURL, c.Regions[1].AdminURL, c.Regions[2].AdminURL)
	if opt.Duration > 0 {
		left := time.Until(start.Add(opt.Duration)).Round(time.Second)
		fmt.Fprintf(view, "\nThe mesh serves for %v more (--duration %v); Ctrl-C stops it sooner.\n", max(left, 0), opt.Duration)
	} else {
		fmt.Fprintf(view, "\nThe mesh serves until Ctrl-C.\n")
	}
	if opt.Duration > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(start.Add(opt.Duration))):
		}
	} else {
		<-ctx.Done()
	}
	return sum, nil
}

// unansweredCell stands for a percentile no answer reached: more of the
// requests than the percentile leaves out got no first token.
const unansweredCell = "unanswered"

// msCell renders a latency in whole milliseconds, or unansweredCell.
func msCell(m results.Millis) string {
	if math.IsInf(float64(m), 1) {
		return unansweredCell
	}
	return fmt.Sprintf("%.0f", float64(m))
}

func printSummary(w io.Writer, s Summary) {
	fmt.Fprintf(w, "\nSummary (what the clients measured):\n\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "region\trequests\tserved locally\tsent to peers\treceived\tTTFT p50 ms\tTTFT p99 ms\tcache hit\t|\tlocal: TTFT p50 ms\tTTFT p99 ms\t")
	var names []string
	for n := range s.Regions {
		names = append(names, n)
	}
	sort.Strings(names)
	ms := msCell
	unanswered := false
	row := func(name string, r, b results.RegionStats) {
		unanswered = unanswered || math.IsInf(float64(r.TTFTP99Ms), 1) || math.IsInf(float64(b.TTFTP99Ms), 1)
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t%.0f%%\t|\t%s\t%s\t\n", name, r.Arrivals, r.ServedLocal, r.ForwardedOut, r.Received,
			ms(r.TTFTP50Ms), ms(r.TTFTP99Ms), 100*r.CacheHitRate, ms(b.TTFTP50Ms), ms(b.TTFTP99Ms))
	}
	for _, n := range names {
		row(n, s.Regions[n], s.LocalBaseline.Regions[n])
	}
	row("all", s.Overall, s.LocalBaseline.Overall)
	_ = tw.Flush()
	if unanswered {
		fmt.Fprintf(w, "(%s: more than 1%% of those requests got no first token — refused, failed or cut; the drops below say why)\n", unansweredCell)
	}
	fmt.Fprintf(w, "\nBy model (within the 1 s TTFT objective; ap-east has no %s engine, so its requests for it are forwarded, or fail with forwarding off):\n", LargeModel)
	for _, m := range []string{Model, LargeModel} {
		g, b := s.Models[m], s.LocalBaseline.Models[m]
		fmt.Fprintf(w, "  %-16s %5d requests, %5.1f%% within  |  local: %5.1f%%\n", m, g.Requests, 100*g.SLOAttainment, 100*b.SLOAttainment)
	}
}

func portList(ports []int) string {
	var parts []string
	for _, p := range ports {
		if p == 0 {
			return "free ports"
		}
		parts = append(parts, fmt.Sprint(p))
	}
	return strings.Join(parts, "/")
}
