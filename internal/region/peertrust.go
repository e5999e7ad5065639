package region

import (
	"fmt"
	"time"

	"skywalker/internal/policy"
)

// Peers are trusted by what they deliver, not what they advertise. A peer
// region's load summary can be wrong — stale, from a broken proxy, or from
// a member that lies — and nothing in the summary shows it. What this
// node's own forwards there teach it does:
//
//   - EjectAfter forwards in a row that fail before their first token
//     (refused, reset, a peer's 4xx or 5xx, no first byte in time), or that
//     break midway, distrust the peer for PeerProbation, doubled for each
//     ejection in a row (at most 32×);
//   - so do EjectAfter first tokens in a row that come ClaimFactor times
//     later than the estimate the forward was chosen on (plus the RTT and
//     a second): the peer's summary claims a speed it does not deliver;
//   - so do EjectAfter forwards in a row, chosen where the peer's digest
//     claimed at least MinClaimedBlocks of the prompt cached, whose engine
//     reported less than half of that cached: the digest claims a cache
//     the peer does not have (a lie, or a digest gone stale);
//   - a peer not yet proven — no forward of this node has reached its first
//     token there since the start or its last ejection — takes at most
//     EjectAfter of this node's forwards at once, so a peer that swallows
//     requests costs a handful of them, not a burst;
//   - back from an ejection, one failure ejects it again.
//
// A distrusted or saturated-while-unproven peer is shown to the policy with
// its gate closed and the reason, so every policy leaves it alone.
const (
	// PeerProbation is how long a peer is distrusted after its first
	// ejection.
	PeerProbation = 10 * time.Second
	// ClaimFactor: a first token this many times later than estimated is
	// a claim missed. The proxy's first-byte timeout gives an attempt the
	// same 4× before it counts as failed.
	ClaimFactor = 4
	// MinClaimedBlocks is the smallest cached prefix (in blocks) a digest
	// claim is checked for: a block or two can be a false positive of the
	// filter, or evicted since the digest was sent.
	MinClaimedBlocks = 4
)

// peerTrust is what this node's forwards taught it about one peer region.
type peerTrust struct {
	failures  int       // forwards in a row that failed
	misses    int       // first tokens in a row far later than estimated
	cacheLies int       // forwards in a row that found under half the cache the digest claimed
	ejections int       // ejections in a row (a served forward ends the run)
	until     time.Time // distrusted until
	proven    bool      // a forward reached its first token since the last ejection
	reason    string    // why it was last distrusted
	// estimate is how the forwards' first tokens compared with the
	// estimates they were chosen on (policy.PeerRegion.Error).
	estimate policy.EstimateError
}

func (r *pool) trustOf(peer string) *peerTrust {
	t := r.trust[peer]
	if t == nil {
		t = &peerTrust{}
		r.trust[peer] = t
	}
	return t
}

// peerFirstToken judges a forward's first token against the estimate it
// was chosen on; it returns the reason if the peer is now distrusted.
func (r *pool) peerFirstToken(now time.Time, a *Attempt) string {
	t := r.trustOf(a.Peer.Region)
	t.proven = true
	ttft := now.Sub(a.sent)
	if !a.sent.IsZero() {
		t.estimate.Observe(ttft, a.Decision.Estimate)
	}
	if est := a.Decision.Estimate; est > 0 && !a.sent.IsZero() && ttft > ClaimFactor*est+a.Peer.RTT+time.Second {
		if t.misses++; t.misses >= r.cfg.EjectAfter {
			return r.distrust(now, t, fmt.Sprintf("%d first tokens in a row over %d× its estimate (last %v, estimated %v)",
				t.misses, ClaimFactor, ttft.Round(time.Millisecond), est.Round(time.Millisecond)))
		}
		return ""
	}
	t.misses = 0
	return ""
}

// forwardTimeout is how long forward a may wait for its first token (see
// Attempt.FirstTokenTimeout).
func (r *pool) forwardTimeout(a *Attempt) time.Duration {
	est := a.Decision.Estimate
	if t := r.trust[a.Peer.Region]; t != nil {
		est = max(est, t.estimate.Summary().Pessimistic(est, 0))
	}
	return min(max(MinFirstTokenTimeout, FirstTokenFactor*est), MaxFirstTokenTimeout)
}

// peerTimedOut learns from a forward cut before its first token after
// waited: the wait, a lower bound of its first token's time, is a sample
// of the peer's estimate error, so a peer slower than estimated is waited
// for longer next time (and priced so) instead of being cut again.
func (r *pool) peerTimedOut(a *Attempt, waited time.Duration) {
	r.trustOf(a.Peer.Region).estimate.Observe(waited, a.Decision.Estimate)
}

// peerCacheReported judges the cached tokens a forward's engine reported
// against what the peer's digest claimed when the forward was chosen; it
// returns the reason if the peer is now distrusted.
func (r *pool) peerCacheReported(a *Attempt, cachedTokens int) string {
	if a.PrefixBlocks < MinClaimedBlocks {
		return ""
	}
	t := r.trustOf(a.Peer.Region)
	claimed := a.Request.CachedTokens(a.PrefixBlocks)
	if 2*cachedTokens >= claimed {
		t.cacheLies = 0
		return ""
	}
	if t.cacheLies++; t.cacheLies >= r.cfg.EjectAfter {
		return r.distrust(r.now, t, fmt.Sprintf("%d forwards in a row found under half the cached prefix its digest claimed (last %d of %d tokens)",
			t.cacheLies, cachedTokens, claimed))
	}
	return ""
}

// peerEnded books how a forward ended; it returns the reason if the peer
// is now distrusted.
func (r *pool) peerEnded(now time.Time, peer string, how Outcome) string {
	t := r.trustOf(peer)
	switch how {
	case Served:
		t.failures, t.ejections, t.proven = 0, 0, true
	case ReplicaFailed, BrokeMidStream, TimedOut:
		// TimedOut: no first byte in time. A peer that swallows forwards
		// fails them all this way; counted like any failure, it is
		// distrusted after EjectAfter of them (it was never, before).
		t.failures++
		if t.failures >= r.cfg.EjectAfter || t.ejections > 0 && !t.proven {
			return r.distrust(now, t, fmt.Sprintf("%d forwards in a row failed", t.failures))
		}
	}
	return ""
}

func (r *pool) distrust(now time.Time, t *peerTrust, reason string) string {
	t.until = now.Add(PeerProbation << min(t.ejections, 5))
	t.ejections++
	t.failures, t.misses, t.cacheLies, t.proven, t.reason = 0, 0, 0, false, reason
	return reason
}

// told passes a new distrust to the driver's OnDistrust.
func (r *pool) told(peer, reason string) {
	if reason != "" && r.cfg.OnDistrust != nil {
		r.cfg.OnDistrust(peer, reason)
	}
}

// peerGate is why the policy may not forward to peer now ("" if it may).
func (r *pool) peerGate(peer string) string {
	t := r.trust[peer]
	switch {
	case t == nil:
		if n := r.forwarding[peer]; n >= r.cfg.EjectAfter {
			return fmt.Sprintf("unproven: %d forwards awaiting a first token", n)
		}
	case r.now.Before(t.until):
		return "distrusted until " + t.until.Format(time.RFC3339) + ": " + t.reason
	case !t.proven && r.forwarding[peer] >= max(1, r.cfg.EjectAfter>>min(t.ejections, 2)):
		return fmt.Sprintf("unproven: %d forwards awaiting a first token", r.forwarding[peer])
	}
	return ""
}

// PeerTrust is why each distrusted or unproven peer is closed to
// forwarding now, for debugging endpoints.
func (r *pool) PeerTrust() map[string]string {
	out := map[string]string{}
	for _, p := range r.peers {
		if why := r.peerGate(p.Region); why != "" {
			out[p.Region] = why
		}
	}
	return out
}
