package region

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"skywalker/internal/kvevents"
)

// What a replica's prefix cache holds rests on one of three sources:
//
//   - belief (CacheBelief): the prefix index records where this node sent
//     each prompt and guesses evictions with an LRU sized by the replica's
//     cache, corrected after the fact by the engine's cached_tokens (cache
//     truth, learn.go);
//   - the engine's KV events (CacheEvents): what it stores and evicts, as
//     vLLM and SGLang publish it. The index still learns a prompt when it
//     is sent (the engine is about to store it), but forgets only what the
//     engine says it evicted, and the LRU bound is lifted;
//   - lost (CacheLost): events were subscribed but a gap could not be
//     filled (or a batch could not be read): the replica's state is not
//     known exactly, so its index falls back to belief until it is rebuilt:
//     once the engine has stored as many blocks as its cache holds since
//     (everything from before is gone), or cleared it (a restart).
//
// Engine block hashes are over token ids; SkyWalker's are over text, and
// it does not tokenize. So the correspondence is learned (the issue's
// option (a)): a run of blocks the engine stores that does not continue
// a run already attributed is the prompt of the oldest request this node
// sent the replica that has not been attributed yet and is consistent
// with the run's parent (engines prefill in arrival order), and each
// engine block is mapped to the deepest of that prompt's blocks it
// completes (engine blocks are 16 tokens, SkyWalker's 128 by estimate).
// When the engine evicts a block, that prompt block and every deeper one
// of the prompt leave the index. Stores and removals are counted per
// (data-parallel rank, hash, medium), as an engine may hold a block on
// several ranks or media; only GPU blocks make a prefix reusable.

// CacheSource says what a replica's prefix index rests on.
type CacheSource uint8

// The sources.
const (
	CacheBelief CacheSource = iota
	CacheEvents
	CacheLost
)

func (s CacheSource) String() string { return [...]string{"belief", "events", "lost"}[s] }

// maxPendingChains bounds the requests awaiting attribution per replica.
const maxPendingChains = 1024

// engineCache is one replica's cache as its KV events describe it.
type engineCache struct {
	source CacheSource
	// held counts stores less removals per (rank, hash, medium), and onGPU
	// per hash over the ranks, of blocks on the GPU.
	held  map[heldKey]int
	onGPU map[uint64]int
	// owners maps an engine block to where it lies in a prompt.
	owners map[uint64]owner
	// pending are the prompts sent to the replica, oldest first, whose
	// stores have not been seen; open the runs being stored, by the hash
	// of their last block.
	pending []*chain
	open    map[uint64]*chain
	// orphans are stored runs no prompt could be found for, kept a while
	// when the region's other nodes share their dispatches: the prompt
	// may be one of theirs, told after its stores were heard.
	orphans []kvevents.Event
	// heard are the batches awaiting EventSettle, oldest first.
	heard []heardBatch
	// storedSinceLoss counts blocks stored since the state was lost.
	storedSinceLoss int
	// overflows counts the times its events claimed more blocks than its
	// cache holds and were dropped (see overHeld).
	overflows int
}

type heldKey struct {
	rank   int
	hash   uint64
	medium string
}

// owner is where an engine block lies in a prompt: in blocks[idx] (idx
// may be len(blocks): the incomplete tail, which the index does not
// hold), ending at the prompt's token tokenEnd.
type owner struct {
	blocks      []uint64
	blockTokens int
	idx         int
	tokenEnd    int
}

// chain is one prompt being stored.
type chain struct {
	blocks      []uint64
	blockTokens int
	cached      int // its blocks the index believed the replica held when it was sent
	tokenPos    int // tokens of the prompt stored so far
	// sent, from and id order the pending prompts the same way on every
	// node of the region: when it was sent, by which node ("": this one),
	// its number there (siblings.go).
	sent time.Time
	from string
	id   uint64
}

// cacheSent records a prompt dispatched to rp at sent by node from (""
// this one) as its dispatch id, awaiting its stores; nil while rp's cache
// rests on belief. Pending prompts are kept in the order they were sent.
func (r *pool) cacheSent(rp *replica, blocks []uint64, blockTokens, cached int, sent time.Time, from string, id uint64) *chain {
	ec := &rp.engine
	if ec.source == CacheBelief || len(blocks) == 0 {
		return nil
	}
	if len(ec.pending) >= maxPendingChains {
		ec.pending = ec.pending[1:]
	}
	ch := &chain{blocks: blocks, blockTokens: max(blockTokens, 1), cached: cached, sent: sent, from: from, id: id}
	i := len(ec.pending)
	for i > 0 && r.sentAfter(ec.pending[i-1], ch) {
		i--
	}
	ec.pending = slices.Insert(ec.pending, i, ch)
	return ch
}

// sentAfter reports whether a was sent after b (by time, then node name,
// then number: the same order on every node).
func (r *pool) sentAfter(a, b *chain) bool {
	if !a.sent.Equal(b.sent) {
		return a.sent.After(b.sent)
	}
	af, bf := cmp.Or(a.from, r.siblings.self), cmp.Or(b.from, r.siblings.self)
	if af != bf {
		return af > bf
	}
	return a.id > b.id
}

// cacheDone takes a prompt whose request ended off rp's pending list: its
// prefill is long over, so whatever it stored has been published (a
// prompt wholly cached stores nothing, and must not take a later prompt's
// stores).
func (r *pool) cacheDone(rp *replica, ch *chain) {
	if ch == nil {
		return
	}
	ec := &rp.engine
	for i, p := range ec.pending {
		if p == ch {
			ec.pending = append(ec.pending[:i], ec.pending[i+1:]...)
			return
		}
	}
}

// sizeIndex bounds rp's share of the prefix index: its believed cache
// (learn.go), or, while its evictions come from its engine, twice its
// cache, so that a prompt sent but never stored (a request that failed)
// still ages out.
func (r *pool) sizeIndex(rp *replica) {
	if rp.engine.source == CacheEvents {
		r.index.SetCapacity(rp.target, 2*r.capacityTokens(rp))
		return
	}
	r.index.SetCapacity(rp.target, r.believedTokens(rp))
}

// EngineEvents applies a batch of rp's KV events, published by its
// data-parallel rank rank, heard at now. The first batch makes the events
// rp's cache source (its index then forgets only what the engine evicts).
// While the region's nodes share their dispatches, batches are applied
// EventSettle after they were heard, in order (Pump applies them): by
// then every node has been told every prompt the batch may store, so all
// attribute it alike.
func (r *pool) EngineEvents(now time.Time, rp *replica, rank int, events []kvevents.Event) {
	r.at(now)
	ec := &rp.engine
	if r.siblings.on {
		if len(ec.heard) >= maxHeldBatches {
			b := ec.heard[0]
			ec.heard = ec.heard[1:]
			r.applyEngineEvents(rp, b.rank, b.events)
		}
		ec.heard = append(ec.heard, heardBatch{at: now, rank: rank, events: events})
		r.settle(rp, now)
		return
	}
	r.applyEngineEvents(rp, rank, events)
}

// heardBatch is a batch of KV events awaiting EventSettle.
type heardBatch struct {
	at     time.Time
	rank   int
	events []kvevents.Event
}

// maxHeldBatches bounds the batches awaiting EventSettle per replica.
const maxHeldBatches = 4096

// settleEvents applies every replica's batches heard EventSettle before
// now.
func (r *pool) settleEvents(now time.Time) {
	for _, rp := range r.replicas {
		if len(rp.engine.heard) > 0 {
			r.settle(rp, now)
		}
	}
}

func (r *pool) settle(rp *replica, now time.Time) {
	ec := &rp.engine
	n := 0
	for n < len(ec.heard) && !ec.heard[n].at.Add(r.cfg.EventSettle).After(now) {
		r.applyEngineEvents(rp, ec.heard[n].rank, ec.heard[n].events)
		n++
	}
	ec.heard = slices.Delete(ec.heard, 0, n)
}

// flushHeard applies every batch rp's engine published before a restart
// or a loss, settled or not.
func (r *pool) flushHeard(rp *replica) {
	ec := &rp.engine
	for _, b := range ec.heard {
		r.applyEngineEvents(rp, b.rank, b.events)
	}
	ec.heard = nil
}

func (r *pool) applyEngineEvents(rp *replica, rank int, events []kvevents.Event) {
	ec := &rp.engine
	if ec.source == CacheBelief {
		ec.source = CacheEvents
		ec.held, ec.onGPU, ec.owners, ec.open = map[heldKey]int{}, map[uint64]int{}, map[uint64]owner{}, map[uint64]*chain{}
		r.sizeIndex(rp) // evictions come from the engine now
	}
	for i := range events {
		e := &events[i]
		switch e.Kind {
		case kvevents.Stored:
			r.engineStored(rp, rank, e)
		case kvevents.Removed:
			r.engineRemoved(rp, rank, e)
		case kvevents.Cleared:
			r.engineCleared(rp)
		}
	}
	if ec.source == CacheLost && ec.storedSinceLoss >= r.capacityTokens(rp)/max(r.cfg.BlockTokens, 1)*engineBlocksPerPromptBlock {
		ec.source = CacheEvents // everything from before the loss has been evicted since
		r.sizeIndex(rp)
	}
}

// engineBlocksPerPromptBlock is how many engine blocks (vLLM's 16 tokens)
// one prompt block (128 tokens by estimate) is, for counting a cache's
// worth of stores.
const engineBlocksPerPromptBlock = 8

func (r *pool) engineStored(rp *replica, rank int, e *kvevents.Event) {
	ec := &rp.engine
	if ec.source == CacheLost {
		ec.storedSinceLoss += len(e.Hashes)
	}
	medium := e.Medium
	for _, h := range e.Hashes {
		ec.held[heldKey{rank, h, medium}]++
		if gpu(medium) {
			ec.onGPU[h]++
		}
	}
	if len(ec.held) > r.heldCap(rp) {
		r.overHeld(rp)
		return
	}
	if !gpu(medium) || len(e.Hashes) == 0 {
		return
	}
	ch := r.attribute(ec, e)
	if ch == nil {
		if r.siblings.on {
			if len(ec.orphans) >= maxOrphans {
				ec.orphans = ec.orphans[1:]
			}
			ec.orphans = append(ec.orphans, kvevents.Event{Kind: e.Kind, Hashes: slices.Clone(e.Hashes), Parent: e.Parent, HasParent: e.HasParent,
				BlockSize: e.BlockSize, Tokens: e.Tokens, Medium: e.Medium})
		}
		return
	}
	assign(ec, ch, e)
}

// heldCapFactor is how many entries a replica's event state may hold per
// engine block of its cache: its blocks on every rank of a tensor-parallel
// engine and on an offload medium, with room to spare. minHeldCap is the
// least, for a replica whose cache is not known yet.
const (
	heldCapFactor = 4
	minHeldCap    = 1 << 14
	// engineBlockTokens is vLLM's default block size, the unit KV events
	// count blocks in.
	engineBlockTokens = 16
)

// heldCap bounds rp's event state: no engine holds more blocks than its
// cache (capacityTokens), so events that claim more are not its cache's.
func (r *pool) heldCap(rp *replica) int {
	return max(minHeldCap, heldCapFactor*r.capacityTokens(rp)/engineBlockTokens)
}

// overHeld drops rp's event state when its events claim more blocks than
// its cache holds — an engine (or whoever reaches its event port)
// publishing blocks it never stored: without this bound each such block
// stays in memory for good. Its index rests on belief, bounded by its
// cache, until a cache's worth of stores rebuilds it, as after a loss.
func (r *pool) overHeld(rp *replica) {
	ec := &rp.engine
	ec.overflows++
	r.EngineEventsLost(rp)
	clear(ec.held)
	clear(ec.onGPU)
	ec.held, ec.onGPU = map[heldKey]int{}, map[uint64]int{} // a cleared map keeps its buckets
}

// maxOrphans bounds the unattributed runs kept per replica.
const maxOrphans = 64

// assign maps the engine blocks of the stored run e to where they lie in
// the prompt ch (those still held: an orphan's may have been evicted).
func assign(ec *engineCache, ch *chain, e *kvevents.Event) {
	per := e.BlockSize
	if per <= 0 && e.Tokens > 0 {
		per = e.Tokens / len(e.Hashes)
	}
	per = max(per, 1)
	for _, h := range e.Hashes {
		if ec.onGPU[h] > 0 {
			ec.owners[h] = owner{blocks: ch.blocks, blockTokens: ch.blockTokens, idx: min(ch.tokenPos/ch.blockTokens, len(ch.blocks)), tokenEnd: ch.tokenPos + per}
		}
		ch.tokenPos += per
	}
	ec.open[e.Hashes[len(e.Hashes)-1]] = ch
}

// adoptOrphans attributes the runs no prompt was found for, in the order
// they were stored, now that another node's prompt may explain them.
func (r *pool) adoptOrphans(rp *replica) {
	ec := &rp.engine
	kept := ec.orphans[:0]
	for i := range ec.orphans {
		e := &ec.orphans[i]
		if ch := r.attribute(ec, e); ch != nil {
			assign(ec, ch, e)
		} else {
			kept = append(kept, *e)
		}
	}
	clear(ec.orphans[len(kept):])
	ec.orphans = kept
}

// attribute finds the prompt a stored run belongs to: the run it
// continues, or the oldest pending prompt consistent with its parent.
func (r *pool) attribute(ec *engineCache, e *kvevents.Event) *chain {
	var cont *chain // the run this one may continue
	if e.HasParent {
		if cont = ec.open[e.Parent]; cont != nil && cont.tokenPos < len(cont.blocks)*cont.blockTokens {
			delete(ec.open, e.Parent)
			return cont // its prompt is still being stored (a chunked prefill)
		}
	}
	start := 0
	var parent owner
	if e.HasParent {
		var ok bool
		if parent, ok = ec.owners[e.Parent]; !ok {
			// It continues a block this node does not know (stored before
			// it listened, or by a run it could not attribute): the oldest
			// pending prompt the index believed partly cached, from where
			// it believed the cache ended.
			for i, ch := range ec.pending {
				if ch.cached > 0 {
					ec.pending = append(ec.pending[:i], ec.pending[i+1:]...)
					ch.tokenPos = ch.cached * ch.blockTokens
					return ch
				}
			}
			return nil
		}
		start = parent.tokenEnd
	}
	shared := -1 // the deepest prompt block the parent completes
	if e.HasParent {
		shared = parent.tokenEnd/max(parent.blockTokens, 1) - 1
	}
	// The run is the oldest pending prompt that shares the prefix it
	// continues (any, for a run from no parent), preferring one the index
	// believed cached exactly up to where the run starts (a run from no
	// parent: a prompt nothing of which was cached): two prompts under one
	// shared system prompt both share it, but only the one whose own
	// conversation was not cached there stores from its end.
	pick := -1
	for i, ch := range ec.pending {
		if shared >= 0 && (shared >= len(ch.blocks) || shared >= len(parent.blocks) || ch.blocks[shared] != parent.blocks[shared]) {
			continue // this prompt does not share the prefix the run continues
		}
		if pick < 0 {
			pick = i
		}
		if ch.cached*ch.blockTokens == start {
			pick = i
			break
		}
	}
	if pick >= 0 {
		ch := ec.pending[pick]
		ec.pending = append(ec.pending[:pick], ec.pending[pick+1:]...)
		ch.tokenPos = start
		return ch
	}
	if cont != nil { // no later prompt shares it: the run is the first's output, stored as it decodes
		delete(ec.open, e.Parent)
		return cont
	}
	// A prompt whose run was cut by a block another request stored first
	// (two prompts sharing a prefix prefilled at once): its run resumes
	// just past that block.
	if shared >= 0 {
		for h, ch := range ec.open {
			if ch.tokenPos < start && start-ch.tokenPos <= ch.blockTokens && shared < len(ch.blocks) && shared < len(parent.blocks) && ch.blocks[shared] == parent.blocks[shared] {
				delete(ec.open, h)
				ch.tokenPos = start
				return ch
			}
		}
	}
	return nil
}

func (r *pool) engineRemoved(rp *replica, rank int, e *kvevents.Event) {
	ec := &rp.engine
	for _, h := range e.Hashes {
		k := heldKey{rank, h, e.Medium}
		n, ok := ec.held[k]
		if !ok {
			continue // never seen stored (before this node listened)
		}
		if n > 1 {
			ec.held[k] = n - 1
		} else {
			delete(ec.held, k)
		}
		if !gpu(e.Medium) {
			continue
		}
		if ec.onGPU[h] > 1 {
			ec.onGPU[h]-- // another rank still holds it
			continue
		}
		delete(ec.onGPU, h)
		o, ok := ec.owners[h]
		delete(ec.owners, h)
		delete(ec.open, h)
		if ok && o.idx >= 0 && ec.source == CacheEvents {
			if r.index.Remove(rp.target, o.blocks[o.idx:]) > 0 {
				r.digests.stale = true
			}
		}
	}
}

// engineCleared is AllBlocksCleared (or an engine that restarted): its
// cache is empty, and known to be.
func (r *pool) engineCleared(rp *replica) {
	ec := &rp.engine
	r.index.Forget(rp.target)
	r.digests.stale = true
	if ec.held == nil {
		ec.held, ec.onGPU, ec.owners, ec.open = map[heldKey]int{}, map[uint64]int{}, map[uint64]owner{}, map[uint64]*chain{}
	}
	clear(ec.held)
	clear(ec.onGPU)
	clear(ec.owners)
	clear(ec.open)
	ec.pending, ec.orphans = ec.pending[:0], nil
	ec.source, ec.storedSinceLoss = CacheEvents, 0
	r.sizeIndex(rp)
}

// EngineEventsLost records that rp's events could not be kept whole (a
// gap no replay filled, a batch that could not be read): its index falls
// back to belief, bounded by its cache again, until rebuilt (see the
// package comment). why is for the caller's log.
func (r *pool) EngineEventsLost(rp *replica) {
	ec := &rp.engine
	if ec.source == CacheBelief {
		return
	}
	r.flushHeard(rp)
	ec.source, ec.storedSinceLoss = CacheLost, 0
	clear(ec.owners)
	clear(ec.open)
	ec.pending, ec.orphans = ec.pending[:0], nil
	r.sizeIndex(rp)
}

// EngineRestarted records that rp's engine restarted (its events' sequence
// began again): its cache is empty.
func (r *pool) EngineRestarted(rp *replica) {
	r.flushHeard(rp)
	r.engineCleared(rp)
}

// gpu reports whether a block on medium makes a prefix reusable at once.
func gpu(medium string) bool { return medium == "" || medium == "GPU" || medium == "gpu" }

// String describes rp's cache source, for the debug endpoint.
func (ec *engineCache) String() string {
	s := fmt.Sprintf("%s (%d engine blocks held, %d mapped, %d prompts awaiting their stores)", ec.source, len(ec.held), len(ec.owners), len(ec.pending))
	if ec.overflows > 0 {
		s += fmt.Sprintf("; its events claimed more blocks than its cache holds %d times and were dropped", ec.overflows)
	}
	return s
}
