package region

import (
	"slices"
	"time"
)

// Several proxies may front one region's replicas (for availability).
// Each hears every replica's KV events, but a run of stored blocks is
// attributed to a prompt the proxy knows was sent (enginecache.go), and
// each knows only its own dispatches: the proxies' indexes would
// fragment, each missing what the others sent. So the nodes of a region
// tell each other what they dispatch (the prompt's blocks, to which
// replica) and when it ended, over the mesh: each node's index learns
// every node's prompts, and with KV events each attributes every run
// the same way — a run heard before the prompt it belongs to is told is
// kept (an orphan) and attributed when it is — and forgets what the
// engine evicts alike. The nodes then hold the same index.

// SiblingDispatch is a dispatch as a node tells the other nodes of its
// region, or (Ended) the end of one.
type SiblingDispatch struct {
	Model   string // the pool; set by Pools
	Replica string
	ID      uint64 // the sender's number for the dispatch (from 1)
	Ended   bool   // the request ended; the fields below are unset
	// Blocks are the prompt's blocks (SkyWalker's hashes) of BlockTokens
	// tokens each; Cached, those the sender believed the replica held;
	// Sent, when it was sent (the sender's clock).
	Blocks      []uint64
	BlockTokens int
	Cached      int
	Sent        time.Time
}

// Bounds: the records awaiting the next send (older are dropped: the
// other nodes then miss that prompt, as they would without sharing), and
// the other nodes' dispatches remembered until they end.
const (
	maxSiblingOut    = 8192
	maxSiblingChains = 4096
)

// siblings is a region's side of the sharing.
type siblings struct {
	on     bool
	self   string // this node's name
	next   uint64
	out    []SiblingDispatch
	chains map[siblingKey]siblingChain // the other nodes' prompts awaiting their stores
	order  []siblingKey                // chains' keys, oldest first
}

type siblingKey struct {
	from string
	id   uint64
}

type siblingChain struct {
	rp *replica
	ch *chain
}

// ShareDispatches turns telling the region's other nodes what this one
// dispatches (as Config.Node) on or off. While on, KV events are applied
// EventSettle after they are heard (see EngineEvents). What other nodes
// tell is applied either way.
func (r *pool) ShareDispatches(on bool) {
	r.siblings.on, r.siblings.self = on, r.cfg.Node
	if !on {
		r.siblings.out = nil
	}
}

// TakeDispatches returns the dispatches and ends to tell since the last
// call.
func (r *pool) TakeDispatches() []SiblingDispatch {
	out := r.siblings.out
	r.siblings.out = nil
	return out
}

// sent records a dispatch to tell; it returns its number (0: not told).
func (s *siblings) sent(rp *replica, blocks []uint64, blockTokens, cached int, at time.Time) uint64 {
	if !s.on || len(blocks) == 0 {
		return 0
	}
	s.next++
	s.push(SiblingDispatch{Replica: rp.name, ID: s.next, Blocks: blocks, BlockTokens: blockTokens, Cached: cached, Sent: at})
	return s.next
}

// ended records the end of dispatch id (0: not told).
func (s *siblings) ended(rp *replica, id uint64) {
	if id != 0 && s.on {
		s.push(SiblingDispatch{Replica: rp.name, ID: id, Ended: true})
	}
}

func (s *siblings) push(d SiblingDispatch) {
	if len(s.out) >= maxSiblingOut {
		s.out = slices.Delete(s.out, 0, len(s.out)-maxSiblingOut+1)
	}
	s.out = append(s.out, d)
}

// SiblingDispatched applies what node from, another node of this region,
// told: a prompt it dispatched to one of the replicas (the replica is
// about to hold it: the index learns it, and with KV events its stores
// are awaited, and runs already heard for it attributed), or the end of
// one (a prompt wholly cached stores nothing, and must not take a later
// prompt's stores).
func (r *pool) SiblingDispatched(from string, d SiblingDispatch) {
	rp := r.Replica(d.Replica)
	s := &r.siblings
	key := siblingKey{from, d.ID}
	if d.Ended {
		if c, ok := s.chains[key]; ok {
			delete(s.chains, key)
			r.cacheDone(c.rp, c.ch)
		}
		return
	}
	if rp == nil || len(d.Blocks) == 0 || d.BlockTokens <= 0 || from == "" {
		return
	}
	r.index.Insert(rp.target, d.Blocks, r.digests.learn)
	ch := r.cacheSent(rp, d.Blocks, d.BlockTokens, min(max(d.Cached, 0), len(d.Blocks)), d.Sent, from, d.ID)
	if ch == nil {
		return
	}
	if s.chains == nil {
		s.chains = map[siblingKey]siblingChain{}
	}
	for len(s.order) > 0 && len(s.chains) >= maxSiblingChains {
		delete(s.chains, s.order[0])
		s.order = s.order[1:]
	}
	if len(s.order) > 2*maxSiblingChains { // keys of ended chains
		s.order = slices.DeleteFunc(s.order, func(k siblingKey) bool { _, ok := s.chains[k]; return !ok })
	}
	s.chains[key] = siblingChain{rp: rp, ch: ch}
	s.order = append(s.order, key)
	r.adoptOrphans(rp)
}
