package proxy

import (
	"time"

	"skywalker/internal/digest"
	"skywalker/internal/mesh"
	"skywalker/internal/region"
)

// The mesh's side of the router: the peers' snapshot in (Pump), this
// node's load summary and digest out, and the dispatches the proxies of a
// region tell each other. Every call reaches the core through Router.do.

// Pump refreshes the peers' snapshot from the mesh and re-routes held
// requests: every PumpInterval and after every scrape round.
func (r *Router) Pump() {
	var src PeerSource
	r.do(func(*region.Node) { src = r.mesh })
	var peers []region.Peer
	share := false
	if src != nil {
		peers = grantJurisdictions(src.Peers(), r.cfg.PeerJurisdictions)
		if s, ok := src.(interface{ Siblings() int }); ok {
			share = s.Siblings() > 0 // other proxies of this region: tell them what is dispatched
		}
	}
	r.do(func(n *region.Node) {
		if share != r.sharing {
			r.sharing = share
			n.ShareDispatches(share)
		}
		n.SetPeers(peers)
		n.Pump(r.now())
	})
}

// grantJurisdictions is peers (a snapshot it does not modify) with each
// region's jurisdiction as the operator granted it, whatever it claimed:
// none for a region not granted one.
func grantJurisdictions(peers []region.Peer, granted map[string]string) []region.Peer {
	out := make([]region.Peer, len(peers))
	for i, p := range peers {
		p.Jurisdiction = granted[p.Region]
		out[i] = p
	}
	return out
}

// setPeerSource attaches the mesh once it exists (it needs the router).
func (r *Router) setPeerSource(p PeerSource) {
	r.do(func(*region.Node) { r.mesh = p })
}

// TakeDispatches implements mesh.DispatchSharer: what this proxy
// dispatched (and what ended) since the last call, for the other proxies
// of its region.
func (r *Router) TakeDispatches() (out []region.SiblingDispatch) {
	r.do(func(n *region.Node) { out = n.TakeDispatches() })
	return out
}

// SiblingDispatched implements mesh.DispatchSharer: what another proxy of
// this region told.
func (r *Router) SiblingDispatched(from string, told []region.SiblingDispatch) {
	r.do(func(n *region.Node) { n.SiblingDispatched(from, told) })
}

// Load implements mesh.Source: this node's load summary.
func (r *Router) Load() (l region.Load) {
	r.do(func(n *region.Node) {
		l = n.Load()
		l.Draining = r.draining
	})
	return l
}

// Digest implements mesh.Source: the digest of the prefix index.
func (r *Router) Digest() (d *digest.Digest) {
	r.do(func(n *region.Node) { d = n.Digest() })
	return d
}

// drain marks the router draining: its load summary says so, and peers
// stop forwarding to this node.
func (r *Router) drain() {
	r.do(func(*region.Node) { r.draining = true })
}

// clockOffset is peer region's wall clock less ours as the mesh measured
// it from its load summaries (zero if unknown).
func (r *Router) clockOffset(peer string) (offset time.Duration) {
	r.do(func(n *region.Node) {
		for _, p := range n.Peers() {
			if p.Region == peer {
				offset = p.ClockOffset
				return
			}
		}
	})
	return offset
}

var (
	_ mesh.Source         = (*Router)(nil)
	_ mesh.DispatchSharer = (*Router)(nil)
)
