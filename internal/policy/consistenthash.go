package policy

import (
	"encoding/binary"
	"math"
	"slices"
	"strconv"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"

	"skywalker/internal/request"
)

// ConsistentHashConfig tunes ConsistentHash.
type ConsistentHashConfig struct {
	// VirtualNodes per replica on the ring. Default 64.
	VirtualNodes int
	// LoadFactor is ε of bounded loads: no member takes more than
	// ⌈(1+ε)·average⌉ outstanding requests while another is below it.
	// Default 0.25.
	LoadFactor float64
}

// DefaultConsistentHashConfig returns the documented defaults.
func DefaultConsistentHashConfig() ConsistentHashConfig {
	return ConsistentHashConfig{VirtualNodes: 64, LoadFactor: 0.25}
}

// ConsistentHash is consistent hashing with bounded loads (Mirrokni,
// Thorup, Zadimoghaddam, 2018) over every replica of every region, keyed on
// the request's session (or user); requests without one use their first
// prefix block, so identical prompts still meet. Members are named
// "<region>/<index>", so every region builds the same ring from the same
// membership and a session maps to the same region from any ingress.
type ConsistentHash struct {
	cfg    ConsistentHashConfig
	filter peerFilter
	ring   atomic.Pointer[hashRing]
}

// NewConsistentHash returns the policy.
func NewConsistentHash(cfg ConsistentHashConfig, sw SkywalkerConfig) *ConsistentHash {
	if cfg.VirtualNodes <= 0 {
		cfg.VirtualNodes = 64
	}
	return &ConsistentHash{cfg: cfg, filter: globalFilter(sw)}
}

// Name implements Policy.
func (c *ConsistentHash) Name() string { return "consistent-hash" }

type hashRing struct {
	signature uint64
	regions   []string // sorted; ringPoint.region indexes it
	points    []ringPoint
}

type ringPoint struct {
	hash   uint64
	region uint16
	slot   uint16
}

// Route implements Policy.
func (c *ConsistentHash) Route(req *request.Request, v *View) Decision {
	ring := c.ringFor(v)
	// Map ring regions to this view: -1 local, else peer index, -2 unusable.
	var where [16]int
	target := where[:0]
	for _, name := range ring.regions {
		switch {
		case name == v.Local.Name:
			target = append(target, -1)
		default:
			idx := -2
			for i := range v.Peers {
				if v.Peers[i].Name == name {
					idx = i
				}
			}
			target = append(target, idx)
		}
	}
	usable := func(p ringPoint) (load float64, ok bool) {
		switch t := target[p.region]; {
		case t == -1:
			r := &v.Local.Replicas[p.slot]
			return float64(r.Load()), v.Local.Serves(req, int(p.slot))
		case t >= 0:
			peer := &v.Peers[t]
			return peer.PerReplicaLoad(), int(p.slot) < peer.Replicas && c.filter.eligible(req, peer)
		}
		return 0, false
	}
	// The bound of bounded loads, over the members usable now.
	total, count := 0.0, 0
	for i := range v.Local.Replicas {
		if v.Local.Serves(req, i) {
			total += float64(v.Local.Replicas[i].Load())
			count++
		}
	}
	for i := range v.Peers {
		if p := &v.Peers[i]; c.filter.eligible(req, p) {
			total += float64(p.Outstanding)
			count += p.Replicas
		}
	}
	if count == 0 || len(ring.points) == 0 {
		return noMember(req, v)
	}
	bound := math.Ceil((1 + c.cfg.LoadFactor) * (total + 1) / float64(count))

	key := hashKey(req)
	start, _ := slices.BinarySearchFunc(ring.points, key, func(p ringPoint, k uint64) int {
		switch {
		case p.hash < k:
			return -1
		case p.hash > k:
			return 1
		}
		return 0
	})
	first := -1
	for n := range ring.points {
		p := ring.points[(start+n)%len(ring.points)]
		load, ok := usable(p)
		if !ok {
			continue
		}
		if first < 0 {
			first = (start + n) % len(ring.points)
		}
		if load < bound {
			return c.decide(v, target[p.region], int(p.slot))
		}
	}
	p := ring.points[first]
	return c.decide(v, target[p.region], int(p.slot))
}

func (c *ConsistentHash) decide(v *View, target, slot int) Decision {
	if target == -1 {
		return Decision{Action: Dispatch, Replica: slot, Region: v.Local.Name, Reason: ReasonHash}
	}
	return forward(v, target, ReasonHash, 0)
}

// hashKey is the request's position on the ring.
func hashKey(req *request.Request) uint64 {
	switch {
	case req.Session != "":
		return xxhash.Sum64String(req.Session)
	case len(req.Blocks) > 0:
		return req.Blocks[0]
	default:
		return xxhash.Sum64String(req.ID)
	}
}

// ringFor returns the ring for the view's membership, rebuilding it only
// when the membership changed. Rings are immutable once published.
func (c *ConsistentHash) ringFor(v *View) *hashRing {
	sig := xxhash.New()
	var n [8]byte
	add := func(name string, count int) {
		_, _ = sig.WriteString(name)
		binary.LittleEndian.PutUint64(n[:], uint64(count))
		_, _ = sig.Write(n[:])
	}
	add(v.Local.Name, len(v.Local.Replicas))
	for i := range v.Peers {
		add(v.Peers[i].Name, v.Peers[i].Replicas)
	}
	signature := sig.Sum64()
	if r := c.ring.Load(); r != nil && r.signature == signature {
		return r
	}
	type region struct {
		name  string
		slots int
	}
	regions := []region{{v.Local.Name, len(v.Local.Replicas)}}
	for i := range v.Peers {
		regions = append(regions, region{v.Peers[i].Name, v.Peers[i].Replicas})
	}
	slices.SortFunc(regions, func(a, b region) int {
		if a.name < b.name {
			return -1
		}
		if a.name > b.name {
			return 1
		}
		return 0
	})
	r := &hashRing{signature: signature}
	for ri, reg := range regions {
		r.regions = append(r.regions, reg.name)
		for s := range min(reg.slots, math.MaxUint16) {
			member := reg.name + "/" + strconv.Itoa(s)
			for vn := range c.cfg.VirtualNodes {
				h := xxhash.Sum64String(member + "#" + strconv.Itoa(vn))
				r.points = append(r.points, ringPoint{hash: h, region: uint16(ri), slot: uint16(s)})
			}
		}
	}
	slices.SortFunc(r.points, func(a, b ringPoint) int {
		switch {
		case a.hash < b.hash:
			return -1
		case a.hash > b.hash:
			return 1
		}
		return 0
	})
	c.ring.Store(r)
	return r
}

var _ Policy = (*ConsistentHash)(nil)
