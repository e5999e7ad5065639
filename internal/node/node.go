// Package node wires one regional proxy to its mesh node, once, for every
// place that runs one: `skywalker serve`, `skywalker demo` and the tests.
// It listens, builds the proxy (internal/proxy) and the memberlist node
// (internal/mesh) from one proxy.Config, joins peers, and tells whether a
// set of nodes has converged — and if not, exactly what is missing. With
// mesh.Links it emulates WAN delay on the node's gossip and forwarding, so
// a multi-region mesh runs on one machine without root.
//
// StartCluster builds a whole mesh of simulated engines and proxies on
// loopback (the demo's and the end-to-end tests'), over a Topology.
package node

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"skywalker/internal/mesh"
	"skywalker/internal/proxy"
	"skywalker/internal/tracing"
)

// Options wire one node.
type Options struct {
	// Proxy is the proxy's configuration; proxy.New validates it.
	Proxy  proxy.Config
	Logger *slog.Logger
	// Listener, if set, is used instead of listening on Proxy.Listen.
	Listener net.Listener
	// Links, if set, carries the node's gossip and delays its forwards by
	// the emulated RTT to each peer region.
	Links *mesh.Links
	// Mesh, if set, adjusts the mesh configuration before the node starts
	// (tests shorten intervals).
	Mesh func(*mesh.Config)
	// Version is reported to peers in the node's metadata.
	Version string
	// Tracer traces the proxy's requests (nil: off); the caller shuts it
	// down.
	Tracer *tracing.Tracer
}

// Node is one running proxy with its mesh node.
type Node struct {
	Region string
	URL    string // the proxy's base URL for clients (plain HTTP)
	// PeerURL is the base URL peers forward to: URL, or with TLS its peer
	// listener's https URL.
	PeerURL string
	// AdminURL is the admin listener's base URL (/metrics,
	// /debug/skywalker, /debug/pprof/); "" when it is off.
	AdminURL string
	Proxy    *proxy.Server
	Mesh     *mesh.Mesh // nil for a region running alone (no peers, no key)

	cfg      proxy.Config
	log      *slog.Logger
	listener net.Listener
	peers    net.Listener       // the TLS listener peers forward to; nil without TLS
	loops    context.CancelFunc // scrapes, health checks, pumping
	admin    net.Listener       // nil when off
	serving  context.CancelFunc // the HTTP server (cancel to drain)
	served   chan error
	stopOnce sync.Once
}

// Start listens, builds the proxy and its mesh node, and serves until
// Shutdown or Kill. ctx bounds only the start.
func Start(ctx context.Context, o Options) (*Node, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	cfg := o.Proxy
	l := o.Listener
	if l == nil {
		var err error
		if l, err = net.Listen("tcp", cfg.Listen); err != nil {
			return nil, fmt.Errorf("listen on %s: %w", cfg.Listen, err)
		}
	}
	cfg.Listen = l.Addr().String()
	// With TLS, peers forward to a listener of their own; it is what the
	// node advertises.
	var peerL net.Listener
	serverTLS, err := cfg.ServerTLS()
	if err != nil {
		l.Close()
		return nil, err
	}
	if serverTLS != nil {
		raw, err := net.Listen("tcp", cfg.PeerAddr())
		if err != nil {
			l.Close()
			return nil, fmt.Errorf("peer listener on %s (SKYWALKER_PEER_LISTEN): %w", cfg.PeerAddr(), err)
		}
		cfg.PeerListen, peerL = raw.Addr().String(), tls.NewListener(raw, serverTLS)
	}
	closeListeners := func() {
		l.Close()
		if peerL != nil {
			peerL.Close()
		}
	}
	clientURL := "http://" + advertiseHost(l.Addr().String())
	if cfg.AdvertiseURL == "" {
		cfg.AdvertiseURL = clientURL
		if peerL != nil {
			cfg.AdvertiseURL = "https://" + advertiseHost(peerL.Addr().String())
		}
	}
	if cfg.NodeID == "" {
		cfg.NodeID = cfg.Region + "@" + cfg.AdvertiseURL
	}
	popts := proxy.Options{Logger: o.Logger, Tracer: o.Tracer}
	emulated := false
	if o.Links == nil && len(cfg.EmulateWAN) > 0 {
		o.Links, emulated = mesh.NewLinks(), true
		for peer, rtt := range cfg.EmulateWAN {
			o.Links.SetRTT(cfg.Region, peer, rtt)
		}
	}
	if o.Links != nil {
		region, links := cfg.Region, o.Links
		popts.PeerDelay = func(peer string) time.Duration { return links.RTT(region, peer) / 2 }
	}
	srv, err := proxy.New(cfg, popts)
	if err != nil {
		closeListeners()
		return nil, err
	}
	n := &Node{Region: cfg.Region, URL: clientURL, PeerURL: cfg.AdvertiseURL, Proxy: srv, cfg: cfg, log: o.Logger, listener: l, peers: peerL, served: make(chan error, 1)}
	if cfg.Peering() || o.Links != nil {
		mc, err := MeshConfig(cfg, o.Version, o.Logger)
		if err != nil {
			closeListeners()
			return nil, err
		}
		switch {
		case emulated:
			if mc.Transport, err = o.Links.TransportAt(cfg.Region, mc.BindAddr, mc.BindPort); err != nil {
				closeListeners()
				return nil, err
			}
		case o.Links != nil:
			if mc.Transport, err = o.Links.Transport(cfg.Region); err != nil {
				closeListeners()
				return nil, err
			}
		}
		if o.Mesh != nil {
			o.Mesh(&mc)
		}
		if n.Mesh, err = mesh.New(mc, srv.Router()); err != nil {
			closeListeners()
			return nil, err
		}
		srv.SetPeers(n.Mesh)
		srv.SetGossipAddr(n.Mesh.Addr())
	}
	loopCtx, stopLoops := context.WithCancel(context.Background())
	if err := srv.Start(loopCtx); err != nil {
		stopLoops()
		n.closeMesh(false)
		closeListeners()
		return nil, err
	}
	if addr := cfg.AdminAddr(); addr != "" {
		if n.admin, err = net.Listen("tcp", addr); err != nil {
			stopLoops()
			n.closeMesh(false)
			closeListeners()
			return nil, fmt.Errorf("admin listener on %s (SKYWALKER_ADMIN_LISTEN; off for none): %w", addr, err)
		}
		n.AdminURL = "http://" + n.admin.Addr().String()
	}
	serveCtx, stopServing := context.WithCancel(context.Background())
	n.loops, n.serving = stopLoops, stopServing
	var peerListeners []net.Listener
	if peerL != nil {
		peerListeners = append(peerListeners, peerL)
	}
	go func() { n.served <- srv.Serve(serveCtx, l, peerListeners...) }()
	if n.admin != nil {
		admin := &http.Server{Handler: srv.AdminHandler(), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = admin.Serve(n.admin) }() // ends when the node closes the listener
	}
	if err := ctx.Err(); err != nil {
		n.Kill()
		return nil, err
	}
	return n, nil
}

// MeshConfig is the mesh configuration of a proxy: its gossip address,
// identity, keys, preset and the control plane's timing.
func MeshConfig(cfg proxy.Config, version string, log *slog.Logger) (mesh.Config, error) {
	mc := mesh.DefaultConfig(cfg.Region)
	host, port, err := net.SplitHostPort(cfg.GossipBind)
	if err != nil {
		return mc, fmt.Errorf("gossip_bind %q: %w", cfg.GossipBind, err)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	mc.BindAddr = host
	mc.BindPort, _ = strconv.Atoi(port)
	if cfg.GossipAdvertise != "" {
		ah, ap, err := net.SplitHostPort(cfg.GossipAdvertise)
		if err != nil {
			return mc, fmt.Errorf("gossip_advertise %q: %w", cfg.GossipAdvertise, err)
		}
		mc.AdvertiseAddr = ah
		mc.AdvertisePort, _ = strconv.Atoi(ap)
	}
	mc.NodeID, mc.Jurisdiction, mc.APIAddr, mc.Version = cfg.NodeID, cfg.Jurisdiction, cfg.AdvertiseURL, version
	mc.Keys, mc.Insecure, mc.Label, mc.Preset = cfg.GossipKeys, cfg.InsecureGossip, cfg.ClusterLabel, cfg.MeshPreset
	mc.GossipBudget = cfg.GossipBudget
	mc.Control = cfg.ControlPlane()
	mc.Logger = log
	return mc, nil
}

// Config is the proxy configuration the node runs with (listen address,
// advertise URL and node id filled in).
func (n *Node) Config() proxy.Config { return n.cfg }

// Join joins the mesh through gossip addresses (host:port).
func (n *Node) Join(seeds ...string) error {
	if n.Mesh == nil {
		return errors.New("node: this node runs without a mesh")
	}
	_, err := n.Mesh.Join(seeds)
	return err
}

// Served delivers the HTTP server's exit once serving ended on its own
// (a failed listener); after Shutdown or Kill it is drained.
func (n *Node) Served() <-chan error { return n.served }

// Shutdown stops the node gracefully: it stops accepting, drains the
// requests in flight within the proxy's drain timeout, leaves the mesh and
// stops its loops.
func (n *Node) Shutdown() error {
	var err error
	n.stopOnce.Do(func() {
		n.serving()
		err = <-n.served
		n.closeMesh(true)
		n.loops()
		n.closeAdmin()
	})
	return err
}

func (n *Node) closeAdmin() {
	if n.admin != nil {
		_ = n.admin.Close()
	}
}

// Kill stops the node at once, as a crash would: no drain, no leave
// message.
func (n *Node) Kill() {
	n.stopOnce.Do(func() {
		n.closeMesh(false)
		n.listener.Close() // the server stops at once, without draining
		if n.peers != nil {
			n.peers.Close()
		}
		n.serving()
		n.loops()
		n.closeAdmin()
	})
}

func (n *Node) closeMesh(leave bool) {
	if n.Mesh == nil {
		return
	}
	if !leave {
		_ = n.Mesh.Shutdown()
		return
	}
	if err := n.Mesh.Leave(5 * time.Second); err != nil {
		n.log.Warn("leave mesh", "err", err)
	}
}

// advertiseHost replaces an unspecified listen host with the machine's name.
func advertiseHost(addr string) string {
	host, port, _ := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		if h, err := os.Hostname(); err == nil {
			host = h
		}
	}
	return net.JoinHostPort(host, port)
}
