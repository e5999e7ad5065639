package workload

import (
	"errors"
	"strconv"
	"time"

	"github.com/cespare/xxhash/v2"

	"skywalker/internal/request"
)

// Replay turns trace records into arrivals across regions.
//
// Assignment: traces carry no regions, so each request is given one. With
// AssignSession (the default) a request goes to the region chosen by a hash
// of its first SessionBlocks block ids (a conversation and its later turns
// share those, so they stay together, as users stay in their region);
// requests without block ids fall back to round robin. Speedup divides
// every arrival offset (2 = twice the trace's rate).
type Replay struct {
	Records       []TraceRecord
	Regions       []RegionLoad
	BlockTokens   int // tokens per block id; MooncakeBlockTokens for Mooncake
	Assign        string
	SessionBlocks int // default 2 (the Mooncake trace's first id is shared by every request)
	Speedup       float64
	HashSeed      uint64
	// AssignSeed varies which region each conversation lands in (another
	// seed, another draw of the same trace); 0 keeps the plain hash.
	AssignSeed uint64
}

// Assignment rules.
const (
	AssignSession    = "session"
	AssignRoundRobin = "round-robin"
)

// Source returns the replay's arrivals in time order.
func (r Replay) Source() (Source, error) {
	if len(r.Regions) == 0 || len(r.Records) == 0 {
		return nil, errors.New("trace replay needs regions and records")
	}
	if r.Assign == "" {
		r.Assign = AssignSession
	}
	if r.Assign != AssignSession && r.Assign != AssignRoundRobin {
		return nil, errors.New("trace replay: assign must be session or round-robin")
	}
	if r.SessionBlocks <= 0 {
		r.SessionBlocks = 2
	}
	if r.Speedup <= 0 {
		r.Speedup = 1
	}
	if r.HashSeed == 0 {
		r.HashSeed = request.DefaultSeed
	}
	if r.BlockTokens <= 0 {
		r.BlockTokens = MooncakeBlockTokens
	}
	out := make([]Arrival, 0, len(r.Records))
	var buf []byte
	for i, rec := range r.Records {
		region := i % len(r.Regions)
		session := ""
		if r.Assign == AssignSession && len(rec.BlockIDs) > 0 {
			buf = buf[:0]
			for _, id := range rec.BlockIDs[:min(r.SessionBlocks, len(rec.BlockIDs))] {
				buf = strconv.AppendUint(buf, id, 10)
				buf = append(buf, ',')
			}
			h := xxhash.Sum64(buf)
			if r.AssignSeed != 0 {
				h = mix(h ^ r.AssignSeed)
			}
			region = int(h % uint64(len(r.Regions)))
			session = string(buf)
		}
		req := request.FromTrace(request.TraceRecord{InputTokens: rec.InputTokens, OutputTokens: rec.OutputTokens,
			BlockIDs: rec.BlockIDs, BlockTokens: r.BlockTokens, Session: session}, r.HashSeed)
		req.ID = "t" + strconv.Itoa(i)
		req.Region = r.Regions[region].Name
		out = append(out, Arrival{At: time.Duration(float64(rec.At) / r.Speedup), Region: req.Region, Request: req})
	}
	return NewSliceSource(out), nil
}

// mix is splitmix64's finalizer: a seed flips every output bit.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}
