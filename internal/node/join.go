package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"skywalker/internal/lograte"
	"skywalker/internal/mesh"
)

// KeepJoined keeps this node in the mesh through the configured peers
// (proxy.Config Peers) until ctx ends: it joins them at start, again every
// retry while the node knows no other member (its peers restarted, or the
// network split), and every RejoinEvery regardless, so that a mesh
// re-forms after any node's restart: a seed that comes back knowing
// nobody is found again by the others' rejoin. A peer given by URL is
// asked for its gossip address (/v1/skywalker/gossip); a host:port is one.
// Joining nodes already in the mesh costs one state exchange with each.
//
// Every failure says why (another key, another label, unreachable); the
// same failure is logged at most once per JoinLogEvery.
func (n *Node) KeepJoined(ctx context.Context, retry, rejoin time.Duration) {
	if n.Mesh == nil || len(n.cfg.Peers) == 0 {
		return
	}
	limit := lograte.New(JoinLogEvery, time.Now)
	tc, err := n.cfg.ClientTLS()
	if err != nil {
		n.log.Warn("join mesh: no TLS configuration for peers", "err", err)
		return
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 3 * time.Second}
	warn := func(msg string, args ...any) {
		if ok, suppressed := limit.Allow(msg + fmt.Sprint(args...)); ok {
			n.log.Warn(msg, append(args, "retry", retry.String(), "suppressed", suppressed)...)
		}
	}
	var joinedAt time.Time
	for {
		alone := len(n.Mesh.Members()) <= 1
		if alone || time.Since(joinedAt) >= rejoin {
			if reached := n.joinSeeds(ctx, client, warn); reached > 0 {
				joinedAt = time.Now()
				if alone {
					n.log.Info("joined mesh", "contacted", reached)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(retry):
		}
	}
}

// RejoinEvery is how often a node joins its seeds again although it has
// peers: what heals a mesh split in two, or a seed restarted alone.
const RejoinEvery = 15 * time.Second

// joinSeeds joins the configured peers once and returns how many nodes it
// reached.
func (n *Node) joinSeeds(ctx context.Context, client *http.Client, warn func(string, ...any)) int {
	var seeds []string
	for _, p := range n.cfg.Peers {
		if !strings.Contains(p.Addr, "://") {
			seeds = append(seeds, p.Addr)
			continue
		}
		addr, err := gossipAddrOf(ctx, client, p.Addr)
		if err != nil {
			warn("peer proxy not reachable; retrying", "peer", p.Region, "url", p.Addr, "err", err)
			continue
		}
		seeds = append(seeds, addr)
	}
	if len(seeds) == 0 {
		return 0
	}
	reached, err := n.Mesh.Join(seeds)
	if err == nil && reached > 0 {
		return reached
	}
	why := "no seed answered"
	if err != nil {
		why = mesh.JoinFailure(err)
	}
	warn("join mesh failed; retrying", "seeds", strings.Join(seeds, ","), "why", why, "err", err)
	return 0
}

// JoinLogEvery is how often the same join failure is logged.
const JoinLogEvery = 30 * time.Second

// gossipAddrOf asks a peer proxy for its mesh address.
func gossipAddrOf(ctx context.Context, client *http.Client, base string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+"/v1/skywalker/gossip", nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var v struct {
		GossipAddr string `json:"gossip_addr"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || v.GossipAddr == "" {
		return "", fmt.Errorf("%s did not report a gossip address", base)
	}
	return v.GossipAddr, nil
}
