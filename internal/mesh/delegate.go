package mesh

import (
	"log/slog"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/hashicorp/memberlist"

	"skywalker/internal/digest"
)

// handle processes one message from a peer.
func (m *Mesh) handle(b []byte) {
	m.bytesRecv.Add(int64(len(b)))
	typ, r, err := decodeHeader(b)
	if err != nil {
		m.log.Debug("dropped message", "err", err)
		return
	}
	now := time.Now()
	switch typ {
	case msgLoad:
		msg, err := decodeLoad(r)
		if err != nil {
			m.log.Debug("dropped load", "err", err)
			return
		}
		m.mu.Lock()
		if m.table.ObserveLoad(msg.Node, msg.Incarnation, msg.Seq, msg.Load, now) {
			m.table.ObserveClock(msg.Node, msg.SentAt, now)
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
		m.table.ObserveDigest(node, d, now)
		m.mu.Unlock()
	case msgDelta: // from a node of an earlier release
		msg, err := decodeDelta(r)
		m.applyChange("delta", msg.Node, msg.Base, err, now, func(base *digest.Digest) (*digest.Digest, error) {
			return base.WithWords(msg.Indexes, msg.Words, msg.Gen)
		})
	case msgBits:
		msg, err := decodeBits(r)
		m.applyChange("digest bits", msg.Node, msg.Base, err, now, func(base *digest.Digest) (*digest.Digest, error) {
			return base.WithBits(msg.Positions, msg.Gen)
		})
	case msgDispatches:
		node, told, err := decodeDispatches(r)
		if err != nil {
			m.log.Debug("dropped dispatches", "err", err)
			return
		}
		sharer, ok := m.src.(DispatchSharer)
		m.mu.Lock()
		same := m.table.SameRegion(node)
		m.mu.Unlock()
		if !ok || !same {
			return // only the nodes of this region may teach its index
		}
		sharer.SiblingDispatched(node, told)
	case msgWant:
		node, err := decodeWant(r)
		if err != nil {
			m.log.Debug("dropped want", "err", err)
			return
		}
		m.mu.Lock()
		m.sender.want(node) // served by the next publishDigest
		m.mu.Unlock()
	default:
		m.log.Debug("dropped message of unknown type", "type", typ)
	}
}

// applyChange applies a decoded digest change from node to the digest of
// generation base held from it; lacking that base, it pulls the digest
// whole (wantFrom). what names the message in logs.
func (m *Mesh) applyChange(what, node string, base uint64, decodeErr error, now time.Time, apply func(*digest.Digest) (*digest.Digest, error)) {
	if decodeErr != nil {
		m.log.Debug("dropped "+what, "err", decodeErr)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	held := m.table.Digest(node)
	if held == nil || held.Generation != base {
		m.wantFrom(node)
		return
	}
	d, err := apply(held)
	if err != nil {
		m.log.Debug("dropped "+what, "from", node, "err", err)
		return
	}
	m.table.ObserveDigest(node, d, now)
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

// events implements memberlist.EventDelegate: membership changes. The
// *Node it receives is memberlist's own and is read only inside the call.
type events struct{ m *Mesh }

func (e events) NotifyJoin(n *memberlist.Node)   { e.m.upsert(n) }
func (e events) NotifyUpdate(n *memberlist.Node) { e.m.upsert(n) }
func (e events) NotifyLeave(n *memberlist.Node) {
	e.m.mu.Lock()
	defer e.m.mu.Unlock()
	e.m.table.Leave(n.Name, time.Now())
	delete(e.m.members, n.Name)
	e.m.sender.forget(n.Name)
	delete(e.m.asked, n.Name)
	e.m.log.Info("peer left", "peer", n.Name)
}

// upsert copies a joining or updated member: its metadata into the table,
// its address into members (never the *Node itself).
func (m *Mesh) upsert(n *memberlist.Node) {
	if n.Name == m.cfg.NodeID {
		return
	}
	md, err := decodeMeta(n.Meta)
	if err != nil {
		m.log.Warn("ignoring member with bad metadata", "peer", n.Name, "err", err)
		return
	}
	own := memberlist.Node{Name: n.Name, Addr: slices.Clone(n.Addr), Port: n.Port, PMin: n.PMin, PMax: n.PMax, PCur: n.PCur,
		DMin: n.DMin, DMax: n.DMax, DCur: n.DCur}
	if dt, ok := m.cfg.Transport.(*delayTransport); ok {
		dt.links.Learn(net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port))), md.Region)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.table.Join(n.Name, md) {
		m.log.Info("peer joined", "peer", n.Name, "region", md.Region, "api", md.APIAddr)
	}
	m.members[n.Name] = own
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
