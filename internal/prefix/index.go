package prefix

import (
	"errors"
	"fmt"
	"math/bits"
)

// MaxTargets is how many targets one Index tracks: the replicas of one
// region, or the regions of one mesh. Target sets are 64-bit masks, which
// keeps a block's entry to one word and a match to a few map lookups.
const MaxTargets = 64

// Target identifies one target of an Index. It is a small integer, valid
// from AddTarget until RemoveTarget.
type Target uint8

// ErrTooManyTargets is returned by AddTarget when MaxTargets are in use.
var ErrTooManyTargets = errors.New("prefix index: too many targets")

// Index maps block hashes to the targets believed to cache them, with one
// LRU list per target bounded by the target's capacity.
//
// Memory: one map entry per distinct block (its target mask and the head of
// its node chain) plus one 24-byte node per (block, target) pair; see
// BenchmarkIndexMemory for the measured bytes per entry.
type Index struct {
	blockTokens int
	blocks      map[uint64]blockEntry
	nodes       []node // nodes[0] is the nil sentinel
	free        uint32 // head of the free-node list
	targets     [MaxTargets]targetState
	inUse       uint64 // mask of allocated targets
}

type blockEntry struct {
	mask  uint64 // targets holding the block
	first uint32 // first node of the block's chain (one node per target)
}

// node is one (block, target) pair, linked in its target's LRU list and in
// its block's chain.
type node struct {
	hash       uint64
	prev, next uint32 // LRU neighbours within the target; prev is toward the most recent
	sibling    uint32 // next node of the same block
	target     Target
}

type targetState struct {
	name      string
	capBlocks int
	count     int
	head      uint32 // most recently used
	tail      uint32 // least recently used; evicted first
}

// New returns an empty index whose blocks each cover blockTokens tokens.
func New(blockTokens int) *Index {
	if blockTokens < 1 {
		blockTokens = 1
	}
	return &Index{blockTokens: blockTokens, blocks: make(map[uint64]blockEntry), nodes: make([]node, 1)}
}

// AddTarget registers a target whose cache holds capacityTokens tokens.
func (x *Index) AddTarget(name string, capacityTokens int) (Target, error) {
	if x.inUse == ^uint64(0) {
		return 0, fmt.Errorf("add %q: %w (max %d)", name, ErrTooManyTargets, MaxTargets)
	}
	t := Target(bits.TrailingZeros64(^x.inUse))
	x.inUse |= 1 << t
	x.targets[t] = targetState{name: name}
	x.SetCapacity(t, capacityTokens)
	return t, nil
}

// RemoveTarget forgets a target and everything it held; its id may be reused.
func (x *Index) RemoveTarget(t Target) {
	x.Forget(t)
	x.inUse &^= 1 << t
	x.targets[t] = targetState{}
}

// Forget drops every block of target t, as when its engine restarted and
// lost its cache. The target stays registered.
func (x *Index) Forget(t Target) {
	for x.targets[t].tail != 0 {
		x.evict(t)
	}
}

// SetCapacity changes target t's capacity, evicting at once if it shrank.
func (x *Index) SetCapacity(t Target, capacityTokens int) {
	ts := &x.targets[t]
	ts.capBlocks = max(capacityTokens/x.blockTokens, 1)
	for ts.count > ts.capBlocks {
		x.evict(t)
	}
}

// Name returns the name target t was registered with.
func (x *Index) Name(t Target) string { return x.targets[t].name }

// BlockTokens is the number of tokens one block covers.
func (x *Index) BlockTokens() int { return x.blockTokens }

// Len returns the number of (block, target) entries.
func (x *Index) Len() int {
	n := 0
	for m := x.inUse; m != 0; m &= m - 1 {
		n += x.targets[bits.TrailingZeros64(m)].count
	}
	return n
}

// Blocks returns the number of distinct blocks held by any target.
func (x *Index) Blocks() int { return len(x.blocks) }

// TargetLen returns the number of blocks target t holds.
func (x *Index) TargetLen(t Target) int { return x.targets[t].count }

// Insert records that target t now caches the request prefix blocks (in
// order, blocks[0] first). The blocks are touched deepest first, so the
// root of a prefix is always more recent than its descendants and eviction
// removes leaves before roots: every target's set stays prefix-closed, which
// is what lets Match bisect instead of scanning.
//
// added, if not nil, is called for each block no target held before: what
// a digest of the whole index must learn.
func (x *Index) Insert(t Target, blocks []uint64, added func(hash uint64)) {
	if x.inUse&(1<<t) == 0 {
		return
	}
	for i := len(blocks) - 1; i >= 0; i-- {
		if x.touch(t, blocks[i]) && added != nil {
			added(blocks[i])
		}
	}
	ts := &x.targets[t]
	for ts.count > ts.capBlocks {
		x.evict(t)
	}
}

// touch makes (hash, t) the most recent entry of t, adding it if absent,
// and reports whether the block was new to the whole index.
func (x *Index) touch(t Target, hash uint64) bool {
	e, ok := x.blocks[hash]
	if ok && e.mask&(1<<t) != 0 {
		n := e.first
		for x.nodes[n].target != t {
			n = x.nodes[n].sibling
		}
		x.unlink(n)
		x.pushFront(t, n)
		return false
	}
	n := x.alloc()
	x.nodes[n] = node{hash: hash, target: t, sibling: e.first}
	e.first = n
	e.mask |= 1 << t
	x.blocks[hash] = e
	x.pushFront(t, n)
	x.targets[t].count++
	return !ok
}

// evict removes t's least recently used entry.
func (x *Index) evict(t Target) {
	if n := x.targets[t].tail; n != 0 {
		x.drop(n)
	}
}

// Remove drops target t's entries for blocks (those it holds), as when its
// engine said it evicted them, and returns how many it dropped. The caller
// keeps t's set prefix-closed by passing a block with every deeper block
// of its prompt.
func (x *Index) Remove(t Target, blocks []uint64) int {
	dropped := 0
	for _, h := range blocks {
		e, ok := x.blocks[h]
		if !ok || e.mask&(1<<t) == 0 {
			continue
		}
		n := e.first
		for x.nodes[n].target != t {
			n = x.nodes[n].sibling
		}
		x.drop(n)
		dropped++
	}
	return dropped
}

// drop removes the entry of node n.
func (x *Index) drop(n uint32) {
	t := x.nodes[n].target
	ts := &x.targets[t]
	hash := x.nodes[n].hash
	x.unlink(n)
	ts.count--
	e := x.blocks[hash]
	e.mask &^= 1 << t
	if e.mask == 0 {
		delete(x.blocks, hash)
	} else {
		if e.first == n {
			e.first = x.nodes[n].sibling
		} else {
			p := e.first
			for x.nodes[p].sibling != n {
				p = x.nodes[p].sibling
			}
			x.nodes[p].sibling = x.nodes[n].sibling
		}
		x.blocks[hash] = e
	}
	x.release(n)
}

func (x *Index) alloc() uint32 {
	if x.free != 0 {
		n := x.free
		x.free = x.nodes[n].next
		return n
	}
	x.nodes = append(x.nodes, node{})
	return uint32(len(x.nodes) - 1)
}

func (x *Index) release(n uint32) {
	x.nodes[n] = node{next: x.free}
	x.free = n
}

func (x *Index) pushFront(t Target, n uint32) {
	ts := &x.targets[t]
	x.nodes[n].prev = 0
	x.nodes[n].next = ts.head
	if ts.head != 0 {
		x.nodes[ts.head].prev = n
	}
	ts.head = n
	if ts.tail == 0 {
		ts.tail = n
	}
}

func (x *Index) unlink(n uint32) {
	nd := &x.nodes[n]
	ts := &x.targets[nd.target]
	if nd.prev != 0 {
		x.nodes[nd.prev].next = nd.next
	} else {
		ts.head = nd.next
	}
	if nd.next != 0 {
		x.nodes[nd.next].prev = nd.prev
	} else {
		ts.tail = nd.prev
	}
	nd.prev, nd.next = 0, 0
}

// ForEachBlock calls fn for every distinct block held by any target, in no
// particular order (how a region's digest is built from its index).
func (x *Index) ForEachBlock(fn func(hash uint64)) {
	for h := range x.blocks {
		fn(h)
	}
}

// Match sets matched[t] to the number of leading blocks of the request that
// target t holds, for every registered target (matched must have room for
// MaxTargets entries; entries of unregistered targets are set to 0), and
// returns the longest match.
//
// Because every target's set is prefix-closed (see Insert), the set of
// targets holding block i only shrinks as i grows. Match bisects on that
// monotone sequence: it probes the map O(k·log n) times for k distinct match
// lengths instead of n times, which matters for 100k-token prompts (800
// blocks) against a map of a million entries, where each probe is a cache
// miss.
func (x *Index) Match(blocks []uint64, matched []int) int {
	matched = matched[:MaxTargets]
	clear(matched)
	if len(blocks) == 0 {
		return 0
	}
	first := x.holders(blocks[0])
	if first == 0 {
		return 0
	}
	x.bisect(blocks, matched, 0, first, len(blocks), 0)
	longest := 0
	for m := first; m != 0; m &= m - 1 {
		longest = max(longest, matched[bits.TrailingZeros64(m)])
	}
	return longest
}

func (x *Index) holders(hash uint64) uint64 {
	return x.blocks[hash].mask
}

// bisect resolves the targets in loMask &^ hiMask, which hold block lo but
// not block hi (hi == len(blocks) stands for "past the end"): each one's
// match length lies in (lo, hi].
func (x *Index) bisect(blocks []uint64, matched []int, lo int, loMask uint64, hi int, hiMask uint64) {
	if loMask == hiMask {
		return
	}
	if hi-lo == 1 {
		for m := loMask &^ hiMask; m != 0; m &= m - 1 {
			matched[bits.TrailingZeros64(m)] = hi
		}
		return
	}
	mid := lo + (hi-lo)/2
	midMask := x.holders(blocks[mid]) & loMask // never more than held at lo
	x.bisect(blocks, matched, lo, loMask, mid, midMask)
	x.bisect(blocks, matched, mid, midMask, hi, hiMask&midMask)
}
