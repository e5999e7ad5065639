package mesh

import (
	"errors"
	"slices"
	"testing"
	"time"

	"skywalker/internal/policy"
	"skywalker/internal/region"
)

func TestMessagesRoundTrip(t *testing.T) {
	l := loadMsg{Node: "us-east-1", Seq: 42, Load: region.Load{QueueWait: 750 * time.Millisecond, Queued: 30, Replicas: 4, Slots: 32,
		Outstanding: 62, QueuedTokens: 81_000, Offloading: 3, PrefillTokens: 4096, Prefill: policy.PrefillProfile{Fixed: 10 * time.Millisecond, PerToken: 20 * time.Microsecond, PerTokenSquared: 0.5}}}
	typ, r, err := decodeHeader(encodeLoad(l))
	if err != nil || typ != msgLoad {
		t.Fatal(typ, err)
	}
	got, err := decodeLoad(r)
	if err != nil || got != l {
		t.Errorf("load round trip: %+v, %v", got, err)
	}
	d := deltaMsg{Node: "n", Base: 3, Gen: 4, Indexes: []uint32{1, 5, 900}, Words: []uint64{7, 8, 1 << 63}}
	typ, r, _ = decodeHeader(encodeDelta(d))
	gotD, err := decodeDelta(r)
	if err != nil || typ != msgDelta || len(gotD.Indexes) != 3 || gotD.Indexes[2] != 900 || gotD.Words[2] != 1<<63 {
		t.Errorf("delta round trip: %+v, %v", gotD, err)
	}
	bm := bitsMsg{Node: "n", Base: 3, Gen: 5, Positions: []uint64{0, 7, 64, 9_000_000}}
	typ, r, _ = decodeHeader(encodeBits(bm))
	gotB, err := decodeBits(r)
	if err != nil || typ != msgBits || gotB.Node != "n" || gotB.Base != 3 || gotB.Gen != 5 || !slices.Equal(gotB.Positions, bm.Positions) {
		t.Errorf("bits round trip: %+v, %v", gotB, err)
	}
	typ, r, _ = decodeHeader(encodeWant("eu-west-1"))
	if node, err := decodeWant(r); err != nil || typ != msgWant || node != "eu-west-1" {
		t.Errorf("want round trip: %q, %v", node, err)
	}
	m := Meta{Region: "eu-west", Jurisdiction: "eu", APIAddr: "http://10.0.0.1:9000", Version: "dev"}
	if gotM, err := decodeMeta(encodeMeta(m)); err != nil || gotM != m {
		t.Errorf("meta round trip: %+v, %v", gotM, err)
	}
}

func TestDecodeRejectsBadMessages(t *testing.T) {
	good := encodeLoad(loadMsg{Node: "n", Seq: 1})
	tests := map[string][]byte{
		"empty":         nil,
		"bad magic":     append([]byte("XX"), good[2:]...),
		"future":        append([]byte{'S', 'W', 9}, good[3:]...),
		"truncated":     good[:len(good)-3],
		"trailing":      append(append([]byte(nil), good...), 0),
		"empty node":    encodeLoad(loadMsg{Node: "", Seq: 1}),
		"delta no-op":   encodeDelta(deltaMsg{Node: "n", Base: 2, Gen: 2}),
		"delta unorder": []byte{'S', 'W', wireVersion, msgDelta, 1, 'n', 1, 2, 2, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		"bits no-op":    encodeBits(bitsMsg{Node: "n", Base: 2, Gen: 2}),
		"bits unorder":  []byte{'S', 'W', wireVersion, msgBits, 1, 'n', 1, 2, 2, 5, 0},
		"bits too far":  encodeBits(bitsMsg{Node: "n", Base: 1, Gen: 2, Positions: []uint64{1 << 40}}),
		"bits count":    []byte{'S', 'W', wireVersion, msgBits, 1, 'n', 1, 2, 9, 1},
		"want nobody":   encodeWant(""),
		"want trailing": append(encodeWant("n"), 1),
	}
	for name, b := range tests {
		typ, r, err := decodeHeader(b)
		if err == nil {
			switch typ {
			case msgLoad:
				_, err = decodeLoad(r)
			case msgDelta:
				_, err = decodeDelta(r)
			case msgBits:
				_, err = decodeBits(r)
			case msgWant:
				_, err = decodeWant(r)
			}
		}
		if !errors.Is(err, ErrBadMessage) {
			t.Errorf("%s: err = %v, want ErrBadMessage", name, err)
		}
	}
	if _, err := decodeMeta([]byte{wireVersion, 0, 0, 0, 0}); err == nil {
		t.Error("meta without a region must be refused")
	}
}

// FuzzDecode proves no peer message makes a node panic.
func FuzzDecode(f *testing.F) {
	f.Add(encodeLoad(loadMsg{Node: "n", Seq: 9, Load: region.Load{Queued: 3}}))
	f.Add(encodeLoad(loadMsg{Node: "n", Seq: 9, Load: region.Load{Queued: 3, Draining: true}}))
	f.Add(encodeDelta(deltaMsg{Node: "n", Base: 1, Gen: 2, Indexes: []uint32{0, 3}, Words: []uint64{1, 2}}))
	f.Add(encodeDigest("n", []byte("SWDG")))
	f.Add(encodeBits(bitsMsg{Node: "n", Base: 1, Gen: 2, Positions: []uint64{3, 64}}))
	f.Add(encodeWant("n"))
	f.Add(encodeMeta(Meta{Region: "r"}))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = decodeMeta(b)
		typ, r, err := decodeHeader(b)
		if err != nil {
			return
		}
		switch typ {
		case msgLoad:
			_, _ = decodeLoad(r)
		case msgDelta:
			_, _ = decodeDelta(r)
		case msgBits:
			_, _ = decodeBits(r)
		case msgWant:
			_, _ = decodeWant(r)
		}
		// The full path, as NotifyMsg runs it, on a node with no peers.
		m := &Mesh{table: NewTable("x", region.DefaultControlPlane()), log: discard, wanted: map[string]bool{}, toAsk: map[string]bool{}}
		m.table.Join("n", Meta{Region: "r"})
		m.handle(b)
	})
}

// TestVersionOneLoadIsStillRead: a node of the previous release sends load
// summaries without the token and offloading fields; they read as zero.
// A draining node's summary carries the flag (version 3); any other is
// still sent as version 2, which the previous release reads.
func TestDrainingTravelsAndOnlyThenTheNewVersion(t *testing.T) {
	for _, draining := range []bool{false, true} {
		b := encodeLoad(loadMsg{Node: "n", Seq: 1, Load: region.Load{Queued: 1, Draining: draining}})
		if want := byte(2 + map[bool]byte{false: 0, true: 1}[draining]); b[2] != want {
			t.Errorf("draining=%v sent as version %d, want %d", draining, b[2], want)
		}
		_, r, err := decodeHeader(b)
		if err != nil {
			t.Fatal(err)
		}
		if m, err := decodeLoad(r); err != nil || m.Load.Draining != draining || m.Load.Queued != 1 {
			t.Errorf("draining=%v: decoded %+v, %v", draining, m, err)
		}
	}
}

func TestVersionOneLoadIsStillRead(t *testing.T) {
	v2 := encodeLoad(loadMsg{Node: "old", Seq: 3, Load: region.Load{Queued: 2, Outstanding: 9, QueuedTokens: 4, Offloading: 1}})
	v1 := append([]byte(nil), v2[:len(v2)-3]...) // drop the three version-2 fields (one byte each here)
	v1[2] = 1
	_, r, err := decodeHeader(v1)
	if err != nil {
		t.Fatal(err)
	}
	m, err := decodeLoad(r)
	if err != nil || m.Load.Queued != 2 || m.Load.Outstanding != 9 || m.Load.QueuedTokens != 0 || m.Load.Offloading != 0 {
		t.Errorf("version 1 load: %+v, %v", m, err)
	}
}
