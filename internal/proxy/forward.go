package proxy

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"skywalker/internal/mesh"
)

// ForwardHeader marks a request one proxy forwarded to another. The
// receiver serves it locally and never forwards it again; a marker whose
// MAC does not verify is refused with 403, so a client cannot pose as a
// peer to skip routing or residency checks.
const ForwardHeader = "X-SkyWalker-Forwarded"

// MaxMarkerSkew bounds how old (or how far in the future) a marker may be:
// seconds, not minutes, so a captured marker is soon worthless. Its time is
// the origin's clock, read through the offset the mesh measured between
// the origin's clock and ours (mesh.Table.ObserveClock), so regions whose
// clocks disagree by more than this still forward to each other.
const MaxMarkerSkew = 10 * time.Second

// markers signs and verifies forwarding markers. Keys derive from the
// gossip keys (the mesh secret); the first signs, all verify, so keys
// rotate the way the gossip keyring does. Without gossip keys (insecure
// development mode) the key derives from the cluster label: integrity
// against accidents, not attackers.
//
// A marker binds the request to where it came from and where it was sent:
// the MAC covers the origin region, the destination region and the one
// proxy there it was sent to (its advertised URL), the request id, the
// time and a SHA-256 of the body. The receiver refuses a marker meant for
// another region or another proxy, older than MaxMarkerSkew, or whose id
// it has already accepted (a replay cache spanning the skew window), so a
// captured marker cannot be replayed — not with the same body, not with
// another, not at another region, not at another proxy of the same region
// (whose replay cache is its own).
type markers struct {
	keys [][]byte
	// clockOffset is an origin region's clock less ours (nil: zero).
	clockOffset func(origin string) time.Duration
	mu          sync.Mutex
	seen        map[string]time.Time // origin and id of accepted markers → their time
	// sweepAt is when seen is next pruned of entries past the window.
	sweepAt time.Time
}

func newMarkers(gossipKeys []string, label string) (*markers, error) {
	m := &markers{seen: map[string]time.Time{}}
	for _, k := range gossipKeys {
		raw, err := mesh.ParseKey(k)
		if err != nil {
			return nil, err
		}
		m.keys = append(m.keys, deriveKey(raw))
	}
	if len(m.keys) == 0 {
		m.keys = append(m.keys, deriveKey([]byte("insecure:"+label)))
	}
	return m, nil
}

func deriveKey(secret []byte) []byte {
	h := sha256.New()
	h.Write([]byte("skywalker-forward-v1\x00"))
	h.Write(secret)
	return h.Sum(nil)
}

// markerVersion prefixes every marker this release signs: version 4 names
// the receiving proxy and the request's owner. Version 3 markers (the
// previous release's, without the owner) are still accepted, so a mesh
// can be upgraded a region at a time; version 2 (without the receiving
// proxy, open to replay at another proxy of the region) is refused.
const (
	markerVersion       = "4"
	legacyMarkerVersion = "3"
)

// forward is what a marker says of a forwarded request: where it comes
// from, where it was sent, its id, its tenant at the origin (the peer
// queues it fairly under the same tenant) and its owner (what the
// Responses ids it creates are bound to), though the client's
// Authorization, from which both may derive, stays at the origin.
//
// DestProxy is the receiving proxy's advertised URL.
type forward struct {
	Origin, Dest, ID, Tenant string
	DestProxy                string
	Owner                    string
}

func mac(key []byte, version string, f forward, ts int64, bodySum []byte) []byte {
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "%s\x00%s\x00%s\x00%s\x00%s\x00%d\x00%s\x00", version, f.Origin, f.Dest, f.ID, f.Tenant, ts, f.DestProxy)
	if version == markerVersion {
		fmt.Fprintf(m, "%s\x00", f.Owner)
	}
	m.Write(bodySum)
	return m.Sum(nil)
}

// sign returns the marker for the request f describes, forwarded with body.
func (m *markers) sign(f forward, body []byte, now time.Time) string {
	return m.signVersion(markerVersion, f, body, now)
}

func (m *markers) signVersion(version string, f forward, body []byte, now time.Time) string {
	ts := now.UnixMilli()
	sum := sha256.Sum256(body)
	b64 := base64.RawURLEncoding.EncodeToString
	fields := []string{version, f.Origin, f.Dest, f.ID, b64([]byte(f.Tenant)), strconv.FormatInt(ts, 10), b64([]byte(f.DestProxy))}
	if version == markerVersion {
		fields = append(fields, b64([]byte(f.Owner)))
	}
	return strings.Join(append(fields, hex.EncodeToString(mac(m.keys[0], version, f, ts, sum[:]))), ";")
}

var errBadMarker = errors.New("invalid forwarding marker")

// verify checks a marker received with body by the proxy destProxy (its
// advertised URL) of region dest, and returns what it says. An accepted
// marker is remembered: the same one again is refused as a replay.
func (m *markers) verify(marker, dest, destProxy string, body []byte, now time.Time) (forward, error) {
	parts := strings.Split(marker, ";")
	if len(parts) > 0 && parts[0] == "2" {
		return forward{}, fmt.Errorf("%w: version 2 (it does not name the receiving proxy, so it could be replayed at another): upgrade the sending region", errBadMarker)
	}
	if len(marker) > 1024 || !(len(parts) == 9 && parts[0] == markerVersion || len(parts) == 8 && parts[0] == legacyMarkerVersion) {
		return forward{}, errBadMarker
	}
	version := parts[0]
	decoded := make([]string, 3) // tenant, receiving proxy, owner
	for i, part := range []int{4, 6, 7} {
		if part >= len(parts)-1 {
			break
		}
		b, err := base64.RawURLEncoding.DecodeString(parts[part])
		if err != nil {
			return forward{}, errBadMarker
		}
		decoded[i] = string(b)
	}
	f := forward{Origin: parts[1], Dest: parts[2], ID: parts[3], Tenant: decoded[0], DestProxy: decoded[1], Owner: decoded[2]}
	ts, err := strconv.ParseInt(parts[5], 10, 64)
	if err != nil {
		return forward{}, errBadMarker
	}
	originNow := now
	if m.clockOffset != nil {
		originNow = now.Add(m.clockOffset(f.Origin))
	}
	if d := originNow.Sub(time.UnixMilli(ts)); d > MaxMarkerSkew || d < -MaxMarkerSkew {
		return forward{}, fmt.Errorf("%w: timestamp outside ±%v of %s's clock (measured %v from ours)", errBadMarker, MaxMarkerSkew, f.Origin, originNow.Sub(now))
	}
	got, err := hex.DecodeString(parts[len(parts)-1])
	if err != nil {
		return forward{}, errBadMarker
	}
	sum := sha256.Sum256(body)
	verified := false
	for _, key := range m.keys {
		if hmac.Equal(got, mac(key, version, f, ts, sum[:])) {
			verified = true
			break
		}
	}
	switch {
	case !verified:
		return forward{}, fmt.Errorf("%w: MAC does not verify (another key, or the body or marker was changed)", errBadMarker)
	case f.Dest != dest:
		return forward{}, fmt.Errorf("%w: meant for region %s, not %s", errBadMarker, f.Dest, dest)
	case f.Origin == dest:
		return forward{}, fmt.Errorf("%w: a region does not forward to itself", errBadMarker)
	case f.DestProxy != destProxy:
		return forward{}, fmt.Errorf("%w: meant for proxy %s of region %s, not this one (%s)", errBadMarker, f.DestProxy, dest, destProxy)
	}
	if !m.remember(f.Origin+"\x00"+f.ID, now) {
		return forward{}, fmt.Errorf("%w: replayed (request %s from %s was already accepted)", errBadMarker, f.ID, f.Origin)
	}
	if version == legacyMarkerVersion && !strings.HasPrefix(f.Tenant, "addr-") {
		f.Owner = f.Tenant // the previous release bound chains to an authenticated tenant
	}
	return f, nil
}

// maxSeen bounds the replay cache; past it, markers are refused until the
// window moves on (a flood of valid markers means a leaked key).
const maxSeen = 1 << 20

// remember records an accepted marker's key and reports whether it is new.
func (m *markers) remember(key string, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !now.Before(m.sweepAt) || len(m.seen) >= maxSeen {
		for k, at := range m.seen {
			if now.Sub(at) > 2*MaxMarkerSkew {
				delete(m.seen, k)
			}
		}
		m.sweepAt = now.Add(MaxMarkerSkew)
	}
	if _, ok := m.seen[key]; ok || len(m.seen) >= maxSeen {
		return false
	}
	m.seen[key] = now
	return true
}
