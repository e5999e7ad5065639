package mesh

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"skywalker/internal/digest"
	"skywalker/internal/region"
)

// Source is what this node publishes. Both methods must be safe for
// concurrent use and fast; they are called from the mesh's goroutines.
type Source interface {
	// Load is this node's current load summary.
	Load() region.Load
	// Digest is this node's current prefix digest, or nil. A returned
	// digest must never be modified afterwards (publish a new one, with a
	// higher Generation, instead).
	Digest() *digest.Digest
}

// DispatchSharer is implemented by a Source whose region's nodes tell
// each other what they dispatch (region/siblings.go). Both methods must be
// safe for concurrent use.
type DispatchSharer interface {
	// TakeDispatches returns the dispatches and ends to tell since the
	// last call.
	TakeDispatches() []region.SiblingDispatch
	// SiblingDispatched applies what node from, of this region, told.
	SiblingDispatched(from string, told []region.SiblingDispatch)
}

// Mesh is one node of the region mesh. Every method is safe for
// concurrent use.
type Mesh struct {
	cfg     Config
	log     *slog.Logger
	src     Source
	self    Meta
	ml      *memberlist.Memberlist
	keyring *memberlist.Keyring

	mu    sync.Mutex
	table *Table
	// members are this node's own copies of the live peers' addresses,
	// taken in the event delegate. memberlist keeps rewriting the *Node
	// values it hands out (Members, events), so they never leave the
	// delegate call that received them (memberlist issue #306).
	members map[string]memberlist.Node
	loads   region.LoadPublisher
	sender  digestSender    // what each peer is sent of our digest
	toAsk   map[string]bool // nodes whose whole digest we must ask for
	asked   map[string]time.Time
	round   int
	probing map[string]bool // regions whose probe is out
	// ping is memberlist's Ping (tests replace it, under mu).
	ping func(node string, addr net.Addr) (time.Duration, error)

	bytesSent, bytesRecv atomic.Int64
	started              time.Time
	stop                 chan struct{}
	wg                   sync.WaitGroup
	closed               atomic.Bool
}

// New creates the node and starts listening; call Join to meet peers.
func New(cfg Config, src Source) (*Mesh, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.GossipBudget == 0 {
		cfg.GossipBudget = DefaultGossipBudget
	}
	if cfg.Incarnation == 0 {
		cfg.Incarnation = uint64(time.Now().UnixNano())
	}
	if cfg.NodeID == "" {
		cfg.NodeID = cfg.Region + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	m := &Mesh{cfg: cfg, log: cfg.Logger.With("component", "mesh", "node", cfg.NodeID), src: src,
		self:  Meta{Region: cfg.Region, Jurisdiction: cfg.Jurisdiction, APIAddr: cfg.APIAddr, Version: cfg.Version},
		table: NewTable(cfg.Region, cfg.Control), members: map[string]memberlist.Node{},
		toAsk: map[string]bool{}, asked: map[string]time.Time{}, probing: map[string]bool{},
		sender: newDigestSender(cfg.NodeID, tokenBucket{rate: float64(cfg.GossipBudget), burst: float64(cfg.GossipBudget) * 2 * cfg.Control.DigestInterval.Seconds()}),
		loads:  region.LoadPublisher{Interval: cfg.Control.LoadInterval}, stop: make(chan struct{}), started: time.Now()}
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
	m.ml, m.ping = ml, ml.Ping
	m.wg.Add(4)
	go m.every(cfg.Control.LoadCheck, m.publishLoad)
	go m.every(cfg.Control.LoadCheck, m.shareDispatches)
	go m.every(cfg.Control.DigestInterval, m.publishDigest)
	go m.every(cfg.Control.ProbeInterval, m.probe)
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
		return n, fmt.Errorf("mesh: join %v: %s: %w", seeds, JoinFailure(err), err)
	}
	return n, nil
}

// JoinFailure says in words why a join failed, from memberlist's error:
// another key, another cluster label, or a seed that cannot be reached.
func JoinFailure(err error) string {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "decrypt") || strings.Contains(msg, "encryption"):
		return "the seed uses another gossip key (SKYWALKER_GOSSIP_KEY), or encrypts where this node does not"
	case strings.Contains(msg, "EOF") || strings.Contains(msg, "connection reset"):
		return "the seed hung up: it belongs to another mesh (SKYWALKER_CLUSTER_LABEL), or uses another gossip key"
	case strings.Contains(msg, "refused") || strings.Contains(msg, "timeout") || strings.Contains(msg, "no route") ||
		strings.Contains(msg, "no such host") || strings.Contains(msg, "unreachable"):
		return "the seed is unreachable: nothing listens there, or a firewall drops it (gossip needs TCP and UDP)"
	default:
		return "the seed refused this node"
	}
}

// Name is this node's id.
func (m *Mesh) Name() string { return m.cfg.NodeID }

// Region is this node's region.
func (m *Mesh) Region() string { return m.cfg.Region }

// Addr is this node's advertised gossip address (host:port).
func (m *Mesh) Addr() string { return m.ml.LocalNode().Address() }

// Members returns the names of live nodes, this one included, sorted.
func (m *Mesh) Members() []string {
	m.mu.Lock()
	names := make([]string, 0, len(m.members)+1)
	for name := range m.members {
		names = append(names, name)
	}
	m.mu.Unlock()
	names = append(names, m.cfg.NodeID)
	slices.Sort(names)
	return names
}

// Keyring exposes the gossip keyring for key rotation (install a new key
// everywhere, switch the primary, then remove the old one). Nil when the
// mesh runs without encryption.
func (m *Mesh) Keyring() *memberlist.Keyring { return m.keyring }

// Peers returns every peer region known, sorted by name. It only reads
// memory under a short lock: the routing path never waits on the network.
func (m *Mesh) Peers() []region.Peer {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.table.Peers(now)
}

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
	s := Stats{BytesSent: m.bytesSent.Load(), BytesReceived: m.bytesRecv.Load()}
	if el := time.Since(m.started).Seconds(); el > 0 {
		s.BytesSentPerSec = float64(s.BytesSent) / el
	}
	m.mu.Lock()
	s.Members = len(m.members) + 1
	if p := m.sender.published; p != nil {
		s.DigestGeneration = p.Generation
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

// peerNodes returns copies of the live peers' addresses, sorted by name.
// Siblings counts the live nodes of this node's own region.
func (m *Mesh) Siblings() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for name := range m.members {
		if m.table.SameRegion(name) {
			n++
		}
	}
	return n
}

// shareDispatches sends what this node dispatched since the last round to
// the other nodes of its region, reliably (a lost record only leaves them
// missing that prompt).
func (m *Mesh) shareDispatches() {
	sharer, ok := m.src.(DispatchSharer)
	if !ok {
		return
	}
	told := sharer.TakeDispatches()
	if len(told) == 0 {
		return
	}
	msgs := encodeDispatches(m.cfg.NodeID, told)
	for _, n := range m.peerNodes() {
		m.mu.Lock()
		same := m.table.SameRegion(n.Name)
		m.mu.Unlock()
		if !same {
			continue
		}
		for _, msg := range msgs {
			if err := m.ml.SendReliable(&n, msg); err != nil {
				m.log.Debug("dispatches not delivered", "to", n.Name, "err", err)
				break
			}
			m.bytesSent.Add(int64(len(msg)))
		}
	}
}

func (m *Mesh) peerNodes() []memberlist.Node {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]memberlist.Node, 0, len(m.members))
	for _, n := range m.members {
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b memberlist.Node) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return out
}
