package region

// Accessors the tests read the core's state by; the drivers read it
// through Node.Snapshot.

// IndexedBlocks is how many prefix blocks the index believes rp holds.
func (r *pool) IndexedBlocks(rp *replica) int { return r.index.TargetLen(rp.target) }

// InFlight is the number of requests dispatched to it and not yet done.
func (r *replica) InFlight() int { return r.inFlight }

// Name is the replica's name (the proxy uses host:port).
func (r *replica) Name() string { return r.name }

// Healthy reports whether the replica is in service (not ejected).
func (r *replica) Healthy() bool { return r.healthy }

// Replicas returns the replica table in routing order. The slice and its
// replicas must not be modified.
func (r *pool) Replicas() []*replica { return r.replicas }

// Scraped records a scrape that took no time (the simulator's).
func (r *pool) Scraped(rp *replica, m Metrics) { r.ScrapedSince(rp, m, r.MarkScrape(rp)) }

// Peers returns the last peers' snapshot. It must not be modified.
func (r *pool) Peers() []Peer { return r.peers }

// BelievedCacheTokens is the KV cache, in tokens, the index sizes rp by.
func (r *pool) BelievedCacheTokens(rp *replica) int { return r.believedTokens(rp) }

// DispatchCap is how many requests the balancer may have in flight at rp
// (see dispatchCap).
func (r *pool) DispatchCap(rp *replica) int { return r.dispatchCap(rp) }

// Truth returns rp's cache-truth counts.
func (r *pool) Truth(rp *replica) CacheTruth { return rp.truth }

// CacheSource is what rp's prefix index rests on.
func (r *pool) CacheSource(rp *replica) CacheSource { return rp.engine.source }
