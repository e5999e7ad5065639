package proxy

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"skywalker/internal/mesh"
)

// ForwardHeader marks a request one proxy forwarded to another. The
// receiver serves it locally and never forwards it again; a marker whose
// MAC does not verify is refused with 403, so a client cannot pose as a
// peer to skip routing or residency checks.
const ForwardHeader = "X-SkyWalker-Forwarded"

// maxMarkerSkew bounds how old (or how far in the future) a marker may be.
const maxMarkerSkew = 5 * time.Minute

// forwardKeys signs and verifies markers. Keys derive from the gossip keys
// (the mesh secret); the first signs, all verify, so keys rotate the way
// the gossip keyring does. Without gossip keys (insecure development mode)
// the key derives from the cluster label: integrity against accidents,
// not attackers.
type forwardKeys [][]byte

func newForwardKeys(gossipKeys []string, label string) (forwardKeys, error) {
	var out forwardKeys
	for _, k := range gossipKeys {
		raw, err := mesh.ParseKey(k)
		if err != nil {
			return nil, err
		}
		out = append(out, deriveKey(raw))
	}
	if len(out) == 0 {
		out = append(out, deriveKey([]byte("insecure:"+label)))
	}
	return out, nil
}

func deriveKey(secret []byte) []byte {
	h := sha256.New()
	h.Write([]byte("skywalker-forward-v1\x00"))
	h.Write(secret)
	return h.Sum(nil)
}

func mac(key []byte, origin, id string, ts int64) []byte {
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "%s\x00%s\x00%d", origin, id, ts)
	return m.Sum(nil)
}

// sign returns the marker for a request forwarded from origin.
func (k forwardKeys) sign(origin, id string, now time.Time) string {
	ts := now.UnixMilli()
	return origin + ";" + id + ";" + strconv.FormatInt(ts, 10) + ";" + hex.EncodeToString(mac(k[0], origin, id, ts))
}

var errBadMarker = errors.New("invalid forwarding marker")

// verify checks a marker and returns the origin region and request id.
func (k forwardKeys) verify(marker string, now time.Time) (origin, id string, err error) {
	parts := strings.Split(marker, ";")
	if len(parts) != 4 || len(marker) > 512 {
		return "", "", errBadMarker
	}
	ts, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil {
		return "", "", errBadMarker
	}
	if d := now.Sub(time.UnixMilli(ts)); d > maxMarkerSkew || d < -maxMarkerSkew {
		return "", "", fmt.Errorf("%w: timestamp outside ±%v", errBadMarker, maxMarkerSkew)
	}
	got, err := hex.DecodeString(parts[3])
	if err != nil {
		return "", "", errBadMarker
	}
	for _, key := range k {
		if hmac.Equal(got, mac(key, parts[0], parts[1], ts)) {
			return parts[0], parts[1], nil
		}
	}
	return "", "", fmt.Errorf("%w: MAC does not verify", errBadMarker)
}
