package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"skywalker/internal/region"
)

// poolLoops keeps the replica pool current: metrics every ScrapeInterval,
// health checks (which re-admit ejected replicas) every HealthInterval,
// models every few seconds, and DNS re-resolution for a DNS-named pool.
type poolLoops struct {
	r      *Router
	client *http.Client
	cfg    Config
	cp     region.ControlPlane
	log    *slog.Logger
}

func (p *poolLoops) run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); every(ctx, p.cp.ScrapeInterval, p.scrapeAll) }()
	go func() { defer wg.Done(); every(ctx, p.cp.HealthInterval, p.healthAll) }()
	go func() { defer wg.Done(); every(ctx, 5*time.Second, p.modelsAll) }()
	if dns := p.dnsName(); dns != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			every(ctx, p.cfg.ResolveInterval, func(ctx context.Context) { p.resolve(ctx, dns) })
		}()
	}
	wg.Wait()
}

// every runs fn now and then every d until ctx ends.
func every(ctx context.Context, d time.Duration, fn func(context.Context)) {
	fn(ctx)
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn(ctx)
		}
	}
}

// initialReplicas returns the pool's URLs from configuration (a DNS pool
// is resolved once here).
func initialReplicas(ctx context.Context, cfg Config) ([]*url.URL, error) {
	if len(cfg.WorkerPool) == 1 && !strings.Contains(cfg.WorkerPool[0], "://") {
		return lookup(ctx, cfg.WorkerPool[0])
	}
	var out []*url.URL
	for _, w := range cfg.WorkerPool {
		u, err := url.Parse(strings.TrimRight(w, "/"))
		if err != nil {
			return nil, fmt.Errorf("worker %q: %w", w, err)
		}
		out = append(out, u)
	}
	return out, nil
}

func (p *poolLoops) dnsName() string {
	if len(p.cfg.WorkerPool) == 1 && !strings.Contains(p.cfg.WorkerPool[0], "://") {
		return p.cfg.WorkerPool[0]
	}
	return ""
}

// lookup resolves name[:port] (default port 8000) to replica URLs, as a
// Kubernetes headless Service's A records list its pods.
func lookup(ctx context.Context, name string) ([]*url.URL, error) {
	host, port, err := net.SplitHostPort(name)
	if err != nil {
		host, port = name, "8000"
	}
	ips, err := net.DefaultResolver.LookupHost(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("resolve worker pool %s: %w", host, err)
	}
	slices.Sort(ips)
	var out []*url.URL
	for _, ip := range ips {
		out = append(out, &url.URL{Scheme: "http", Host: net.JoinHostPort(ip, port)})
	}
	return out, nil
}

func (p *poolLoops) resolve(ctx context.Context, name string) {
	urls, err := lookup(ctx, name)
	if err != nil || len(urls) == 0 {
		return // keep the last known pool
	}
	if err := p.r.SetReplicas(urls); err != nil {
		p.log.Warn("replica pool", "err", err)
	}
}

func (p *poolLoops) snapshot() []*replica {
	p.r.mu.Lock()
	defer p.r.mu.Unlock()
	return slices.Clone(p.r.replicas)
}

func (p *poolLoops) get(ctx context.Context, rp *replica, path string, timeout time.Duration) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rp.url.String()+path, nil)
	if err != nil {
		cancel()
		return nil, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = cancelOnClose{resp.Body, cancel}
	return resp, nil
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c cancelOnClose) Close() error { err := c.ReadCloser.Close(); c.cancel(); return err }

// scrapeAll reads every replica's /metrics; replicas that expose neither
// vLLM nor SGLang names keep zero engine counts and are balanced on the
// proxy's own in-flight numbers.
func (p *poolLoops) scrapeAll(ctx context.Context) {
	var wg sync.WaitGroup
	for _, rp := range p.snapshot() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := p.get(ctx, rp, "/metrics", time.Second)
			if err != nil {
				p.r.ObserveScrape(rp.name(), 0, nil)
				return
			}
			p.r.ObserveScrape(rp.name(), resp.StatusCode, resp.Body)
			resp.Body.Close()
		}()
	}
	wg.Wait()
	p.r.Pump()
}

// healthAll probes /health; the region core's rule ejects a replica that
// fails EjectAfter checks in a row and re-admits one that passes twice.
func (p *poolLoops) healthAll(ctx context.Context) {
	var wg sync.WaitGroup
	for _, rp := range p.snapshot() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := p.get(ctx, rp, "/health", 2*time.Second)
			ok := err == nil && resp.StatusCode < 500
			if err == nil {
				resp.Body.Close()
			}
			p.r.ObserveHealth(rp.name(), ok)
		}()
	}
	wg.Wait()
}

// modelsAll learns which models each replica serves.
func (p *poolLoops) modelsAll(ctx context.Context) {
	for _, rp := range p.snapshot() {
		resp, err := p.get(ctx, rp, "/v1/models", 2*time.Second)
		if err != nil {
			continue
		}
		var list struct {
			Data []struct {
				ID string `json:"id"`
			} `json:"data"`
		}
		err = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&list)
		resp.Body.Close()
		if err != nil {
			continue
		}
		var models []string
		for _, m := range list.Data {
			models = append(models, m.ID)
		}
		p.r.mu.Lock()
		rp.models = models
		p.r.mu.Unlock()
	}
}

// models returns the union of the replicas' models, sorted, and whether
// any replica reported its models yet.
func (r *Router) models() ([]string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	known := false
	for _, rp := range r.replicas {
		if rp.models != nil {
			known = true
		}
		for _, m := range rp.models {
			seen[m] = true
		}
	}
	out := make([]string, 0, len(seen))
	for m := range seen {
		out = append(out, m)
	}
	slices.Sort(out)
	return out, known
}
