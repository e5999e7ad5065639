package mesh

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"skywalker/internal/policy"
	"skywalker/internal/region"
)

func TestMessagesRoundTrip(t *testing.T) {
	l := loadMsg{Node: "us-east-1", Incarnation: 1_796_000_000_123_456_789, Seq: 42, Load: region.Load{QueueWait: 750 * time.Millisecond, Queued: 30, Replicas: 4, Slots: 32,
		Outstanding: 62, QueuedTokens: 81_000, Offloading: 3, PrefillTokens: 4096, FreeCacheTokens: 120_000, HitShare: 0.5, Prefill: policy.PrefillProfile{Fixed: 10 * time.Millisecond, PerToken: 20 * time.Microsecond, PerTokenSquared: 0.5}}}
	l.Load.Models = []region.Load{{Model: "llama-8b", Queued: 20, Replicas: 3, Slots: 24, Outstanding: 40},
		{Model: "llama-70b", Queued: 10, Replicas: 1, Slots: 8, Outstanding: 22, Prefill: policy.PrefillProfile{Fixed: 40 * time.Millisecond}}}
	typ, r, err := decodeHeader(encodeLoad(l))
	if err != nil || typ != msgLoad {
		t.Fatal(typ, err)
	}
	got, err := decodeLoad(r)
	if err != nil || !reflect.DeepEqual(got, l) {
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
		"speed flag":    append(good[:len(good)-1], 2),                   // the aggregate's SpeedMeasured, last: 0 or 1
		"speed":         append(good[:len(good)-2], 0xc1, 0x84, 0x3d, 0), // 1,000,001 thousandths: over 1,000
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
	for _, msg := range encodeDispatches("n", sampleDispatches) {
		f.Add(msg)
	}
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
		case msgDispatches:
			_, _, _ = decodeDispatches(r)
		}
		// The full path, as NotifyMsg runs it, on a node with no peers.
		m := &Mesh{table: NewTable("x", region.DefaultControlPlane()), log: discard, sender: newDigestSender("x", tokenBucket{}), toAsk: map[string]bool{}}
		m.table.Join("n", Meta{Region: "r"})
		m.handle(b)
	})
}

// TestLoadTravelsWholeAndOlderVersionsAreStillRead: a summary is sent as
// the current version with every field; a node of an earlier release sends
// fewer fields, and those it lacks read as zero.
func TestLoadTravelsWholeAndOlderVersionsAreStillRead(t *testing.T) {
	full := region.Load{Queued: 2, Outstanding: 9, QueuedTokens: 4, Offloading: 1, PrefillTokens: 3, Draining: true,
		FreeCacheTokens: 70000, HitShare: 0.625, Hardware: "llama3-8b-l4", Speed: 7.25, SpeedMeasured: true,
		Models: []region.Load{{Model: "m", Queued: 2, Outstanding: 9, HitShare: 0.25, Hardware: "llama3-8b-l4", Speed: 1.5}}}
	withoutSpeed := full
	withoutSpeed.Hardware, withoutSpeed.Speed, withoutSpeed.SpeedMeasured = "", 0, false
	withoutSpeed.Models = []region.Load{{Model: "m", Queued: 2, Outstanding: 9, HitShare: 0.25}}
	withoutModels := withoutSpeed
	withoutModels.Models = nil
	sent := time.UnixMilli(1_790_000_000_123)
	b := encodeLoad(loadMsg{Node: "n", Incarnation: 77, Seq: 1, Load: full, SentAt: sent})
	if b[2] != wireVersion || !bytes.Equal(b, legacyLoad(wireVersion, "n", 77, 1, full, sent)) {
		t.Fatalf("sent as version %d (%x), want version %d as legacyLoad writes it", b[2], b, wireVersion)
	}
	cases := []struct {
		version byte
		want    region.Load
	}{
		{8, full},
		{7, withoutSpeed},
		{6, withoutModels},
		{5, withoutModels},
		{4, withoutModels},
		{3, region.Load{Queued: 2, Outstanding: 9, QueuedTokens: 4, Offloading: 1, PrefillTokens: 3, Draining: true}},
		{2, region.Load{Queued: 2, Outstanding: 9, QueuedTokens: 4, Offloading: 1, PrefillTokens: 3}},
		{1, region.Load{Queued: 2, Outstanding: 9}},
	}
	for _, c := range cases {
		_, r, err := decodeHeader(legacyLoad(c.version, "n", 77, 1, full, sent))
		if err != nil {
			t.Fatal(err)
		}
		wantIncarnation := uint64(0)
		if c.version >= 5 {
			wantIncarnation = 77
		}
		wantSent := time.Time{}
		if c.version >= 6 {
			wantSent = sent
		}
		if m, err := decodeLoad(r); err != nil || !reflect.DeepEqual(m.Load, c.want) || m.Incarnation != wantIncarnation || !m.SentAt.Equal(wantSent) {
			t.Errorf("version %d: decoded %+v (incarnation %d, sent %v), %v; want %+v (incarnation %d, sent %v)",
				c.version, m.Load, m.Incarnation, m.SentAt, err, c.want, wantIncarnation, wantSent)
		}
	}
}

// legacyLoad writes l as a node of wire version v writes a summary: the
// fields that version has, in order.
func legacyLoad(v byte, node string, incarnation, seq uint64, l region.Load, sent time.Time) []byte {
	w := writer{}
	w.headerVersion(msgLoad, v)
	w.str(node)
	w.uvarint(seq)
	if v >= 5 {
		w.uvarint(incarnation)
	}
	for _, n := range []int64{int64(l.QueueWait), int64(l.Queued), int64(l.Replicas), int64(l.Slots), int64(l.Outstanding),
		int64(l.Prefill.Fixed), int64(l.Prefill.PerToken)} {
		w.uvarint(uint64(n))
	}
	w.u64(math.Float64bits(l.Prefill.PerTokenSquared))
	if v >= 2 {
		w.uvarint(uint64(l.QueuedTokens))
		w.uvarint(uint64(l.Offloading))
		w.uvarint(uint64(l.PrefillTokens))
	}
	if v >= 3 {
		flags := uint64(0)
		if l.Draining {
			flags = flagDraining
		}
		w.uvarint(flags)
	}
	if v >= 4 {
		w.uvarint(uint64(l.FreeCacheTokens))
		w.uvarint(uint64(l.HitShare * hitShareScale))
	}
	if v >= 6 {
		w.uvarint(uint64(sent.UnixMilli()))
	}
	if v >= 7 {
		w.uvarint(uint64(len(l.Models)))
		for _, m := range l.Models {
			w.str(m.Model)
			sub := legacyLoad(4, "", 0, 0, m, time.Time{}) // a model's fields are version 4's
			w.b = append(w.b, sub[4+1+1:]...)              // less the header, the empty node and the sequence
		}
	}
	if v >= 8 {
		for _, s := range append([]region.Load{l}, l.Models...) {
			w.str(s.Hardware)
			w.uvarint(uint64(s.Speed * speedScale))
			measured := uint64(0)
			if s.SpeedMeasured {
				measured = 1
			}
			w.uvarint(measured)
		}
	}
	return w.b
}

var sampleDispatches = []region.SiblingDispatch{
	{Model: "llama-8b", Replica: "10.0.0.7:8000", ID: 41, Blocks: []uint64{1, 1 << 63, 7}, BlockTokens: 128, Cached: 1, Sent: time.Unix(0, 1_790_000_000_123_456_789)},
	{Model: "llama-8b", Replica: "10.0.0.7:8000", ID: 40, Ended: true},
}

// TestDispatchesTravelWholeAndSplitWhenLarge: what a node tells its
// region arrives as sent; a batch larger than a message is split, every
// record arriving once; malformed records are refused with a reason.
func TestDispatchesTravelWholeAndSplitWhenLarge(t *testing.T) {
	read := func(msgs [][]byte) []region.SiblingDispatch {
		t.Helper()
		var got []region.SiblingDispatch
		for _, msg := range msgs {
			typ, r, err := decodeHeader(msg)
			if err != nil || typ != msgDispatches {
				t.Fatalf("header: type %d, %v", typ, err)
			}
			node, told, err := decodeDispatches(r)
			if err != nil || node != "n" {
				t.Fatalf("decode: node %q, %v", node, err)
			}
			got = append(got, told...)
		}
		return got
	}
	if got := read(encodeDispatches("n", sampleDispatches)); !reflect.DeepEqual(got, sampleDispatches) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, sampleDispatches)
	}
	big := make([]region.SiblingDispatch, 40)
	for i := range big {
		big[i] = region.SiblingDispatch{Model: "m", Replica: "r", ID: uint64(i + 1), BlockTokens: 128, Blocks: make([]uint64, 1000), Sent: time.Unix(0, 5)}
	}
	msgs := encodeDispatches("n", big)
	if len(msgs) < 2 {
		t.Errorf("%d records of 8 KB in %d message(s), want them split", len(big), len(msgs))
	}
	for _, m := range msgs {
		if len(m) > maxDispatchBytes+64 {
			t.Errorf("a message of %d bytes, over the %d bound", len(m), maxDispatchBytes)
		}
	}
	if got := read(msgs); !reflect.DeepEqual(got, big) {
		t.Errorf("split: %d records back of %d, or changed", len(got), len(big))
	}
	for _, tc := range []struct {
		name string
		d    region.SiblingDispatch
		want string
	}{
		{"no number", region.SiblingDispatch{Replica: "r", BlockTokens: 128, Blocks: []uint64{1}}, "without a number"},
		{"no replica", region.SiblingDispatch{ID: 1, BlockTokens: 128, Blocks: []uint64{1}}, "without a number or a replica"},
		{"zero block size", region.SiblingDispatch{Replica: "r", ID: 1, Blocks: []uint64{1}}, "0-token blocks"},
		{"more cached than sent", region.SiblingDispatch{Replica: "r", ID: 1, BlockTokens: 128, Cached: 2, Blocks: []uint64{1}}, "2 of 1 cached"},
	} {
		_, r, _ := decodeHeader(encodeDispatches("n", []region.SiblingDispatch{tc.d})[0])
		if _, _, err := decodeDispatches(r); err == nil || !errors.Is(err, ErrBadMessage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a bad message saying %q", tc.name, err, tc.want)
		}
	}
}
