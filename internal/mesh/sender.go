package mesh

import (
	"slices"
	"time"

	"skywalker/internal/digest"
)

// digestSender is the digest gossip's sending state, and nothing else:
// which generation each peer holds from us, who asked for the whole
// digest, the last HistoryLength published digests to diff from, and the
// byte budget for changes. It does no I/O, reads no clock and takes no
// lock: the Mesh calls it with m.mu held and sends what it says.
type digestSender struct {
	node      string
	published *digest.Digest
	history   []*digest.Digest  // the last HistoryLength published, oldest first
	sentGen   map[string]uint64 // peer → generation it holds from us
	wanted    map[string]bool   // peers that asked for the whole digest
	budget    tokenBucket
	full      []byte // published, encoded whole (built on demand, once per generation)
}

func newDigestSender(node string, budget tokenBucket) digestSender {
	return digestSender{node: node, sentGen: map[string]uint64{}, wanted: map[string]bool{}, budget: budget}
}

// publish makes cur the digest to send (a new generation joins the
// history) and refills the budget to now. A nil cur changes nothing.
func (s *digestSender) publish(now time.Time, cur *digest.Digest) {
	if cur != nil && (s.published == nil || cur.Generation != s.published.Generation) {
		s.history = append(s.history, cur)
		if len(s.history) > HistoryLength {
			s.history = slices.Delete(s.history, 0, len(s.history)-HistoryLength)
		}
		s.published, s.full = cur, nil
	}
	s.budget.refill(now)
}

// want records that peer asked for the whole digest.
func (s *digestSender) want(peer string) {
	s.wanted[peer] = true
	delete(s.sentGen, peer)
}

// forget drops a peer that left.
func (s *digestSender) forget(peer string) {
	delete(s.sentGen, peer)
	delete(s.wanted, peer)
}

// next is the message peer needs now, or nil: nil when it holds the
// published generation, has not asked for a digest yet, or the change is
// over this round's budget (it gets the bits since the generation it holds
// next time). A peer we can diff for gets the bits the digest gained since
// its generation (budgeted); one that asked, or is too far behind, gets the
// whole filter (not budgeted: it is what a peer cannot route without).
func (s *digestSender) next(peer string) ([]byte, error) {
	cur := s.published
	if cur == nil {
		return nil, nil
	}
	has, known := s.sentGen[peer]
	if known && has == cur.Generation || !known && !s.wanted[peer] {
		return nil, nil
	}
	if known {
		for _, base := range s.history {
			if base.Generation != has {
				continue
			}
			if positions, ok := cur.AddedSince(base); ok {
				msg := encodeBits(bitsMsg{Node: s.node, Base: base.Generation, Gen: cur.Generation, Positions: positions})
				if !s.budget.take(len(msg)) {
					return nil, nil
				}
				return msg, nil
			}
		}
	}
	if s.full == nil {
		enc, err := cur.MarshalBinary()
		if err != nil {
			return nil, err
		}
		s.full = encodeDigest(s.node, enc)
	}
	return s.full, nil
}

// sent records how sending peer its message went: delivered, it holds the
// published generation; lost, it is forgotten until it asks for the whole
// digest.
func (s *digestSender) sent(peer string, delivered bool) {
	if !delivered {
		delete(s.sentGen, peer)
		return
	}
	s.sentGen[peer] = s.published.Generation
	delete(s.wanted, peer)
}
