package policy

import "skywalker/internal/request"

// CacheAwareConfig tunes CacheAware; the defaults are the SGLang router's.
type CacheAwareConfig struct {
	// CacheThreshold: route by cache only if the best match covers more
	// than this fraction of the prompt. Default 0.5.
	CacheThreshold float64
	// The pool is imbalanced when max load − min load > BalanceAbsThreshold
	// and max load > BalanceRelThreshold × min load; then the least-loaded
	// member wins regardless of cache. Defaults 32 and 1.0001.
	BalanceAbsThreshold float64
	BalanceRelThreshold float64
}

// DefaultCacheAwareConfig returns the SGLang router's defaults.
func DefaultCacheAwareConfig() CacheAwareConfig {
	return CacheAwareConfig{CacheThreshold: 0.5, BalanceAbsThreshold: 32, BalanceRelThreshold: 1.0001}
}

// CacheAware is the SGLang router's cache-aware policy applied globally:
// while loads are balanced, a request goes to the member (a local replica,
// or a peer region by its digest) holding the longest prefix of it if that
// prefix covers more than CacheThreshold of the prompt, else to the
// least-loaded member; when loads are imbalanced, always to the least
// loaded. It knows nothing of RTT: that is what it is a baseline for.
type CacheAware struct {
	cfg    CacheAwareConfig
	filter peerFilter
}

// NewCacheAware returns the policy.
func NewCacheAware(cfg CacheAwareConfig, sw SkywalkerConfig) *CacheAware {
	return &CacheAware{cfg: cfg, filter: globalFilter(sw)}
}

// Name implements Policy.
func (c *CacheAware) Name() string { return "cache-aware" }

// Route implements Policy.
func (c *CacheAware) Route(req *request.Request, v *View) Decision {
	var buf [32]member
	ms, _ := members(req, v, c.filter, buf[:0])
	if len(ms) == 0 {
		return noMember(req, v)
	}
	least, most, bestMatch := 0, 0, 0
	for i := 1; i < len(ms); i++ {
		if ms[i].load(v) < ms[least].load(v) {
			least = i
		}
		if ms[i].load(v) > ms[most].load(v) {
			most = i
		}
		if ms[i].prefixBlocks(v) > ms[bestMatch].prefixBlocks(v) {
			bestMatch = i
		}
	}
	lo, hi := ms[least].load(v), ms[most].load(v)
	if hi-lo > c.cfg.BalanceAbsThreshold && hi > c.cfg.BalanceRelThreshold*lo {
		return ms[least].decide(v, ReasonImbalance)
	}
	if req.PromptTokens > 0 {
		rate := float64(req.CachedTokens(ms[bestMatch].prefixBlocks(v))) / float64(req.PromptTokens)
		if rate > c.cfg.CacheThreshold {
			return ms[bestMatch].decide(v, ReasonCacheHit)
		}
	}
	return ms[least].decide(v, ReasonLeastLoad)
}

var _ Policy = (*CacheAware)(nil)
