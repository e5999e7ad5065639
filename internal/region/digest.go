package region

import "skywalker/internal/digest"

// digestPublisher keeps the Bloom digest of the blocks the region's prefix
// indexes hold, for peers to match requests against: one pool's, or
// every pool's of a Pools (their blocks are salted by model and adapter,
// so one filter serves them all).
//
// Blocks are added to a live filter as the index learns them, so a publish
// costs a copy of the filter, not a scan of the index. Evicted blocks stay
// in the live filter (a Bloom filter cannot delete) until it is rebuilt
// from the index: once as many blocks were added as it is sized for (so it
// never holds more than its capacity and keeps its false-positive rate),
// when a replica's entries were dropped wholesale, or when the replicas'
// cache size changed by more than half. It is sized at twice the replicas'
// KV capacity, in blocks, so rebuilds are rare.
type digestPublisher struct {
	sources   []*pool
	live      *digest.Digest
	published *digest.Digest
	capacity  uint // blocks the live filter is sized for
	added     uint // blocks in the live filter (present or stale)
	changed   bool // live differs from published
	stale     bool // a replica's blocks were dropped: rebuild
	gen       uint64
}

// learn adds a block new to the index to the live filter.
func (p *digestPublisher) learn(hash uint64) {
	if p.live == nil {
		return // built from the index at the first publish
	}
	p.live.Add(hash)
	p.added++
	p.changed = true
}

// wantCapacity is twice the replicas' KV capacity in blocks.
func (p *digestPublisher) wantCapacity() uint {
	blocks := 0
	for _, r := range p.sources {
		for _, rp := range r.replicas {
			blocks += r.capacityTokens(rp) / r.cfg.BlockTokens
		}
	}
	return uint(max(2*blocks, 1024))
}

// Digest returns the digest to publish: the same value while nothing
// changed, else a snapshot with a higher Generation. A returned digest is
// never modified afterwards, so it may be shared with other goroutines.
func (r *pool) Digest() *digest.Digest { return r.digests.digest() }

func (p *digestPublisher) digest() *digest.Digest {
	want := p.wantCapacity()
	if p.live == nil || p.stale || p.added > p.capacity || want > p.capacity || want < p.capacity/2 {
		p.capacity = want
		first := p.sources[0].cfg
		p.live = digest.New(first.Name, first.Node, 0, p.capacity, digest.DefaultFalsePositiveRate)
		p.added = 0
		for _, r := range p.sources {
			r.index.ForEachBlock(p.live.Add)
			p.added += uint(r.index.Blocks())
		}
		p.stale, p.changed = false, true
	}
	if p.changed || p.published == nil {
		p.gen++
		p.published = p.live.Clone()
		p.published.Generation = p.gen
		p.changed = false
	}
	return p.published
}
