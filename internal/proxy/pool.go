package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"skywalker/internal/apierr"
	"skywalker/internal/region"
)

// poolLoops keeps the replica pool current: metrics every ScrapeInterval,
// health checks (which re-admit ejected replicas) every HealthInterval,
// models every few seconds, and DNS re-resolution for a DNS-named pool.
type poolLoops struct {
	r        *Router
	client   *http.Client
	cfg      Config
	cp       region.ControlPlane
	log      *slog.Logger
	logEvery func(key string, level slog.Level, msg string, args ...any)
	kv       kvFollowers // kvevents.go
	kvCount  *prometheus.CounterVec
}

func (p *poolLoops) run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); every(ctx, p.cp.ScrapeInterval, p.scrapeAll) }()
	go func() { defer wg.Done(); every(ctx, p.cp.HealthInterval, p.healthAll) }()
	go func() {
		defer wg.Done()
		every(ctx, 5*time.Second, func(ctx context.Context) { p.modelsAll(ctx); p.syncKVFollowers(ctx) })
	}()
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
	out, err := cfg.pinnedReplicas()
	if err != nil {
		return nil, err
	}
	if len(cfg.WorkerPool) == 1 && !strings.Contains(cfg.WorkerPool[0], "://") {
		found, err := lookup(ctx, cfg.WorkerPool[0])
		return append(out, found...), err
	}
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
	pinned, _ := p.cfg.pinnedReplicas() // validated at start
	if err := p.r.SetReplicas(append(pinned, urls...)); err != nil {
		p.log.Warn("replica pool", "err", err)
	}
}

func (p *poolLoops) snapshot() []*replica { return p.r.replicaSides() }

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

// scrapeAll reads every replica's /metrics that is due. A replica that
// exposes neither vLLM nor SGLang names (llama.cpp servers, most OpenAI
// fronts) is balanced on the proxy's own in-flight counts and the
// concurrency it learns from first-token times; the proxy says so once,
// and scrapes it ever less often, doubling up to maxScrapeBackoff, in case
// metrics appear later.
func (p *poolLoops) scrapeAll(ctx context.Context) {
	var wg sync.WaitGroup
	now := time.Now()
	for _, rp := range p.snapshot() {
		if now.Before(p.scrapeDue(rp)) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			status := 0
			var known bool
			mark := p.r.MarkScrape(rp.name())
			resp, err := p.get(ctx, rp, "/metrics", time.Second)
			if err == nil {
				rp.answered.Store(time.Now().UnixNano())
			}
			if err != nil {
				known = p.r.ObserveScrape(rp.name(), mark, 0, nil)
			} else {
				status = resp.StatusCode
				known = p.r.ObserveScrape(rp.name(), mark, resp.StatusCode, resp.Body)
				resp.Body.Close()
			}
			p.scraped(rp, now, status, err, known)
		}()
	}
	wg.Wait()
	p.r.Pump()
}

// maxScrapeBackoff is the slowest a replica without metrics is scraped.
const maxScrapeBackoff = 30 * time.Second

// scrapeState is one replica's scrape schedule.
type scrapeState struct {
	next    time.Time     // not before
	backoff time.Duration // zero while it exposes metrics
	warned  bool
}

func (p *poolLoops) scrapeDue(rp *replica) time.Time { return rp.scrape.next }

// scraped schedules the replica's next scrape and logs the change into
// and out of metric-less balancing, once each way. A replica that is
// down (no answer at all) is not metric-less: health checks deal with it.
func (p *poolLoops) scraped(rp *replica, at time.Time, status int, err error, known bool) {
	st := &rp.scrape
	switch {
	case known:
		if st.warned {
			p.log.Info("replica now exposes engine metrics; balancing on them", "replica", rp.name())
		}
		*st = scrapeState{}
	case err != nil:
		st.next = time.Time{}
	default:
		if !st.warned {
			st.warned = true
			p.log.Warn("replica exposes no vLLM or SGLang metrics at /metrics; balancing it on SkyWalker's in-flight counts "+
				"and the concurrency it learns from first-token times (starting low, lowered while first tokens come late); "+
				"its speed against the profile is learned from the same first tokens and sets the first-byte timeout (60 s until the first one) "+
				"and admission; the settings that matter: SKYWALKER_MAX_IN_FLIGHT caps that concurrency, SKYWALKER_TTFT_SLO is what admission "+
				"promises, SKYWALKER_FIRST_BYTE_TIMEOUT replaces the learned timeout; re-checking ever less often",
				"replica", rp.name(), "status", status, "profile", p.cfg.Profile, "recheck_max", maxScrapeBackoff.String())
		}
		st.backoff = min(max(2*st.backoff, 2*p.cp.ScrapeInterval), maxScrapeBackoff)
		st.next = at.Add(st.backoff)
	}
}

// healthAll probes /health; the region core's rule ejects a replica that
// fails EjectAfter checks in a row and re-admits one that passes twice. A
// check that times out while the replica answers its scrapes is slow, not
// down, and passes: an engine's /health can lag behind a busy engine loop
// while its server answers everything else.
func (p *poolLoops) healthAll(ctx context.Context) {
	var wg sync.WaitGroup
	for _, rp := range p.snapshot() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			asked := time.Now()
			resp, err := p.get(ctx, rp, "/health", healthTimeout)
			ok := err == nil && resp.StatusCode < 500
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
				ok = time.Unix(0, rp.answered.Load()).After(asked) // a scrape answered while /health did not
			}
			if err == nil {
				resp.Body.Close()
			}
			p.r.ObserveHealth(rp.name(), ok)
		}()
	}
	wg.Wait()
}

// healthTimeout bounds one /health check.
const healthTimeout = 2 * time.Second

// modelCard is one model as a replica's /v1/models lists it: its id, and
// the object exactly as the engine sent it (owned_by, created, max_model_len
// and whatever else), passed through to clients.
type modelCard struct {
	ID string
	// Parent is the base model of a LoRA adapter's card (vLLM lists each
	// --lora-modules adapter with its base as parent); "" for a base model.
	Parent string
	Raw    json.RawMessage
}

// modelsAll learns which models each replica serves, and places the
// replicas in their models' pools again when that changed.
func (p *poolLoops) modelsAll(ctx context.Context) {
	changed := false
	for _, rp := range p.snapshot() {
		resp, err := p.get(ctx, rp, "/v1/models", 2*time.Second)
		if err != nil {
			continue
		}
		cards, err := parseModels(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if err != nil {
			continue
		}
		old := rp.models.Swap(&cards)
		changed = changed || old == nil || !sameBases(*old, cards)
	}
	if changed {
		if err := p.r.modelsLearned(); err != nil {
			p.log.Warn("replica pools", "err", err)
		}
	}
}

// sameBases reports whether two model lists name the same base models.
func sameBases(a, b []modelCard) bool {
	bases := func(cards []modelCard) []string {
		var out []string
		for _, c := range cards {
			if c.Parent == "" {
				out = append(out, c.ID)
			}
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(bases(a), bases(b))
}

// parseModels reads an OpenAI model list; an entry without an id is an
// error.
func parseModels(r io.Reader) ([]modelCard, error) {
	var list struct {
		Data []json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(r).Decode(&list); err != nil {
		return nil, fmt.Errorf("model list: %w", err)
	}
	cards := make([]modelCard, 0, len(list.Data))
	for i, raw := range list.Data {
		var m struct {
			ID     string  `json:"id"`
			Parent *string `json:"parent"`
		}
		if err := json.Unmarshal(raw, &m); err != nil || m.ID == "" {
			return nil, fmt.Errorf("model list: entry %d has no id", i)
		}
		c := modelCard{ID: m.ID, Raw: raw}
		if m.Parent != nil && *m.Parent != m.ID {
			c.Parent = *m.Parent
		}
		cards = append(cards, c)
	}
	return cards, nil
}

// remoteModel is a model peer regions serve, and which.
type remoteModel struct {
	id      string
	regions []string
}

// remoteModels lists the models healthy peer regions serve (as their
// load summaries list them), sorted.
func (r *Router) remoteModels() []remoteModel {
	var peers []region.Peer
	r.do(func(n *region.Node) { peers = slices.Clone(n.Peers()) })
	by := map[string][]string{}
	for _, p := range peers {
		if !p.Healthy {
			continue
		}
		for _, m := range p.Load.Models {
			if m.Model != "" { // replicas whose models it does not know yet
				by[m.Model] = append(by[m.Model], p.Region)
			}
		}
	}
	out := make([]remoteModel, 0, len(by))
	for _, id := range slices.Sorted(maps.Keys(by)) {
		out = append(out, remoteModel{id: id, regions: by[id]})
	}
	return out
}

// resolve names the pool that serves model (aliases already resolved):
// its base model and LoRA adapter. A model served here or by a peer is
// its own base; a LoRA adapter a replica lists goes to its parent's pool;
// a request that names no model goes to the one model this region
// serves. Anything else goes to the replicas whose models are not known
// yet, if there are any, else it is refused: 404 with the models that are
// served, or 400 when the model is missing and several are served.
func (r *Router) resolve(model string) (base, adapter string, err *apierr.Error) {
	r.do(func(n *region.Node) { base, adapter, err = n.Resolve(model, r.adapterParent) })
	return base, adapter, err
}

// adapterParent is the base model whose replicas list adapter among their
// models, or "". Called with the router's lock held.
func (r *Router) adapterParent(adapter string) string {
	for _, rp := range r.replicas {
		if cards := rp.models.Load(); cards != nil {
			for _, c := range *cards {
				if c.ID == adapter && c.Parent != "" {
					return c.Parent
				}
			}
		}
	}
	return ""
}

// SetReplicas makes the pool exactly urls (sorted by host), keeping the
// state of replicas that stay and forgetting those that left; each goes
// to the pools of the models it serves (see placeReplicas).
func (r *Router) SetReplicas(urls []*url.URL) error {
	urls = slices.Clone(urls)
	slices.SortFunc(urls, func(a, b *url.URL) int { return strings.Compare(a.Host, b.Host) })
	urls = slices.CompactFunc(urls, func(a, b *url.URL) bool { return a.Host == b.Host })
	var err error
	r.do(func(n *region.Node) {
		byHost := map[string]*replica{}
		for _, rp := range r.replicas {
			byHost[rp.host] = rp
		}
		r.replicas = r.replicas[:0]
		for _, u := range urls {
			rp := byHost[u.Host]
			if rp == nil {
				rp = &replica{host: u.Host}
			}
			rp.url = u
			r.replicas = append(r.replicas, rp)
		}
		err = r.placeReplicas(n)
	})
	return err
}

// placeReplicas puts every replica in the pool of each model it serves:
// those the operator pinned it to (model_pools), else the base models its
// /v1/models lists (an adapter's card names its base as parent); a
// replica whose models are not known yet goes to the pool of the unnamed
// model "", which serves what no known pool does. Called inside
// Router.do, after the replicas or their models changed.
func (r *Router) placeReplicas(n *region.Node) error {
	byModel := map[string][]region.ReplicaSpec{}
	for _, rp := range r.replicas {
		for _, m := range r.modelsOf(rp) {
			byModel[m] = append(byModel[m], region.ReplicaSpec{Name: rp.host})
		}
	}
	return n.SetReplicas(byModel)
}

// modelsOf is the base models rp serves (see placeReplicas).
func (r *Router) modelsOf(rp *replica) []string {
	var out []string
	for model, urls := range r.cfg.ModelPools {
		for _, u := range urls {
			if pu, err := url.Parse(u); err == nil && pu.Host == rp.host {
				out = append(out, model)
			}
		}
	}
	if len(out) > 0 {
		slices.Sort(out)
		return out
	}
	cards := rp.models.Load()
	if cards == nil {
		return []string{""}
	}
	for _, c := range *cards {
		if c.Parent == "" {
			out = append(out, c.ID)
		}
	}
	if len(out) == 0 {
		return []string{""}
	}
	return out
}

// modelsLearned places the replicas again after rp's /v1/models answered
// with a different list.
func (r *Router) modelsLearned() (err error) {
	r.do(func(n *region.Node) { err = r.placeReplicas(n) })
	return err
}

// ObserveScrape records one scrape of the named replica, in every pool it
// serves: the status and body of its /metrics answer (status 0: the
// scrape failed). A page without vLLM or SGLang names leaves the engine's
// queue unknown. It reports whether the engine exposed queue metrics.
func (r *Router) ObserveScrape(replica string, mark region.ScrapeMark, status int, page io.Reader) bool {
	var m region.Metrics
	if status == http.StatusOK && page != nil {
		m, _ = parseEngineMetrics(page)
	}
	r.do(func(n *region.Node) { n.Scraped(replica, m, mark) })
	return m.Known
}

// MarkScrape is called as a scrape of the named replica begins; its mark
// goes to ObserveScrape.
func (r *Router) MarkScrape(replica string) (mark region.ScrapeMark) {
	r.do(func(n *region.Node) { mark = n.MarkScrape(replica) })
	return mark
}

// ObserveHealth records one health check of the named replica.
func (r *Router) ObserveHealth(replica string, ok bool) {
	r.do(func(n *region.Node) {
		n.HealthChecked(replica, ok)
		r.endUnansweredIfEjected(replica)
	})
}

// modelCards returns the union of the replicas' model cards, one per id
// (the first replica's, in pool order), sorted by id, and whether any
// replica reported its models yet.
func (r *Router) modelCards() ([]modelCard, bool) {
	seen := map[string]bool{}
	known := false
	var out []modelCard
	for _, rp := range r.replicaSides() {
		cards := rp.models.Load()
		if cards == nil {
			continue
		}
		known = true
		for _, m := range *cards {
			if !seen[m.ID] {
				seen[m.ID] = true
				out = append(out, m)
			}
		}
	}
	slices.SortFunc(out, func(a, b modelCard) int { return strings.Compare(a.ID, b.ID) })
	return out, known
}
