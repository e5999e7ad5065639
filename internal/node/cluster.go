package node

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"skywalker/internal/engine/server"
	"skywalker/internal/mesh"
	"skywalker/internal/proxy"
	"skywalker/internal/tracing"
)

// Topology is a set of regions and the round-trip times between them.
type Topology struct {
	Regions []TopologyRegion
	RTTs    map[[2]string]time.Duration // either order
}

// TopologyRegion is one region of a topology.
type TopologyRegion struct {
	Name, Jurisdiction string
	UTCOffset          float64 // hours, for diurnal demand
}

// ThreeRegions is the topology of the demo, the end-to-end tests and the
// diurnal-3region scenario: us-east, eu-west and ap-east, 72 ms between
// us-east and eu-west, 160 ms us-east–ap-east, 180 ms eu-west–ap-east
// (public cloud backbone figures, see DESIGN.md).
var ThreeRegions = Topology{
	Regions: []TopologyRegion{{"us-east", "us", -5}, {"eu-west", "eu", 0}, {"ap-east", "ap", 9}},
	RTTs: map[[2]string]time.Duration{
		{"us-east", "eu-west"}: 72 * time.Millisecond,
		{"us-east", "ap-east"}: 160 * time.Millisecond,
		{"eu-west", "ap-east"}: 180 * time.Millisecond,
	},
}

// RTT is the round-trip time between two regions (zero if not listed).
func (t Topology) RTT(a, b string) time.Duration {
	if d, ok := t.RTTs[[2]string{a, b}]; ok {
		return d
	}
	return t.RTTs[[2]string{b, a}]
}

// Links returns an emulator carrying the topology's RTTs.
func (t Topology) Links() *mesh.Links {
	l := mesh.NewLinks()
	for pair, rtt := range t.RTTs {
		l.SetRTT(pair[0], pair[1], rtt)
	}
	return l
}

// String lists the links, e.g. "ap-east↔eu-west 180ms, ...".
func (t Topology) String() string {
	var parts []string
	for pair, rtt := range t.RTTs {
		parts = append(parts, fmt.Sprintf("%s↔%s %v", pair[0], pair[1], rtt))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// DevKey is the gossip key of clusters on one machine: fixed and public,
// for loopback only.
var DevKey = base64.StdEncoding.EncodeToString([]byte("skywalker-demo-key-loopback-only"))

// ClusterOptions shape a cluster on one machine.
type ClusterOptions struct {
	Topology         Topology // default ThreeRegions
	EnginesPerRegion int      // default 2
	// Engine is every simulated engine's configuration (each gets its own
	// seed).
	Engine server.Config
	// RegionEngines, if set, gives each region's engines instead of
	// EnginesPerRegion copies of Engine (a fleet of several models: each
	// engine serves its own; each still gets its own seed).
	RegionEngines func(region string) []server.Config
	// Proxy, if set, adjusts each region's proxy configuration after the
	// cluster's defaults (region, jurisdiction, its engines, the dev key,
	// the local mesh preset, a 200 ms WAN threshold, 50 ms scrapes).
	Proxy func(cfg *proxy.Config)
	// Mesh, if set, adjusts each mesh configuration after the cluster's
	// defaults (probes every 100 ms, gates reopening after 3 good samples,
	// load summaries every 100 ms, digests every 300 ms).
	Mesh func(*mesh.Config)
	// Ports are the proxies' ports by region index; 0 or missing picks a
	// free one.
	Ports  []int
	Logger *slog.Logger
	// Tracer, if set, gives each proxy and engine its tracer, by an
	// instance name ("us-east-proxy", "us-east-engine-0").
	Tracer func(instance string) *tracing.Tracer
}

// Cluster is a mesh of proxies and simulated engines on loopback, with the
// WAN emulated in-process.
type Cluster struct {
	Topology Topology
	Links    *mesh.Links
	Regions  []*ClusterRegion
	tlsDir   string // the cluster's throwaway CA and certificate
	meshTune func(*mesh.Config)
	logger   *slog.Logger
	restarts int
}

// ClusterRegion is one region of a cluster.
type ClusterRegion struct {
	*Node
	Engines []*Engine
}

// Engine is one simulated replica on a loopback port.
type Engine = server.Loopback

// StartCluster starts every region of the topology: its engines, its proxy
// and its mesh node, joined through the first region. It does not wait for
// convergence (WaitConverged does).
func StartCluster(ctx context.Context, o ClusterOptions) (*Cluster, error) {
	if o.Topology.Regions == nil {
		o.Topology = ThreeRegions
	}
	if o.EnginesPerRegion <= 0 {
		o.EnginesPerRegion = 2
	}
	c := &Cluster{Topology: o.Topology, Links: o.Topology.Links()}
	// The proxies forward to each other over TLS, with a throwaway CA.
	dir, err := os.MkdirTemp("", "skywalker-cluster-tls-")
	if err != nil {
		return nil, fmt.Errorf("cluster TLS: %w", err)
	}
	c.tlsDir = dir
	cert, key, ca, err := DevTLS(dir)
	if err != nil {
		c.Close()
		return nil, err
	}
	var seed string
	for i, spec := range o.Topology.Regions {
		reg := &ClusterRegion{}
		c.Regions = append(c.Regions, reg)
		var pool []string
		engines := make([]server.Config, o.EnginesPerRegion)
		for j := range engines {
			engines[j] = o.Engine
		}
		if o.RegionEngines != nil {
			engines = o.RegionEngines(spec.Name)
		}
		for j, ec := range engines {
			ec.Seed = uint64(100*i + j + 1)
			if o.Tracer != nil {
				ec.Tracer = o.Tracer(fmt.Sprintf("%s-engine-%d", spec.Name, j))
			}
			e, err := server.StartLoopback(ec)
			if err != nil {
				c.Close()
				return nil, err
			}
			reg.Engines = append(reg.Engines, e)
			pool = append(pool, e.URL)
		}
		port := 0
		if i < len(o.Ports) {
			port = o.Ports[i]
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("listen for %s's proxy: %w", spec.Name, err)
		}
		cfg := proxy.DefaultConfig()
		cfg.Region, cfg.Jurisdiction, cfg.WorkerPool, cfg.NodeID = spec.Name, spec.Jurisdiction, pool, spec.Name+"-proxy"
		cfg.PeerJurisdictions = map[string]string{} // granted by the operator (here: the topology), not taken from gossip
		for _, other := range o.Topology.Regions {
			if other.Name != spec.Name && other.Jurisdiction != "" {
				cfg.PeerJurisdictions[other.Name] = other.Jurisdiction
			}
		}
		cfg.AdminListen = "127.0.0.1:0"    // many proxies on one host
		cfg.DrainTimeout = 5 * time.Second // a half-second lame duck: clusters on one host stop quickly
		cfg.GossipKeys, cfg.MeshPreset, cfg.GossipBind = []string{DevKey}, "local", "127.0.0.1:0"
		cfg.MaxWANRTT, cfg.ScrapeInterval = 200*time.Millisecond, 50*time.Millisecond
		cfg.TLSCert, cfg.TLSKey, cfg.TLSCA, cfg.PeerListen = cert, key, ca, "127.0.0.1:0"
		if o.Proxy != nil {
			o.Proxy(&cfg)
		}
		c.logger, c.meshTune = o.Logger, func(mc *mesh.Config) {
			mc.Control.ProbeInterval, mc.Control.ReopenSamples = 100*time.Millisecond, 3
			mc.Control.LoadInterval, mc.Control.DigestInterval = 100*time.Millisecond, 300*time.Millisecond
			if o.Mesh != nil {
				o.Mesh(mc)
			}
		}
		var tracer *tracing.Tracer
		if o.Tracer != nil {
			tracer = o.Tracer(spec.Name + "-proxy")
		}
		n, err := Start(ctx, Options{Proxy: cfg, Logger: o.Logger, Listener: l, Links: c.Links, Mesh: c.meshTune, Tracer: tracer})
		if err != nil {
			c.Close()
			return nil, err
		}
		reg.Node = n
		if seed == "" {
			seed = n.Mesh.Addr()
		} else if err := n.Join(seed); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// RestartProxy kills region name's proxy, as a crash would, and starts
// another in its place, as Kubernetes replaces a pod: the same
// configuration and client address (its engines untouched), a node name
// and gossip port of its own, joining the mesh through another region.
func (c *Cluster) RestartProxy(ctx context.Context, name string) error {
	reg := c.Region(name)
	if reg == nil {
		return fmt.Errorf("cluster: no region %q", name)
	}
	cfg := reg.Config()
	c.restarts++
	cfg.NodeID = fmt.Sprintf("%s-proxy-%d", name, c.restarts)
	cfg.GossipBind, cfg.GossipAdvertise, cfg.AdvertiseURL = "127.0.0.1:0", "", ""
	reg.Kill()
	var n *Node
	var err error
	for range 50 { // the old process's listeners are closing
		var l net.Listener
		if l, err = net.Listen("tcp", cfg.Listen); err == nil {
			if n, err = Start(ctx, Options{Proxy: cfg, Logger: c.logger, Listener: l, Links: c.Links, Mesh: c.meshTune}); err == nil {
				break
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("cluster: restart %s's proxy: %w", name, err)
	}
	reg.Node = n
	for _, other := range c.Regions {
		if other != reg && other.Node != nil {
			return n.Join(other.Mesh.Addr())
		}
	}
	return nil
}

// Region returns the region named name, or nil.
func (c *Cluster) Region(name string) *ClusterRegion {
	for _, r := range c.Regions {
		if r.Node != nil && r.Region == name {
			return r
		}
	}
	return nil
}

// Endpoints maps each region to its proxy's URL.
func (c *Cluster) Endpoints() map[string]string {
	out := map[string]string{}
	for _, r := range c.Regions {
		out[r.Region] = r.URL
	}
	return out
}

// Nodes lists the regions' nodes.
func (c *Cluster) Nodes() []*Node {
	var out []*Node
	for _, r := range c.Regions {
		if r.Node != nil {
			out = append(out, r.Node)
		}
	}
	return out
}

// WaitConverged waits until every node sees every other region healthy
// with RTT samples (see Converged).
func (c *Cluster) WaitConverged(ctx context.Context, within time.Duration) error {
	return WaitConverged(ctx, c.Nodes(), within)
}

// Close stops every proxy (without draining) and engine.
func (c *Cluster) Close() {
	for _, r := range c.Regions {
		if r.Node != nil {
			r.Kill()
		}
		for _, e := range r.Engines {
			e.Kill()
		}
	}
	if c.tlsDir != "" {
		_ = os.RemoveAll(c.tlsDir)
	}
}

// PeerClient is an HTTP client that trusts the cluster's CA: what a peer
// proxy forwards with, to reach a node's PeerURL.
func (c *Cluster) PeerClient() (*http.Client, error) {
	cfg := proxy.Config{TLSCA: filepath.Join(c.tlsDir, "ca.crt")}
	tc, err := cfg.ClientTLS()
	if err != nil {
		return nil, fmt.Errorf("the cluster's CA: %w", err)
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}, nil
}

// Converged reports whether every node sees every other node's region as
// a healthy peer (fresh load data) whose link has RTT samples, and has all
// its replicas in service. When not, the text says what is missing, node by
// node. Gates may be closed: whether a link near the threshold is open is
// the gate's business, not convergence's.
func Converged(nodes []*Node) (bool, string) {
	var missing []string
	for _, n := range nodes {
		if n.Mesh == nil {
			continue
		}
		seen := map[string]bool{}
		for _, p := range n.Mesh.Peers() {
			seen[p.Region] = true
			switch {
			case !p.Healthy:
				missing = append(missing, fmt.Sprintf("%s sees %s unhealthy (%d fresh nodes, newest data %v old)",
					n.Region, p.Region, p.Nodes, p.DataAge.Round(time.Millisecond)))
			case p.RTT == 0:
				missing = append(missing, fmt.Sprintf("%s has no RTT sample for %s yet (gate: %s)", n.Region, p.Region, p.Gate))
			}
		}
		for _, o := range nodes {
			if o.Region != n.Region && !seen[o.Region] {
				missing = append(missing, fmt.Sprintf("%s has not heard of %s", n.Region, o.Region))
			}
		}
		if want, got := n.Proxy.Replicas(), n.Proxy.HealthyReplicas(); want == 0 || got < want {
			missing = append(missing, fmt.Sprintf("%s has %d of %d replicas in service", n.Region, got, want))
		}
	}
	return len(missing) == 0, strings.Join(missing, "; ")
}

// WaitConverged polls Converged until it holds, ctx ends or within passes;
// the error says what had not converged.
func WaitConverged(ctx context.Context, nodes []*Node, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		ok, missing := Converged(nodes)
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the mesh did not converge within %v: %s", within, missing)
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), errors.New(missing))
		case <-time.After(50 * time.Millisecond):
		}
	}
}
