package policy

import (
	"fmt"
	"strings"
)

// Names lists every policy in report order: ours first, then the paper
// prototype and GORGO, then the baselines (local is the fair GeoDNS:
// SkyWalker's regional balancer without forwarding).
var Names = []string{"skywalker", "skylb", "gorgo", "local", "local-least-load", "round-robin", "least-load", "consistent-hash", "cache-aware"}

// Config carries every policy's parameters.
type Config struct {
	Skywalker      SkywalkerConfig
	ConsistentHash ConsistentHashConfig
	CacheAware     CacheAwareConfig
	Gorgo          GorgoConfig
}

// DefaultConfig returns every policy's documented defaults.
func DefaultConfig() Config {
	return Config{
		Skywalker:      DefaultSkywalkerConfig(),
		ConsistentHash: DefaultConsistentHashConfig(),
		CacheAware:     DefaultCacheAwareConfig(),
		Gorgo:          DefaultGorgoConfig(),
	}
}

// New returns a fresh policy by registry name.
func New(name string, cfg Config) (Policy, error) {
	switch name {
	case "skywalker":
		return NewSkywalker(cfg.Skywalker), nil
	case "skylb":
		return NewSkyLB(cfg.Skywalker), nil
	case "gorgo":
		return NewGorgo(cfg.Gorgo, cfg.Skywalker), nil
	case "local":
		return NewGeoDNS(cfg.Skywalker), nil
	case "local-least-load":
		return LocalLeastLoad{}, nil
	case "round-robin":
		return NewRoundRobin(cfg.Skywalker), nil
	case "least-load":
		return NewLeastLoad(cfg.Skywalker), nil
	case "consistent-hash":
		return NewConsistentHash(cfg.ConsistentHash, cfg.Skywalker), nil
	case "cache-aware":
		return NewCacheAware(cfg.CacheAware, cfg.Skywalker), nil
	}
	return nil, fmt.Errorf("unknown policy %q (known: %s)", name, strings.Join(Names, ", "))
}
