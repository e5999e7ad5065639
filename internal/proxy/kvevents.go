package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"skywalker/internal/kvevents"
	"skywalker/internal/kvevents/kvzmq"
	"skywalker/internal/region"
)

// KV events: with kv_events set, the proxy subscribes to each replica's
// KV-cache events (vLLM's --kv-events-config, SGLang's --kv-events-config)
// and the replica's prefix index rests on them (region/enginecache.go).
// Where a replica publishes comes from its GET /kv_event_sources
// (kv_events: discover) or from a template every replica shares
// ("tcp://{host}:5557|tcp://{host}:5558|topic": the PUB endpoint, the
// replay endpoint, the topic; {host} is the replica's host).

// kvSources is where the replica rp publishes its KV events, per
// kv_events.
func (p *poolLoops) kvSources(ctx context.Context, rp *replica) ([]kvzmq.Source, error) {
	host := rp.url.Hostname()
	if p.cfg.KVEvents != "discover" {
		src, err := parseKVTemplate(p.cfg.KVEvents, host)
		if err != nil {
			return nil, err
		}
		return []kvzmq.Source{src}, nil
	}
	resp, err := p.get(ctx, rp, "/kv_event_sources", 2*time.Second)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("GET /kv_event_sources: %s", resp.Status)
	}
	out, err := parseKVSources(io.LimitReader(resp.Body, 1<<20), host)
	if err != nil {
		return nil, fmt.Errorf("GET /kv_event_sources: %w", err)
	}
	return out, nil
}

// maxKVSources bounds the sources (data-parallel ranks) one replica lists.
const maxKVSources = 256

// parseKVSources reads vLLM's /kv_event_sources answer,
// {"sources":[{data_parallel_rank, endpoint, replay_endpoint, topic}]}, for
// a replica on host: a bind-all endpoint host becomes the replica's.
func parseKVSources(r io.Reader, host string) ([]kvzmq.Source, error) {
	var list struct {
		Sources []struct {
			Rank           int    `json:"data_parallel_rank"`
			Endpoint       string `json:"endpoint"`
			ReplayEndpoint string `json:"replay_endpoint"`
			Topic          string `json:"topic"`
		} `json:"sources"`
	}
	if err := json.NewDecoder(r).Decode(&list); err != nil {
		return nil, err
	}
	if len(list.Sources) > maxKVSources {
		return nil, fmt.Errorf("%d sources, over %d", len(list.Sources), maxKVSources)
	}
	var out []kvzmq.Source
	for i, s := range list.Sources {
		if !strings.HasPrefix(s.Endpoint, "tcp://") || s.ReplayEndpoint != "" && !strings.HasPrefix(s.ReplayEndpoint, "tcp://") || s.Rank < 0 {
			return nil, fmt.Errorf("source %d: endpoint %q, replay %q, rank %d: want tcp:// endpoints and a rank from 0", i, s.Endpoint, s.ReplayEndpoint, s.Rank)
		}
		src := kvzmq.Source{Endpoint: onHost(s.Endpoint, host), Topic: s.Topic, Rank: s.Rank}
		if s.ReplayEndpoint != "" {
			src.ReplayEndpoint = onHost(s.ReplayEndpoint, host)
		}
		out = append(out, src)
	}
	return out, nil
}

// parseKVTemplate reads a kv_events template for a replica on host.
func parseKVTemplate(t, host string) (kvzmq.Source, error) {
	parts := strings.Split(strings.ReplaceAll(t, "{host}", host), "|")
	if len(parts) > 3 || !strings.HasPrefix(parts[0], "tcp://") {
		return kvzmq.Source{}, fmt.Errorf("kv_events %q: want discover, off, or tcp://{host}:PORT[|tcp://{host}:REPLAY_PORT[|TOPIC]]", t)
	}
	src := kvzmq.Source{Endpoint: parts[0]}
	if len(parts) > 1 && parts[1] != "" {
		if !strings.HasPrefix(parts[1], "tcp://") {
			return src, fmt.Errorf("kv_events %q: the replay endpoint must be tcp://", t)
		}
		src.ReplayEndpoint = parts[1]
	}
	if len(parts) > 2 {
		src.Topic = parts[2]
	}
	return src, nil
}

// onHost is a published endpoint with a bind-all host ("*", 0.0.0.0, ::)
// replaced by the replica's.
func onHost(endpoint, host string) string {
	addr, ok := strings.CutPrefix(endpoint, "tcp://")
	if !ok {
		return endpoint
	}
	h, port, err := net.SplitHostPort(addr)
	if err != nil {
		return endpoint
	}
	if h == "*" || h == "0.0.0.0" || h == "::" || h == "" {
		h = host
	}
	return "tcp://" + net.JoinHostPort(h, port)
}

// kvFollowers keeps one follower per replica while kv_events is on.
type kvFollowers struct {
	mu      sync.Mutex
	running map[string]context.CancelFunc // by replica host:port
}

// sync starts followers for replicas that have none (once their sources
// are known) and stops those of replicas that left.
func (p *poolLoops) syncKVFollowers(ctx context.Context) {
	if p.cfg.KVEvents == "" || p.cfg.KVEvents == "off" {
		return
	}
	f := &p.kv
	current := map[string]bool{}
	for _, rp := range p.snapshot() {
		current[rp.host] = true
		f.mu.Lock()
		_, on := f.running[rp.host]
		f.mu.Unlock()
		if on {
			continue
		}
		sources, err := p.kvSources(ctx, rp)
		if err != nil || len(sources) == 0 {
			p.log.Debug("kv events: no sources yet", "replica", rp.host, "err", err)
			continue
		}
		fctx, cancel := context.WithCancel(ctx)
		f.mu.Lock()
		if f.running == nil {
			f.running = map[string]context.CancelFunc{}
		}
		f.running[rp.host] = cancel
		f.mu.Unlock()
		for _, src := range sources {
			go p.follow(fctx, rp.host, src)
		}
		p.log.Info("kv events: following", "replica", rp.host, "sources", len(sources), "endpoint", sources[0].Endpoint)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for host, cancel := range f.running {
		if !current[host] {
			cancel()
			delete(f.running, host)
		}
	}
}

// follow follows one source until ctx ends, starting again after an error.
func (p *poolLoops) follow(ctx context.Context, host string, src kvzmq.Source) {
	sink := kvSink{r: p.r, host: host, log: p.log, logEvery: p.logEvery, count: p.kvCount}
	for ctx.Err() == nil {
		if err := kvzmq.Follow(ctx, src, sink); err != nil {
			sink.Lost(src.Rank, err.Error())
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// kvSink applies a replica's KV events to the router.
type kvSink struct {
	r        *Router
	host     string
	log      *slog.Logger
	logEvery func(key string, level slog.Level, msg string, args ...any)
	count    *prometheus.CounterVec // replica, event; nil in tests that build no metrics
}

func (k kvSink) counted(event string) {
	if k.count != nil {
		k.count.WithLabelValues(k.host, event).Inc()
	}
}

func (k kvSink) Batch(rank int, b kvevents.Batch) {
	k.counted("batch")
	k.r.engineEvents(k.host, rank, b.Events)
}

func (k kvSink) Restarted(rank int) {
	k.counted("restart")
	k.log.Info("kv events: the engine's sequence began again (a restart): its cache is empty", "replica", k.host, "rank", rank)
	k.r.engineRestarted(k.host)
}

func (k kvSink) Lost(rank int, why string) {
	k.counted("lost")
	k.logEvery("kv-events-lost\x00"+k.host, slog.LevelWarn, "kv events: the engine's cache is no longer known exactly; its index rests on belief until rebuilt",
		"replica", k.host, "rank", rank, "why", why)
	k.r.engineLost(k.host)
}

// engineEvents applies a batch of a replica's KV events in every pool it
// serves.
func (r *Router) engineEvents(host string, rank int, events []kvevents.Event) {
	r.do(func(n *region.Node) { n.EngineEvents(r.now(), host, rank, events) })
}

func (r *Router) engineRestarted(host string) {
	r.do(func(n *region.Node) { n.EngineStreamChanged(host, region.StreamRestarted) })
}

func (r *Router) engineLost(host string) {
	r.do(func(n *region.Node) { n.EngineStreamChanged(host, region.StreamLost) })
}
