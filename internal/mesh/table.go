package mesh

import (
	"slices"
	"sort"
	"strconv"
	"time"

	"skywalker/internal/digest"
	"skywalker/internal/region"
)

// Meta is what a node tells the cluster about itself (memberlist's node
// metadata).
type Meta struct {
	Region       string
	Jurisdiction string
	APIAddr      string // the proxy's HTTP address peers forward to
	Version      string
}

// Table is what one node knows of the others: their metadata, their newest
// load summaries and digests with when each arrived, and the link (RTT,
// loss, WAN gate) to every peer region. Peers turns it into the routing
// view's peers. It is pure — time is an argument — and not safe for
// concurrent use: Mesh guards it with its lock and feeds it what arrives
// over memberlist; the simulator gives every region one and feeds it what
// its simulated links deliver, so both see peers through the same rules
// (freshness, aggregation over a region's nodes, the gate).
type Table struct {
	self       string // this node's region
	params     GateParams
	maxDataAge time.Duration
	nodes      map[string]*nodeState
	links      map[string]*Gate      // by peer region
	clocks     map[string]*clockLags // by peer region: its summaries' lags, for its clock offset
	unions     map[string]*unionCache
	probeAt    map[string]int // round-robin cursor per peer region
	// version counts changes to what Peers reads; peers caches its answer.
	version uint64
	peers   peersCache
	// groups are the peer nodes by region, sorted (byRegion), until the
	// membership changes (groups == nil).
	groups []regionNodes
	// left are regions whose last node left, with when: they are listed
	// unhealthy until ForgetLeft has passed, so that a dashboard's
	// "peer_healthy == 0" alert sees them go rather than vanish.
	left map[string]leftRegion
}

// ForgetLeft is how long a region whose every node left is still listed,
// unhealthy.
const ForgetLeft = 10 * time.Minute

type leftRegion struct {
	jurisdiction string
	at           time.Time
}

type regionNodes struct {
	region string
	nodes  []*nodeState
}

// peersCache is Peers' last answer. It stays right, but for each peer's
// DataAge, until the table changes or a fresh node turns stale.
type peersCache struct {
	version   uint64
	at, until time.Time // valid for at <= now < until
	peers     []region.Peer
	newest    []time.Time // per peer: its newest load summary's arrival (zero: none)
}

type nodeState struct {
	name     string
	meta     Meta
	load     region.Load
	heard    bool   // a load summary arrived: incarnation is the sender's
	incarn   uint64 // the sending process's incarnation
	loadSeq  uint64
	loadAt   time.Time // when the newest summary arrived; zero before one
	digest   *digest.Digest
	digestAt time.Time
}

type unionCache struct {
	key    string
	digest *digest.Digest
}

// NewTable returns an empty table for a node of region self.
func NewTable(self string, cp region.ControlPlane) *Table {
	return &Table{self: self, params: GateParamsFrom(cp), maxDataAge: cp.MaxDataAge, nodes: map[string]*nodeState{},
		links: map[string]*Gate{}, clocks: map[string]*clockLags{}, unions: map[string]*unionCache{}, probeAt: map[string]int{}, left: map[string]leftRegion{}}
}

// SameRegion reports whether node is a live member of the table's own
// region.
func (t *Table) SameRegion(node string) bool {
	n := t.nodes[node]
	return n != nil && n.meta.Region == t.self
}

// Join records a live node (or new metadata for one) and reports whether
// it was new.
func (t *Table) Join(name string, m Meta) bool {
	t.version++
	t.groups = nil
	delete(t.left, m.Region)
	n := t.nodes[name]
	if n == nil {
		t.nodes[name] = &nodeState{name: name, meta: m}
		return true
	}
	n.meta = m
	return false
}

// Leave forgets a node that left or died at now; if it was its region's
// last, the region stays listed, unhealthy, for ForgetLeft.
func (t *Table) Leave(name string, now time.Time) {
	t.version++
	t.groups = nil
	n := t.nodes[name]
	if n == nil {
		return
	}
	delete(t.nodes, name)
	for _, o := range t.nodes {
		if o.meta.Region == n.meta.Region {
			return
		}
	}
	if n.meta.Region != t.self {
		t.left[n.meta.Region] = leftRegion{jurisdiction: n.meta.Jurisdiction, at: now}
	}
}

// NodeRegion is the region of a known node, or "".
func (t *Table) NodeRegion(name string) string {
	if n := t.nodes[name]; n != nil {
		return n.meta.Region
	}
	return ""
}

// ObserveLoad records a load summary that arrived from node at now, sent by
// the process of that incarnation with that sequence number. It is kept
// when it is newer than the one held: of the same incarnation with a
// higher sequence, or of a later incarnation (the node restarted: its
// sequence started over, and the digest of the old process is dropped so
// that the new one is pulled whole). A summary of an earlier incarnation
// is kept only once the one held is stale (a clock stepped back across a
// restart must not silence a node). It reports whether it was kept.
func (t *Table) ObserveLoad(node string, incarnation, seq uint64, l region.Load, now time.Time) bool {
	n := t.nodes[node]
	if n == nil {
		return false
	}
	switch {
	case !n.heard || incarnation == n.incarn && seq > n.loadSeq:
	case incarnation > n.incarn || incarnation < n.incarn && now.Sub(n.loadAt) > t.maxDataAge:
		n.digest, n.digestAt = nil, time.Time{}
	default:
		return false
	}
	n.heard, n.incarn = true, incarnation
	n.load, n.loadSeq, n.loadAt = l, seq, now
	t.version++
	return true
}

// ObserveDigest records a digest from node; it is kept only if it is of
// the node's own region and of a newer generation.
func (t *Table) ObserveDigest(node string, d *digest.Digest, now time.Time) bool {
	n := t.nodes[node]
	if n == nil || d.Region != n.meta.Region || (n.digest != nil && d.Generation <= n.digest.Generation) {
		return false
	}
	n.digest, n.digestAt = d, now
	t.version++
	return true
}

// Digest is the newest digest held from node, or nil.
func (t *Table) Digest(node string) *digest.Digest {
	if n := t.nodes[node]; n != nil {
		return n.digest
	}
	return nil
}

// ObserveProbe folds one probe of the link to peerRegion into its gate and
// returns the gate and whether it opened or closed.
func (t *Table) ObserveProbe(peerRegion string, rtt time.Duration, ok bool, now time.Time) (*Gate, bool) {
	g := t.links[peerRegion]
	if g == nil {
		g = NewGate()
		t.links[peerRegion] = g
	}
	was := g.Open()
	g.Observe(rtt, ok, now, t.params)
	t.version++
	return g, g.Open() != was
}

// ProbeTargets returns one node of every peer region to probe, taking the
// region's nodes in turn, sorted by name.
func (t *Table) ProbeTargets() []string {
	var targets []string
	for _, g := range t.byRegion() {
		i := t.probeAt[g.region] % len(g.nodes)
		t.probeAt[g.region] = i + 1
		targets = append(targets, g.nodes[i].name)
	}
	sort.Strings(targets)
	return targets
}

// byRegion groups peer nodes by region, regions and each group's nodes
// sorted by name; the grouping is kept until the membership changes.
func (t *Table) byRegion() []regionNodes {
	if t.groups != nil {
		return t.groups
	}
	index := map[string]int{}
	groups := []regionNodes{}
	for _, n := range t.nodes {
		if n.meta.Region == t.self {
			continue
		}
		i, ok := index[n.meta.Region]
		if !ok {
			i = len(groups)
			index[n.meta.Region] = i
			groups = append(groups, regionNodes{region: n.meta.Region})
		}
		groups[i].nodes = append(groups[i].nodes, n)
	}
	sort.Slice(groups, func(i, j int) bool { return groups[i].region < groups[j].region })
	for _, g := range groups {
		sort.Slice(g.nodes, func(i, j int) bool { return g.nodes[i].name < g.nodes[j].name })
	}
	t.groups = groups
	return groups
}

// Peers returns every peer region known, sorted by name, as of now. A node
// whose newest load summary arrived more than MaxDataAge ago counts as
// unavailable, not idle; a region with no fresh node is unhealthy. The
// answer's APIAddrs and Digest are shared with the table: read-only.
func (t *Table) Peers(now time.Time) []region.Peer {
	return t.AppendPeers(nil, now)
}

// AppendPeers is Peers appending to dst[:0], so that a caller that owns
// dst (the simulator, once per pump) reuses it instead of allocating.
func (t *Table) AppendPeers(dst []region.Peer, now time.Time) []region.Peer {
	c := &t.peers
	if c.version != t.version || now.Before(c.at) || !now.Before(c.until) {
		t.refreshPeers(now)
	}
	out := append(dst[:0], c.peers...)
	for i := range out {
		if !c.newest[i].IsZero() {
			out[i].DataAge = max(now.Sub(c.newest[i]), 0)
		}
	}
	return out
}

// refreshPeers recomputes the cached answer of Peers as of now.
func (t *Table) refreshPeers(now time.Time) {
	groups := t.byRegion()
	// Reuse the cache's slices: Peers hands out copies.
	c := peersCache{version: t.version, at: now, until: now.Add(t.maxDataAge + 1),
		peers: t.peers.peers[:0], newest: t.peers.newest[:0]}
	for _, g := range groups {
		name, nodes := g.region, g.nodes
		p := region.Peer{Region: name, Jurisdiction: nodes[0].meta.Jurisdiction}
		var fresh []*nodeState
		var newest time.Time
		var fold loadFold
		for _, n := range nodes {
			if n.loadAt.IsZero() {
				continue
			}
			if n.loadAt.After(newest) {
				newest = n.loadAt
			}
			if now.Sub(n.loadAt) > t.maxDataAge || n.load.Draining {
				continue // stale or shutting down: not a node to forward to
			}
			if stale := n.loadAt.Add(t.maxDataAge + 1); stale.Before(c.until) {
				c.until = stale
			}
			fresh = append(fresh, n)
			p.APIAddrs = append(p.APIAddrs, n.meta.APIAddr)
			fold.add(n.load)
		}
		p.Load = fold.result()
		p.Nodes = len(fresh)
		p.Healthy = len(fresh) > 0
		if g := t.links[name]; g != nil {
			p.RTT, p.Loss, p.GateOpen, p.Gate = g.RTT(), g.Loss(), g.Open(), g.Reason()
		} else {
			p.Gate = "no RTT samples yet"
		}
		p.ClockOffset, _ = t.clocks[name].offset(p.RTT)
		p.Digest = t.union(name, fresh)
		c.peers = append(c.peers, p)
		c.newest = append(c.newest, newest)
	}
	if len(t.left) > 0 {
		for name, l := range t.left {
			forget := l.at.Add(ForgetLeft)
			if !now.Before(forget) {
				delete(t.left, name)
				continue
			}
			if forget.Before(c.until) {
				c.until = forget
			}
			c.peers = append(c.peers, region.Peer{Region: name, Jurisdiction: l.jurisdiction, Gate: "left the mesh", Left: true})
			c.newest = append(c.newest, time.Time{})
		}
		sort.Sort(byPeerRegion{c.peers, c.newest}) // in order, with their arrival times
	}
	t.peers = c
}

// loadFold adds up the summaries of a region's fresh nodes: its proxies
// share its replicas, so queues and outstanding requests add up while
// replicas and slots are the largest report, the queue wait the worst,
// the prefill queued the least, free cache the most, and hit shares are
// averaged. Each model's load is folded the same way; a model some node
// does not list is served by the others.
type loadFold struct {
	l      region.Load
	n      int
	models []*loadFold
}

func (f *loadFold) add(l region.Load) {
	d := &f.l
	d.Queued += l.Queued
	d.Outstanding += l.Outstanding
	d.Replicas = max(d.Replicas, l.Replicas)
	d.Slots = max(d.Slots, l.Slots)
	d.QueueWait = max(d.QueueWait, l.QueueWait)
	d.QueuedTokens += l.QueuedTokens
	d.Offloading += l.Offloading
	if f.n == 0 || l.PrefillTokens < d.PrefillTokens {
		d.PrefillTokens = l.PrefillTokens
	}
	// The region's nodes share its engines: the slowest measured speed
	// (the prefill scaled by it) holds for all; until one has measured,
	// the last heard.
	if f.n == 0 || l.SpeedMeasured && (!d.SpeedMeasured || l.Speed > d.Speed) || !d.SpeedMeasured {
		d.Prefill, d.Hardware, d.Speed, d.SpeedMeasured = l.Prefill, l.Hardware, l.Speed, l.SpeedMeasured
	}
	d.FreeCacheTokens = max(d.FreeCacheTokens, l.FreeCacheTokens)
	d.HitShare += l.HitShare
	f.n++
	for _, ml := range l.Models {
		i := slices.IndexFunc(f.models, func(m *loadFold) bool { return m.l.Model == ml.Model })
		if i < 0 {
			f.models = append(f.models, &loadFold{l: region.Load{Model: ml.Model}})
			i = len(f.models) - 1
		}
		f.models[i].add(ml)
	}
}

// result is the folded load.
func (f *loadFold) result() region.Load {
	l := f.l
	if f.n > 0 {
		l.HitShare /= float64(f.n)
	}
	for _, m := range f.models {
		l.Models = append(l.Models, m.result())
	}
	return l
}

// byPeerRegion sorts peers and their parallel newest times by region.
type byPeerRegion struct {
	peers  []region.Peer
	newest []time.Time
}

func (s byPeerRegion) Len() int           { return len(s.peers) }
func (s byPeerRegion) Less(i, j int) bool { return s.peers[i].Region < s.peers[j].Region }
func (s byPeerRegion) Swap(i, j int) {
	s.peers[i], s.peers[j] = s.peers[j], s.peers[i]
	s.newest[i], s.newest[j] = s.newest[j], s.newest[i]
}

// union returns the merged digest of nodes, cached until one changes.
func (t *Table) union(reg string, nodes []*nodeState) *digest.Digest {
	key := ""
	var parts []*digest.Digest
	for _, n := range nodes {
		if n.digest != nil {
			key += n.name + "@" + strconv.FormatUint(n.digest.Generation, 10) + ","
			parts = append(parts, n.digest)
		}
	}
	if len(parts) == 0 {
		return nil
	}
	if c := t.unions[reg]; c != nil && c.key == key {
		return c.digest
	}
	u := parts[0]
	if len(parts) > 1 {
		u = parts[0].Clone()
		for _, d := range parts[1:] {
			if err := u.Merge(d); err != nil {
				continue // digests of another size: the first still matches
			}
		}
	}
	t.unions[reg] = &unionCache{key: key, digest: u}
	return u
}
