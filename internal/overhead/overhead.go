// Package overhead measures what a gateway adds in front of an engine
// that answers at once, beside nginx and HAProxy, in one run: added
// latency at a fixed request rate (1 KB and 400 KB chat bodies, 1 and 16
// connections, time to the first byte of a stream), maximum requests/s
// per core and CPU per request (wrk, each gateway pinned to one core, the
// client and the upstream on another), and resident memory. It starts
// every process it measures and stops them all, whatever happens
// (`skywalker bench gateway`; README "Measurements: the proxy").
package overhead

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// Config is one benchmark run.
type Config struct {
	Exe        string        // the skywalker binary (serve is started from it)
	Dir        string        // scratch directory for configurations and logs
	Duration   time.Duration // each measurement's length; default 5 s
	Rate       float64       // requests/s of the fixed-rate runs on one connection; default 200 (×8 on 16)
	ProxyCore  int           // the core every gateway is pinned to; -1: not pinned
	ClientCore int           // the core wrk is pinned to
	// Sustain, if positive, also runs SkyWalker at 3,000 requests/s on 16
	// connections for that long and reports its resident memory.
	Sustain time.Duration
	// Profile, if set, is a directory where SkyWalker's CPU profile
	// (cpu.pprof) and allocation profile (allocs.pprof) under the maximum
	// throughput run are written: the hot path as it serves.
	Profile string
	Log     io.Writer // progress lines
}

// Row is one gateway's measurements: latencies in µs (absolute for the
// upstream alone, added over it for a gateway).
type Row struct {
	Name                        string
	P50_1KB, P99_1KB            float64
	P50_1KB16, P99_1KB16        float64
	P50_400KB, P99_400KB        float64
	TTFB50, TTFB99              float64
	MaxRPS                      float64 // 1 KB, 16 connections, one core
	CPU1KB, CPU400KB            float64 // µs of the gateway's CPU per request
	RSSMB, PeakMB               float64
	SustainRSSMB, SustainPeakMB float64
	SustainRPS                  float64
}

// Run measures the upstream alone and each gateway found (SkyWalker
// always; nginx and HAProxy when installed, else a note says so), and
// returns the rows, direct first.
func Run(ctx context.Context, cfg Config) ([]Row, []string, error) {
	if cfg.Duration <= 0 {
		cfg.Duration = 5 * time.Second
	}
	if cfg.Rate <= 0 {
		cfg.Rate = 200
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		cfg.ProxyCore, cfg.ClientCore = -1, -1
	}
	if _, err := exec.LookPath("wrk"); err != nil {
		return nil, nil, errors.New("wrk is not installed (apt-get install wrk; scripts/gateway-bench.sh installs it)")
	}
	up, err := StartUpstream()
	if err != nil {
		return nil, nil, err
	}
	defer up.Close()
	var notes []string
	targets := []*Target{{Name: "direct", URL: up.URL}}
	sky, err := StartSkyWalker(ctx, cfg.Dir, cfg.Exe, up.URL, cfg.ProxyCore, cfg.Profile != "")
	if err != nil {
		return nil, nil, err
	}
	defer sky.Stop()
	targets = append(targets, sky)
	for _, s := range []struct {
		name  string
		start func(dir, upstream string, core int) (*Target, error)
	}{{"nginx", StartNginx}, {"haproxy", StartHAProxy}} {
		t, err := s.start(cfg.Dir, up.URL, cfg.ProxyCore)
		if err != nil {
			notes = append(notes, fmt.Sprintf("no %s column: %v", s.name, err))
			continue
		}
		defer t.Stop()
		targets = append(targets, t)
	}
	rows := make([]Row, len(targets))
	for i, t := range targets {
		rows[i].Name = t.Name
	}
	if err := measureLatencies(ctx, cfg, targets, rows); err != nil {
		return nil, notes, err
	}
	for i, t := range targets {
		fmt.Fprintf(cfg.Log, "measuring %s's throughput ...\n", t.Name)
		if err := measureThroughput(ctx, cfg, t, &rows[i]); err != nil {
			return nil, notes, fmt.Errorf("%s: %w", t.Name, err)
		}
	}
	if cfg.Sustain > 0 {
		fmt.Fprintf(cfg.Log, "sustaining 3,000 requests/s through skywalker for %v ...\n", cfg.Sustain)
		lat, err := Latencies(ctx, sky.URL, ChatBody(1<<10, false), 16, 3000, cfg.Sustain, false)
		if err != nil {
			return rows, notes, fmt.Errorf("sustained run: %w", err)
		}
		rows[1].SustainRPS = float64(len(lat)) / cfg.Sustain.Seconds()
		rows[1].SustainRSSMB, rows[1].SustainPeakMB = RSS(sky.PID)
	}
	// Latencies over the upstream alone are what each gateway adds.
	for i := 1; i < len(rows); i++ {
		d, r := rows[0], &rows[i]
		r.P50_1KB, r.P99_1KB = r.P50_1KB-d.P50_1KB, r.P99_1KB-d.P99_1KB
		r.P50_1KB16, r.P99_1KB16 = r.P50_1KB16-d.P50_1KB16, r.P99_1KB16-d.P99_1KB16
		r.P50_400KB, r.P99_400KB = r.P50_400KB-d.P50_400KB, r.P99_400KB-d.P99_400KB
		r.TTFB50, r.TTFB99 = r.TTFB50-d.TTFB50, r.TTFB99-d.TTFB99
	}
	return rows, notes, nil
}

// rounds is how many turns the targets take at each latency measurement:
// interleaved in short turns, they see the same drift of a shared machine.
const rounds = 5

// measureLatencies runs the fixed-rate measurements, the targets taking
// turns, and sets each row's percentiles.
func measureLatencies(ctx context.Context, cfg Config, targets []*Target, rows []Row) error {
	small, large, stream := ChatBody(1<<10, false), ChatBody(400<<10, false), ChatBody(1<<10, true)
	runs := []struct {
		name      string
		body      []byte
		conns     int
		rate      float64
		firstByte bool
		p50, p99  func(*Row) *float64
	}{
		{"1 KB, 1 connection", small, 1, cfg.Rate, false, func(r *Row) *float64 { return &r.P50_1KB }, func(r *Row) *float64 { return &r.P99_1KB }},
		{"1 KB, 16 connections", small, 16, 8 * cfg.Rate, false, func(r *Row) *float64 { return &r.P50_1KB16 }, func(r *Row) *float64 { return &r.P99_1KB16 }},
		{"400 KB, 1 connection", large, 1, cfg.Rate / 4, false, func(r *Row) *float64 { return &r.P50_400KB }, func(r *Row) *float64 { return &r.P99_400KB }},
		{"a stream's first byte", stream, 1, cfg.Rate, true, func(r *Row) *float64 { return &r.TTFB50 }, func(r *Row) *float64 { return &r.TTFB99 }},
	}
	turn := cfg.Duration / rounds
	for _, run := range runs {
		fmt.Fprintf(cfg.Log, "measuring latency: %s ...\n", run.name)
		samples := make([][]float64, len(targets))
		for range rounds {
			for i, t := range targets {
				lat, err := Latencies(ctx, t.URL, run.body, run.conns, run.rate, turn, run.firstByte)
				if err != nil {
					return fmt.Errorf("%s, %s: %w", t.Name, run.name, err)
				}
				samples[i] = append(samples[i], lat...)
			}
		}
		for i := range rows {
			*run.p50(&rows[i]), *run.p99(&rows[i]) = pctl(samples[i], 0.5), pctl(samples[i], 0.99)
		}
	}
	return nil
}

// measureThroughput runs wrk against one target: 1 KB on 16 connections
// (its maximum requests/s, and its CPU per request, profiled when asked),
// then 400 KB on one (its CPU per request); and reads its memory.
func measureThroughput(ctx context.Context, cfg Config, t *Target, r *Row) error {
	small, large := ChatBody(1<<10, false), ChatBody(400<<10, false)
	d := cfg.Duration
	profiled := make(chan error, 1)
	if t.Admin != "" {
		go func() { profiled <- profile(ctx, t.Admin, cfg.Profile, d) }()
	} else {
		profiled <- nil
	}
	tp, err := MaxThroughput(ctx, cfg.Dir, t.URL, small, 16, d, cfg.ClientCore, t.PID)
	if perr := <-profiled; err == nil && perr != nil {
		err = fmt.Errorf("profile: %w", perr)
	}
	if err != nil {
		return err
	}
	r.MaxRPS, r.CPU1KB = tp.RPS, tp.CPUPerUs
	if tp, err = MaxThroughput(ctx, cfg.Dir, t.URL, large, 1, d, cfg.ClientCore, t.PID); err != nil {
		return err
	}
	r.CPU400KB = tp.CPUPerUs
	if t.PID > 0 {
		r.RSSMB, r.PeakMB = RSS(t.PID)
	}
	return nil
}

// Table writes rows as a Markdown table, with each gateway's ratio to
// nginx's where nginx was measured.
func Table(w io.Writer, rows []Row) {
	fmt.Fprintln(w, "| gateway | 1 KB p50 | 1 KB p99 | 1 KB p50 @16 | 1 KB p99 @16 | 400 KB p50 | 400 KB p99 | stream TTFB p50 | max req/s (1 core) | CPU µs/req 1 KB | CPU µs/req 400 KB | RSS MB (peak) |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	us := func(v float64) string { return fmt.Sprintf("%.0f µs", v) }
	var nginx *Row
	for i := range rows {
		if rows[i].Name == "nginx" {
			nginx = &rows[i]
		}
	}
	for i, r := range rows {
		name := r.Name + " (added)"
		if i == 0 {
			name = "upstream alone (absolute)"
		}
		cpu1, cpu400, rss := "—", "—", "—"
		if r.Name != "direct" {
			cpu1, cpu400, rss = fmt.Sprintf("%.0f", r.CPU1KB), fmt.Sprintf("%.0f", r.CPU400KB), fmt.Sprintf("%.0f (%.0f)", r.RSSMB, r.PeakMB)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %.0f | %s | %s | %s |\n", name, us(r.P50_1KB), us(r.P99_1KB), us(r.P50_1KB16), us(r.P99_1KB16),
			us(r.P50_400KB), us(r.P99_400KB), us(r.TTFB50), r.MaxRPS, cpu1, cpu400, rss)
	}
	if nginx == nil {
		return
	}
	for _, r := range rows[1:] {
		if r.Name == "nginx" {
			continue
		}
		ratio := func(a, b float64) string {
			if b == 0 {
				return "—"
			}
			return fmt.Sprintf("%.2f×", a/b)
		}
		diff := func(a, b float64) string { return fmt.Sprintf("%+.0f µs", a-b) }
		fmt.Fprintf(w, "| %s vs nginx | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Name, diff(r.P50_1KB, nginx.P50_1KB), diff(r.P99_1KB, nginx.P99_1KB),
			diff(r.P50_1KB16, nginx.P50_1KB16), diff(r.P99_1KB16, nginx.P99_1KB16), diff(r.P50_400KB, nginx.P50_400KB), diff(r.P99_400KB, nginx.P99_400KB),
			diff(r.TTFB50, nginx.TTFB50), ratio(r.MaxRPS, nginx.MaxRPS), ratio(r.CPU1KB, nginx.CPU1KB), ratio(r.CPU400KB, nginx.CPU400KB), ratio(r.RSSMB, nginx.RSSMB))
	}
	for _, r := range rows {
		if r.SustainRPS > 0 {
			fmt.Fprintf(w, "\n%s sustained %.0f requests/s: RSS %.0f MB (peak %.0f MB).\n", r.Name, r.SustainRPS, r.SustainRSSMB, r.SustainPeakMB)
		}
	}
}

// Pinning says how the run was pinned, for the table's caption.
func Pinning(cfg Config) string {
	if cfg.ProxyCore < 0 {
		return "not pinned (no taskset)"
	}
	return fmt.Sprintf("each gateway on core %d; wrk, the Go client and the upstream on core %d", cfg.ProxyCore, cfg.ClientCore)
}

// profile saves the CPU profile of the process behind admin over d, then
// its allocation profile, into dir.
func profile(ctx context.Context, admin, dir string, d time.Duration) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, p := range []struct{ path, file string }{
		{fmt.Sprintf("/debug/pprof/profile?seconds=%d", max(int(d.Seconds())-1, 1)), "cpu.pprof"},
		{"/debug/pprof/allocs", "allocs.pprof"},
	} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, admin+p.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s %v", p.path, resp.Status, err)
		}
		if err := os.WriteFile(filepath.Join(dir, p.file), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}
