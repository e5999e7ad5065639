package mesh

import (
	"time"

	"github.com/hashicorp/memberlist"
)

// publishLoad sends the load summary to every peer when the publisher says
// it is due: every LoadInterval, or early on a significant change. Called
// every LoadCheck.
func (m *Mesh) publishLoad() {
	l := m.src.Load()
	m.mu.Lock()
	seq, due := m.loads.Due(time.Now(), l)
	m.mu.Unlock()
	if !due {
		return
	}
	msg := encodeLoad(loadMsg{Node: m.cfg.NodeID, Incarnation: m.cfg.Incarnation, Seq: seq, Load: l, SentAt: time.Now()})
	for _, n := range m.peerNodes() {
		if err := m.ml.SendBestEffort(&n, msg); err == nil {
			m.bytesSent.Add(int64(len(msg)))
			m.mu.Lock()
			m.sender.budget.spend(len(msg))
			m.mu.Unlock()
		}
	}
}

// Digest gossip. A node sends its digest only to nodes of other regions
// (its own region's proxies route by their own). A node that lacks a peer's
// digest pulls it whole, once, with a want message (on joining, or when a
// change arrives for a generation it does not hold); after that only the
// bits the digest gained travel (digest.AddedSince, gap-coded: about 2
// bytes a bit), within GossipBudget bytes per second. A peer left behind
// by the budget gets, next time, the bits since the generation it holds,
// from the last HistoryLength published digests.
const (
	// HistoryLength is how many published digests are kept to diff from.
	HistoryLength = 8
	// WantRetry is how long a node waits before asking the same peer for
	// its whole digest again.
	WantRetry = 5 * time.Second
)

// publishDigest runs every DigestInterval: asks for the digests this node
// lacks, serves the wants it received, and sends the bits its digest
// gained to every other-region node that holds an older generation, as the
// budget allows.
func (m *Mesh) publishDigest() {
	now := time.Now()
	cur := m.src.Digest()
	m.mu.Lock()
	m.sender.publish(now, cur)
	var asks []memberlist.Node
	for name, n := range m.members {
		if m.table.SameRegion(name) || m.table.Digest(name) != nil && !m.toAsk[name] {
			continue
		}
		if last, ok := m.asked[name]; ok && now.Sub(last) < WantRetry {
			continue
		}
		m.asked[name] = now
		delete(m.toAsk, name)
		asks = append(asks, n)
	}
	m.mu.Unlock()
	want := encodeWant(m.cfg.NodeID)
	for _, n := range asks {
		if err := m.ml.SendReliable(&n, want); err == nil {
			m.bytesSent.Add(int64(len(want)))
		}
	}
	if cur == nil {
		return
	}
	for _, n := range m.digestPeers() {
		m.mu.Lock()
		msg, err := m.sender.next(n.Name)
		m.mu.Unlock()
		if err != nil {
			m.log.Error("encode digest", "err", err)
			return
		}
		if msg == nil {
			continue // up to date, not asked yet, or over budget this round
		}
		err = m.ml.SendReliable(&n, msg)
		if err != nil {
			m.log.Debug("digest not delivered", "to", n.Name, "err", err)
		} else {
			m.bytesSent.Add(int64(len(msg)))
		}
		m.mu.Lock()
		m.sender.sent(n.Name, err == nil)
		m.mu.Unlock()
	}
}

// digestPeers are the live nodes of other regions, in an order that
// rotates every round, so that a tight budget delays every peer in turn
// rather than always the same ones.
func (m *Mesh) digestPeers() []memberlist.Node {
	all := m.peerNodes()
	m.mu.Lock()
	out := all[:0]
	for _, n := range all {
		if !m.table.SameRegion(n.Name) {
			out = append(out, n)
		}
	}
	m.round++
	round := m.round
	m.mu.Unlock()
	if len(out) > 0 {
		k := round % len(out)
		out = append(out[k:], out[:k]...)
	}
	return out
}

// wantFrom notes that this node lacks node's digest (or the generation a
// change applies to): the next publishDigest asks for it whole. Called
// with m.mu held.
func (m *Mesh) wantFrom(node string) { m.toAsk[node] = true }

// tokenBucket bounds the bytes of digest changes sent per second; a zero
// or negative rate is unlimited.
type tokenBucket struct {
	rate   float64 // bytes per second
	burst  float64
	tokens float64
	at     time.Time
}

func (b *tokenBucket) refill(now time.Time) {
	if b.rate <= 0 {
		return
	}
	if !b.at.IsZero() {
		b.tokens = min(b.burst, b.tokens+b.rate*now.Sub(b.at).Seconds())
	} else {
		b.tokens = b.burst
	}
	b.at = now
}

// spend charges n bytes that were sent regardless (load summaries).
func (b *tokenBucket) spend(n int) {
	if b.rate > 0 {
		b.tokens -= float64(n)
	}
}

// take spends n bytes if any budget is left (the last message of a round
// may overdraw it; the debt is paid before the next one).
func (b *tokenBucket) take(n int) bool {
	if b.rate <= 0 {
		return true
	}
	if b.tokens <= 0 {
		return false
	}
	b.tokens -= float64(n)
	return true
}
