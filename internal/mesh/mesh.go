package mesh

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"skywalker/internal/digest"
	"skywalker/internal/policy"
)

// Source is what this node publishes. Both methods must be safe for
// concurrent use and fast; they are called from the mesh's goroutines.
type Source interface {
	// Load is this node's current load summary.
	Load() Load
	// Digest is this node's current prefix digest, or nil. A returned
	// digest must never be modified afterwards (publish a new one, with a
	// higher Generation, instead).
	Digest() *digest.Digest
}

// Peer is a peer region as this node sees it: a consistent snapshot.
type Peer struct {
	Region       string
	Jurisdiction string
	// Nodes are the region's live nodes whose load data is fresh; APIAddrs
	// their proxies' addresses.
	Nodes    int
	APIAddrs []string
	Healthy  bool          // some node is live with fresh data
	DataAge  time.Duration // age of the newest load summary
	RTT      time.Duration // smoothed
	Loss     float64
	GateOpen bool
	Gate     string // why the gate is as it is
	// Load aggregates the fresh nodes: queues and outstanding requests
	// summed, replicas and slots as the largest report (the region's
	// proxies share its replicas), queue wait as the worst.
	Load   Load
	Digest *digest.Digest // union of the fresh nodes' digests; nil if none
}

// Policy converts the peer to the routing view's form (prefix match left
// for the caller, which knows the request).
func (p *Peer) Policy() policy.PeerRegion {
	return policy.PeerRegion{Name: p.Region, Jurisdiction: p.Jurisdiction, Healthy: p.Healthy, DataAge: p.DataAge,
		RTT: p.RTT, GateOpen: p.GateOpen, GateReason: p.Gate, QueueWait: p.Load.QueueWait, Queued: p.Load.Queued,
		Replicas: p.Load.Replicas, Slots: p.Load.Slots, Outstanding: p.Load.Outstanding, Prefill: p.Load.Prefill}
}

// Mesh is one node of the region mesh.
type Mesh struct {
	cfg  Config
	log  *slog.Logger
	src  Source
	self meta
	ml   *memberlist.Memberlist

	keyring *memberlist.Keyring

	mu      sync.Mutex
	nodes   map[string]*nodeState
	links   map[string]*linkState // by peer region
	unions  map[string]*unionCache
	probeAt map[string]int // round-robin cursor per peer region

	loadSeq   uint64
	lastLoad  Load
	lastSent  time.Time
	published *digest.Digest
	sentGen   map[string]uint64 // node → digest generation it holds from us

	bytesSent, bytesRecv atomic.Int64
	started              time.Time
	stop                 chan struct{}
	wg                   sync.WaitGroup
	closed               atomic.Bool
}

type nodeState struct {
	name     string
	meta     meta
	addr     net.Addr
	alive    bool
	load     Load
	loadSeq  uint64
	loadAt   time.Time // when the newest summary arrived
	digest   *digest.Digest
	digestAt time.Time
}

type unionCache struct {
	key    string
	digest *digest.Digest
}

// New creates the node and starts listening; call Join to meet peers.
func New(cfg Config, src Source) (*Mesh, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.NodeID == "" {
		cfg.NodeID = cfg.Region + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	m := &Mesh{cfg: cfg, log: cfg.Logger.With("component", "mesh", "node", cfg.NodeID), src: src,
		self:  meta{Region: cfg.Region, Jurisdiction: cfg.Jurisdiction, APIAddr: cfg.APIAddr, Version: cfg.Version},
		nodes: map[string]*nodeState{}, links: map[string]*linkState{}, unions: map[string]*unionCache{},
		probeAt: map[string]int{}, sentGen: map[string]uint64{}, stop: make(chan struct{}), started: time.Now()}
	mc, err := cfg.memberlistConfig()
	if err != nil {
		return nil, err
	}
	m.keyring = mc.Keyring
	mc.Delegate = delegate{m}
	mc.Events = events{m}
	mc.Ping = pings{m}
	ml, err := memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("mesh: start memberlist: %w", err)
	}
	m.ml = ml
	m.wg.Add(3)
	go m.every(max(cfg.LoadInterval/5, 10*time.Millisecond), m.publishLoad)
	go m.every(cfg.DigestInterval, m.publishDigest)
	go m.every(cfg.ProbeInterval, m.probe)
	return m, nil
}

// Join contacts seed addresses (host:port of other nodes' gossip ports)
// and returns how many it reached.
func (m *Mesh) Join(seeds []string) (int, error) {
	if len(seeds) == 0 {
		return 0, nil
	}
	n, err := m.ml.Join(seeds)
	if err != nil {
		return n, fmt.Errorf("mesh: join %v: %w", seeds, err)
	}
	return n, nil
}

// Name is this node's id; Addr its gossip address.
func (m *Mesh) Name() string { return m.cfg.NodeID }

// Addr is this node's advertised gossip address (host:port).
func (m *Mesh) Addr() string { return m.ml.LocalNode().Address() }

// Members returns the names of live nodes, this one included, sorted.
func (m *Mesh) Members() []string {
	var names []string
	for _, n := range m.ml.Members() {
		names = append(names, n.Name)
	}
	sort.Strings(names)
	return names
}

// Keyring exposes the gossip keyring for key rotation (install a new key
// everywhere, switch the primary, then remove the old one). Nil when the
// mesh runs without encryption.
func (m *Mesh) Keyring() *memberlist.Keyring { return m.keyring }

// Leave announces departure, waits up to timeout for it to spread, and
// shuts the node down.
func (m *Mesh) Leave(timeout time.Duration) error {
	if m.closed.Swap(true) {
		return nil
	}
	close(m.stop)
	err := m.ml.Leave(timeout)
	m.wg.Wait()
	if serr := m.ml.Shutdown(); serr != nil {
		err = errors.Join(err, serr)
	}
	return err
}

// Shutdown stops the node without announcing it (as a crash would look).
func (m *Mesh) Shutdown() error {
	if m.closed.Swap(true) {
		return nil
	}
	close(m.stop)
	m.wg.Wait()
	return m.ml.Shutdown()
}

func (m *Mesh) gateParams() gateParams {
	return gateParams{alpha: m.cfg.RTTAlpha, maxRTT: m.cfg.MaxWANRTT, maxLoss: m.cfg.MaxLoss, reopen: m.cfg.ReopenSamples}
}

// Peers returns every peer region known, sorted by name. It only reads
// memory under a short lock: the routing path never waits on the network.
func (m *Mesh) Peers() []Peer {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	byRegion := map[string][]*nodeState{}
	for _, n := range m.nodes {
		if n.meta.Region != m.cfg.Region {
			byRegion[n.meta.Region] = append(byRegion[n.meta.Region], n)
		}
	}
	regions := make([]string, 0, len(byRegion))
	for r := range byRegion {
		regions = append(regions, r)
	}
	sort.Strings(regions)
	peers := make([]Peer, 0, len(regions))
	for _, region := range regions {
		nodes := byRegion[region]
		sort.Slice(nodes, func(i, j int) bool { return nodes[i].name < nodes[j].name })
		p := Peer{Region: region, Jurisdiction: nodes[0].meta.Jurisdiction, DataAge: -1}
		var fresh []*nodeState
		for _, n := range nodes {
			if !n.alive || n.loadAt.IsZero() {
				continue
			}
			age := now.Sub(n.loadAt)
			if p.DataAge < 0 || age < p.DataAge {
				p.DataAge = age
			}
			if age > m.cfg.MaxDataAge {
				continue // stale data means unavailable, not idle
			}
			fresh = append(fresh, n)
			p.APIAddrs = append(p.APIAddrs, n.meta.APIAddr)
			l := n.load
			p.Load.Queued += l.Queued
			p.Load.Outstanding += l.Outstanding
			p.Load.Replicas = max(p.Load.Replicas, l.Replicas)
			p.Load.Slots = max(p.Load.Slots, l.Slots)
			p.Load.QueueWait = max(p.Load.QueueWait, l.QueueWait)
			p.Load.Prefill = l.Prefill
		}
		if p.DataAge < 0 {
			p.DataAge = 0
		}
		p.Nodes = len(fresh)
		p.Healthy = len(fresh) > 0
		if link := m.links[region]; link != nil {
			p.RTT, p.Loss, p.GateOpen, p.Gate = time.Duration(link.rtt), link.loss, link.open, link.reason
		} else {
			p.Gate = "no RTT samples yet"
		}
		p.Digest = m.union(region, fresh)
		peers = append(peers, p)
	}
	return peers
}

// union returns the merged digest of nodes, cached until one changes.
func (m *Mesh) union(region string, nodes []*nodeState) *digest.Digest {
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
	if c := m.unions[region]; c != nil && c.key == key {
		return c.digest
	}
	u := parts[0]
	if len(parts) > 1 {
		u = parts[0].Clone()
		for _, d := range parts[1:] {
			if err := u.Merge(d); err != nil {
				m.log.Warn("digests of one region do not merge", "region", region, "err", err)
			}
		}
	}
	m.unions[region] = &unionCache{key: key, digest: u}
	return u
}

// Stats are the node's traffic counters.
type Stats struct {
	Members          int
	BytesSent        int64
	BytesReceived    int64
	BytesSentPerSec  float64
	DigestGeneration uint64
}

// Stats returns the traffic counters since the node started.
func (m *Mesh) Stats() Stats {
	s := Stats{Members: m.ml.NumMembers(), BytesSent: m.bytesSent.Load(), BytesReceived: m.bytesRecv.Load()}
	if el := time.Since(m.started).Seconds(); el > 0 {
		s.BytesSentPerSec = float64(s.BytesSent) / el
	}
	m.mu.Lock()
	if m.published != nil {
		s.DigestGeneration = m.published.Generation
	}
	m.mu.Unlock()
	return s
}

// every runs fn each interval until the node stops.
func (m *Mesh) every(interval time.Duration, fn func()) {
	defer m.wg.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			fn()
		}
	}
}

// publishLoad sends the load summary to every member once LoadInterval has
// passed since the last one, or early when it changed significantly.
func (m *Mesh) publishLoad() {
	l := m.src.Load()
	m.mu.Lock()
	due := time.Since(m.lastSent) >= m.cfg.LoadInterval || significant(m.lastLoad, l)
	if due {
		m.loadSeq++
		m.lastLoad, m.lastSent = l, time.Now()
	}
	seq := m.loadSeq
	m.mu.Unlock()
	if !due {
		return
	}
	msg := encodeLoad(loadMsg{Node: m.cfg.NodeID, Seq: seq, Load: l})
	for _, n := range m.ml.Members() {
		if n.Name == m.cfg.NodeID {
			continue
		}
		if err := m.ml.SendBestEffort(n, msg); err == nil {
			m.bytesSent.Add(int64(len(msg)))
		}
	}
}

// significant reports a change worth publishing before the interval ends.
func significant(old, cur Load) bool {
	diff := func(a, b int) int {
		if a > b {
			return a - b
		}
		return b - a
	}
	return cur.Replicas != old.Replicas || diff(cur.Queued, old.Queued) > max(4, old.Queued/4) ||
		diff(cur.Outstanding, old.Outstanding) > max(8, old.Outstanding/4)
}

// publishDigest sends the digest, at most every DigestInterval: a delta to
// nodes holding the previous generation, the whole filter to the rest.
func (m *Mesh) publishDigest() {
	cur := m.src.Digest()
	if cur == nil {
		return
	}
	m.mu.Lock()
	prev := m.published
	m.published = cur
	m.mu.Unlock()
	var full, delta []byte
	for _, n := range m.ml.Members() {
		if n.Name == m.cfg.NodeID {
			continue
		}
		m.mu.Lock()
		has, known := m.sentGen[n.Name]
		m.mu.Unlock()
		if known && has == cur.Generation {
			continue
		}
		var msg []byte
		if known && prev != nil && has == prev.Generation && prev.Bits() == cur.Bits() && prev.Hashes() == cur.Hashes() {
			if delta == nil {
				delta = encodeDelta(diffDigests(m.cfg.NodeID, prev, cur))
			}
			msg = delta
		} else {
			if full == nil {
				enc, err := cur.MarshalBinary()
				if err != nil {
					m.log.Error("encode digest", "err", err)
					return
				}
				full = encodeDigest(m.cfg.NodeID, enc)
			}
			msg = full
		}
		if err := m.ml.SendReliable(n, msg); err != nil {
			m.log.Debug("digest not delivered", "to", n.Name, "err", err)
			m.mu.Lock()
			delete(m.sentGen, n.Name) // send it whole next time
			m.mu.Unlock()
			continue
		}
		m.bytesSent.Add(int64(len(msg)))
		m.mu.Lock()
		m.sentGen[n.Name] = cur.Generation
		m.mu.Unlock()
	}
}

// diffDigests lists the words of cur that differ from prev.
func diffDigests(node string, prev, cur *digest.Digest) deltaMsg {
	d := deltaMsg{Node: node, Base: prev.Generation, Gen: cur.Generation}
	pw, cw := prev.Words(), cur.Words()
	for i := range cw {
		if cw[i] != pw[i] {
			d.Indexes = append(d.Indexes, uint32(i))
			d.Words = append(d.Words, cw[i])
		}
	}
	return d
}

// probe pings one live node of every peer region (called each
// ProbeInterval), so every link has RTT and loss samples even when
// memberlist's own random probes go elsewhere.
func (m *Mesh) probe() {
	for _, target := range m.probeTargets() {
		rtt, err := m.ml.Ping(target.name, target.addr)
		m.observe(target.meta.Region, rtt, err == nil)
	}
}

func (m *Mesh) probeTargets() []*nodeState {
	m.mu.Lock()
	defer m.mu.Unlock()
	byRegion := map[string][]*nodeState{}
	for _, n := range m.nodes {
		if n.alive && n.meta.Region != m.cfg.Region {
			byRegion[n.meta.Region] = append(byRegion[n.meta.Region], n)
		}
	}
	var targets []*nodeState
	for region, nodes := range byRegion {
		sort.Slice(nodes, func(i, j int) bool { return nodes[i].name < nodes[j].name })
		i := m.probeAt[region] % len(nodes)
		m.probeAt[region] = i + 1
		targets = append(targets, nodes[i])
	}
	sort.Slice(targets, func(i, j int) bool { return targets[i].name < targets[j].name })
	return targets
}

func (m *Mesh) observe(region string, rtt time.Duration, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.links[region]
	if l == nil {
		l = newLinkState()
		m.links[region] = l
	}
	wasOpen := l.open
	l.observe(rtt, ok, time.Now(), m.gateParams())
	if l.open != wasOpen {
		m.log.Info("wan gate", "peer", region, "open", l.open, "reason", l.reason, "rtt", time.Duration(l.rtt).Round(time.Millisecond))
	}
}

// handle processes one message from a peer.
func (m *Mesh) handle(b []byte) {
	m.bytesRecv.Add(int64(len(b)))
	typ, r, err := decodeHeader(b)
	if err != nil {
		m.log.Debug("dropped message", "err", err)
		return
	}
	switch typ {
	case msgLoad:
		msg, err := decodeLoad(r)
		if err != nil {
			m.log.Debug("dropped load", "err", err)
			return
		}
		m.mu.Lock()
		if n := m.nodes[msg.Node]; n != nil && msg.Seq > n.loadSeq {
			n.load, n.loadSeq, n.loadAt = msg.Load, msg.Seq, time.Now()
		}
		m.mu.Unlock()
	case msgDigest:
		node := r.str()
		if r.err != nil {
			return
		}
		d, err := digest.Decode(b[r.off:])
		if err != nil {
			m.log.Debug("dropped digest", "from", node, "err", err)
			return
		}
		m.mu.Lock()
		if n := m.nodes[node]; n != nil && (n.digest == nil || d.Generation > n.digest.Generation) && d.Region == n.meta.Region {
			n.digest, n.digestAt = d, time.Now()
		}
		m.mu.Unlock()
	case msgDelta:
		msg, err := decodeDelta(r)
		if err != nil {
			m.log.Debug("dropped delta", "err", err)
			return
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		n := m.nodes[msg.Node]
		if n == nil || n.digest == nil || n.digest.Generation != msg.Base {
			return // we miss the base; the sender will send it whole
		}
		d, err := n.digest.WithWords(msg.Indexes, msg.Words, msg.Gen)
		if err != nil {
			m.log.Debug("dropped delta", "from", msg.Node, "err", err)
			return
		}
		n.digest, n.digestAt = d, time.Now()
	default:
		m.log.Debug("dropped message of unknown type", "type", typ)
	}
}

// delegate implements memberlist.Delegate.
type delegate struct{ m *Mesh }

func (d delegate) NodeMeta(limit int) []byte {
	b := encodeMeta(d.m.self)
	if len(b) > limit {
		return b[:0]
	}
	return b
}
func (d delegate) NotifyMsg(b []byte)                         { d.m.handle(b) }
func (d delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d delegate) LocalState(join bool) []byte                { return nil }
func (d delegate) MergeRemoteState(buf []byte, join bool)     {}

// events implements memberlist.EventDelegate: membership changes.
type events struct{ m *Mesh }

func (e events) NotifyJoin(n *memberlist.Node)   { e.m.upsert(n, true) }
func (e events) NotifyUpdate(n *memberlist.Node) { e.m.upsert(n, true) }
func (e events) NotifyLeave(n *memberlist.Node) {
	e.m.mu.Lock()
	defer e.m.mu.Unlock()
	delete(e.m.nodes, n.Name)
	delete(e.m.sentGen, n.Name)
	e.m.log.Info("peer left", "peer", n.Name)
}

func (m *Mesh) upsert(n *memberlist.Node, alive bool) {
	if n.Name == m.cfg.NodeID {
		return
	}
	md, err := decodeMeta(n.Meta)
	if err != nil {
		m.log.Warn("ignoring member with bad metadata", "peer", n.Name, "err", err)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.nodes[n.Name]
	if st == nil {
		st = &nodeState{name: n.Name}
		m.nodes[n.Name] = st
		m.log.Info("peer joined", "peer", n.Name, "region", md.Region, "api", md.APIAddr)
	}
	st.meta, st.alive = md, alive
	st.addr = &net.UDPAddr{IP: slices.Clone(n.Addr), Port: int(n.Port)}
}

// pings implements memberlist.PingDelegate: every probe memberlist makes
// is an RTT sample for the prober's link to that node's region.
type pings struct{ m *Mesh }

func (p pings) AckPayload() []byte { return nil }
func (p pings) NotifyPingComplete(other *memberlist.Node, rtt time.Duration, _ []byte) {
	md, err := decodeMeta(other.Meta)
	if err != nil || md.Region == p.m.cfg.Region {
		return
	}
	p.m.observe(md.Region, rtt, true)
}

var (
	_ memberlist.Delegate      = delegate{}
	_ memberlist.EventDelegate = events{}
	_ memberlist.PingDelegate  = pings{}
)

var discard = slog.New(slog.DiscardHandler)
