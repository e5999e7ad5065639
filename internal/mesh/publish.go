package mesh

import (
	"time"

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
		}
	}
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
	for _, n := range m.peerNodes() {
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
		if err := m.ml.SendReliable(&n, msg); err != nil {
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
