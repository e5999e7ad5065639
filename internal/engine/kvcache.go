package engine

// kvCache is the paged KV cache's block accounting. Blocks belong either to
// a sequence privately (the uncached tail of its prompt, its output) or to a
// prefix unit: a prompt block shared by every sequence whose prompt starts
// with the same chain of hashes. Units nobody references stay cached but
// evictable, in LRU order, until their blocks are needed.
type kvCache struct {
	total       int
	usedUnits   int // blocks held by units, referenced or not
	evictable   int // blocks held by units nobody references
	usedPrivate int
	units       map[uint64]*unit
	lruHead     *unit // least recently released; evicted first
	lruTail     *unit
	evictions   int64
	// evicted collects the hashes of evicted units while trackEvictions
	// is set (KV events: Engine.TakeKVEvents).
	trackEvictions bool
	evicted        []uint64
}

type unit struct {
	hash       uint64
	blocks     int
	refs       int
	prev, next *unit // evictable list links, valid while refs == 0
}

func newKVCache(blocks int) kvCache {
	return kvCache{total: blocks, units: make(map[uint64]*unit)}
}

// free is the number of blocks nobody holds.
func (c *kvCache) free() int { return c.total - c.usedUnits - c.usedPrivate }

// inUse is the number of blocks running sequences need: everything but
// free and evictable blocks (vLLM's kv_cache_usage_perc counts the same).
func (c *kvCache) inUse() int { return c.usedUnits - c.evictable + c.usedPrivate }

// ensure evicts unreferenced units, least recently used first, until n
// blocks are free; it reports whether that was possible.
func (c *kvCache) ensure(n int) bool {
	for c.free() < n && c.lruHead != nil {
		u := c.lruHead
		c.unlink(u)
		c.evictable -= u.blocks
		c.usedUnits -= u.blocks
		delete(c.units, u.hash)
		c.evictions++
		if c.trackEvictions {
			c.evicted = append(c.evicted, u.hash)
		}
	}
	return c.free() >= n
}

// acquire takes a reference on the cached unit for hash, if there is one.
func (c *kvCache) acquire(hash uint64) (*unit, bool) {
	u, ok := c.units[hash]
	if !ok {
		return nil, false
	}
	if u.refs == 0 {
		c.unlink(u)
		c.evictable -= u.blocks
	}
	u.refs++
	return u, true
}

// insert registers a new unit of the given size, referenced once. The
// caller moves the blocks from its private count.
func (c *kvCache) insert(hash uint64, blocks int) *unit {
	u := &unit{hash: hash, blocks: blocks, refs: 1}
	c.units[hash] = u
	c.usedUnits += blocks
	return u
}

// release drops one reference; an unreferenced unit becomes the most
// recently used evictable one.
func (c *kvCache) release(u *unit) {
	u.refs--
	if u.refs > 0 {
		return
	}
	c.evictable += u.blocks
	u.prev, u.next = c.lruTail, nil
	if c.lruTail != nil {
		c.lruTail.next = u
	} else {
		c.lruHead = u
	}
	c.lruTail = u
}

func (c *kvCache) unlink(u *unit) {
	if u.prev != nil {
		u.prev.next = u.next
	} else {
		c.lruHead = u.next
	}
	if u.next != nil {
		u.next.prev = u.prev
	} else {
		c.lruTail = u.prev
	}
	u.prev, u.next = nil, nil
}
