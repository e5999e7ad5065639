// Package responses carries the OpenAI Responses API through SkyWalker. A
// response's state (for previous_response_id, GET /v1/responses/{id},
// cancel) lives in the memory of the one engine process that created it,
// so a chain must go back there, from whatever region the client enters.
// SkyWalker writes where that is into the response id the client sees
// (Codec): the region and the replica, the tenant it belongs to, the
// engine's own id, sealed (encrypted and authenticated) with the mesh's
// key, so that the client can neither read nor forge them. Any proxy of any region
// reads it back — no table to replicate, nothing lost when a proxy
// restarts — and the engine's ids are rewritten both ways (Rewriter).
//
// Failure cases, and why the id rather than a shared table: a proxy that
// restarts, or a region that loses every proxy, loses nothing (the id
// carries the home); a client that forges or edits an id fails the
// seal (with a key configured); the home replica gone or restarted
// (its engine forgot the response) is a clear previous_response_not_found,
// which a shared table could only say the same way. What the id cannot
// survive is the home replica's engine restarting: the state is in its
// memory, and nothing outside can rebuild it.
package responses

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/cespare/xxhash/v2"

	"skywalker/internal/request"
)

// Prefix starts every response id SkyWalker issues.
const Prefix = "resp_sw"

// macBytes is the signature's length in an id.
const macBytes = 12

const (
	idVersion  = 1 // readable fields, signed with a key (or not, without one)
	flagSigned = 1 << 0
	// sealedVersion: the fields encrypted and authenticated (AES-GCM)
	// under the primary key: opaque to the client, who cannot read the
	// replica's address or the engine's sequential id in it.
	sealedVersion = 2
)

// Errors of Decode, wrapped with the reason.
var (
	ErrNotOurs   = errors.New("not a response id this mesh issued")
	ErrMalformed = errors.New("malformed response id")
	ErrForged    = errors.New("response id signature does not verify")
)

// Codec writes a chain's home into response ids and reads it back. Its
// keys are the mesh's gossip keys, primary first: ids are signed with the
// primary and verified against each (rotation keeps old ids valid while
// their key is listed). Without keys (one region, no mesh) ids are not
// signed and unsigned ids are accepted.
type Codec struct {
	keys [][]byte
}

// NewCodec returns a codec over keys (primary first; none: unsigned).
func NewCodec(keys [][]byte) Codec { return Codec{keys: keys} }

// Ref is what a response id says.
type Ref struct {
	Home     request.Home
	EngineID string // the engine's own id for the response
	tenant   uint64 // a hash of the tenant it belongs to; 0 for none
}

// OwnedBy reports whether the response belongs to tenant ("" for none).
func (r Ref) OwnedBy(tenant string) bool { return r.tenant == tenantTag(tenant) }

func tenantTag(tenant string) uint64 {
	if tenant == "" {
		return 0
	}
	return xxhash.Sum64String(tenant)
}

// maxField bounds the region, replica and engine id in an id.
const maxField = 255

// Encode is the id the client sees for the engine's response engineID,
// created on home for tenant: sealed under the primary key (opaque), or,
// without keys (one region, no mesh), readable and unsigned.
func (c Codec) Encode(home request.Home, tenant, engineID string) string {
	var fields []byte
	for _, s := range []string{home.Region, home.Replica} {
		fields = appendField(fields, s)
	}
	fields = binary.LittleEndian.AppendUint64(fields, tenantTag(tenant))
	fields = appendField(fields, engineID)
	if len(c.keys) == 0 {
		return Prefix + base64.RawURLEncoding.EncodeToString(append([]byte{idVersion, 0}, fields...))
	}
	aead := sealer(c.keys[0])
	b := make([]byte, 2, 2+aead.NonceSize()+len(fields)+aead.Overhead())
	b[0] = sealedVersion
	// The nonce is a MAC of the fields (a synthetic IV): one response has
	// one id, however often its id is written (its creation, each GET,
	// each event of a stream), and different fields never share a nonce.
	b = append(b, mac(c.keys[0], append([]byte("nonce\x00"), fields...))[:aead.NonceSize()]...)
	b = aead.Seal(b, b[2:], fields, b[:2])
	return Prefix + base64.RawURLEncoding.EncodeToString(b)
}

// sealer is the AEAD of key (AES-GCM; a 16-, 24- or 32-byte key).
func sealer(key []byte) cipher.AEAD {
	sum := sha256.Sum256(append([]byte("skywalker-response-id-seal\x00"), key...))
	block, _ := aes.NewCipher(sum[:]) // a 32-byte key: no error
	aead, _ := cipher.NewGCM(block)   // the standard nonce size: no error
	return aead
}

func appendField(b []byte, s string) []byte {
	if len(s) > maxField {
		s = s[:maxField]
	}
	return append(append(b, byte(len(s))), s...)
}

func mac(key, payload []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(payload)
	return m.Sum(nil)[:macBytes]
}

// Decode reads an id Encode wrote. It never panics (FuzzDecode).
func (c Codec) Decode(id string) (Ref, error) {
	rest, ok := strings.CutPrefix(id, Prefix)
	if !ok {
		return Ref{}, ErrNotOurs
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil {
		return Ref{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if len(b) >= 2 && b[0] == sealedVersion && b[1] == 0 {
		return c.open(b)
	}
	if len(b) < 2 || b[0] != idVersion || b[1]&^flagSigned != 0 {
		return Ref{}, fmt.Errorf("%w: unknown version or flags", ErrMalformed)
	}
	signed := b[1]&flagSigned != 0
	body := b
	if signed {
		if len(b) < 2+macBytes {
			return Ref{}, fmt.Errorf("%w: too short for its signature", ErrMalformed)
		}
		body = b[:len(b)-macBytes]
	}
	ref, err := readFields(body[2:])
	if err != nil {
		return Ref{}, err
	}
	switch {
	case len(c.keys) == 0:
		return ref, nil // no key to check it with: one region, no mesh
	case !signed:
		return Ref{}, fmt.Errorf("%w: the id is not signed", ErrForged)
	}
	for _, k := range c.keys {
		if hmac.Equal(mac(k, body), b[len(body):]) {
			return ref, nil // an id of the previous release, signed, readable
		}
	}
	return Ref{}, ErrForged
}

// open reads a sealed id, b decoded: each listed key is tried (rotation
// keeps old ids valid while their key is listed).
func (c Codec) open(b []byte) (Ref, error) {
	if len(c.keys) == 0 {
		return Ref{}, fmt.Errorf("%w: a sealed id, and no key to open it", ErrForged)
	}
	for _, k := range c.keys {
		aead := sealer(k)
		if len(b) < 2+aead.NonceSize()+aead.Overhead() {
			return Ref{}, fmt.Errorf("%w: too short for its seal", ErrMalformed)
		}
		fields, err := aead.Open(nil, b[2:2+aead.NonceSize()], b[2+aead.NonceSize():], b[:2])
		if err == nil {
			return readFields(fields)
		}
	}
	return Ref{}, ErrForged
}

// readFields reads an id's fields: region, replica, tenant tag, engine id.
func readFields(body []byte) (Ref, error) {
	var ref Ref
	off := 0
	field := func() (string, bool) {
		if off >= len(body) || int(body[off]) > len(body)-off-1 {
			return "", false
		}
		n := int(body[off])
		s := string(body[off+1 : off+1+n])
		off += 1 + n
		return s, true
	}
	var okR, okP, okE bool
	ref.Home.Region, okR = field()
	ref.Home.Replica, okP = field()
	if !okR || !okP || len(body)-off < 8 {
		return Ref{}, fmt.Errorf("%w: truncated", ErrMalformed)
	}
	ref.tenant = binary.LittleEndian.Uint64(body[off:])
	off += 8
	ref.EngineID, okE = field()
	if !okE || off != len(body) || ref.Home.Replica == "" || ref.EngineID == "" {
		return Ref{}, fmt.Errorf("%w: truncated, or trailing bytes", ErrMalformed)
	}
	return ref, nil
}
