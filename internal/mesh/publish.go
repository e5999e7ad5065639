package mesh

import (
	"slices"
	"time"

	"github.com/hashicorp/memberlist"

	"skywalker/internal/digest"
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
	msg := encodeLoad(loadMsg{Node: m.cfg.NodeID, Seq: seq, Load: l})
	for _, n := range m.peerNodes() {
		if err := m.ml.SendBestEffort(&n, msg); err == nil {
			m.bytesSent.Add(int64(len(msg)))
			m.mu.Lock()
			m.budget.spend(len(msg))
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
	if cur != nil && (m.published == nil || cur.Generation != m.published.Generation) {
		m.history = append(m.history, cur)
		if len(m.history) > HistoryLength {
			m.history = slices.Delete(m.history, 0, len(m.history)-HistoryLength)
		}
		m.published = cur
	}
	m.budget.refill(now)
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
	var full []byte
	peers := m.digestPeers()
	for _, n := range peers {
		m.mu.Lock()
		has, known := m.sentGen[n.Name]
		wanted := m.wanted[n.Name]
		var base *digest.Digest
		for _, h := range m.history {
			if known && h.Generation == has {
				base = h
			}
		}
		m.mu.Unlock()
		if known && has == cur.Generation || !known && !wanted {
			continue // up to date, or it has not asked yet
		}
		var msg []byte
		budgeted := false
		if base != nil {
			if positions, ok := cur.AddedSince(base); ok {
				msg, budgeted = encodeBits(bitsMsg{Node: m.cfg.NodeID, Base: base.Generation, Gen: cur.Generation, Positions: positions}), true
			}
		}
		if msg == nil { // asked for, or too far behind to diff: the whole filter
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
		if budgeted {
			m.mu.Lock()
			ok := m.budget.take(len(msg))
			m.mu.Unlock()
			if !ok {
				continue // over budget: it gets the bits since `has` next time
			}
		}
		if err := m.ml.SendReliable(&n, msg); err != nil {
			m.log.Debug("digest not delivered", "to", n.Name, "err", err)
			m.mu.Lock()
			delete(m.sentGen, n.Name) // it will ask for it whole
			m.mu.Unlock()
			continue
		}
		m.bytesSent.Add(int64(len(msg)))
		m.mu.Lock()
		m.sentGen[n.Name] = cur.Generation
		delete(m.wanted, n.Name)
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
