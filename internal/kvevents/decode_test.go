package kvevents

import (
	"errors"
	"os"
	"reflect"
	"testing"
)

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Both shapes vLLM has published decode to the same events; fields of
// later releases and unknown event types are skipped; hashes published as
// bytes are their last eight bytes, negative integers their 64 bits.
func TestBothWireShapesDecode(t *testing.T) {
	tests := []struct {
		fixture string
		want    Batch
	}{
		{"batch-array.msgpack", Batch{TS: 1.5, HasRank: true, Rank: 0, Events: []Event{
			{Kind: Stored, Hashes: []uint64{1, 2}, Tokens: 4, BlockSize: 2, Medium: "GPU"},
			{Kind: Removed, Hashes: []uint64{1}, Medium: "GPU"},
			{Kind: Cleared},
		}}},
		{"batch-map.msgpack", Batch{TS: 2.25, HasRank: true, Rank: 1, Events: []Event{
			{Kind: Stored, Hashes: []uint64{0x18191a1b1c1d1e1f, 0xfffffffffffffffe}, Parent: 0xfffffffffffffffe, HasParent: true,
				Tokens: 2, BlockSize: 1, Medium: "GPU", LoRAName: "sql-lora"},
			{Kind: Removed, Hashes: []uint64{0x18191a1b1c1d1e1f}, Medium: "CPU"},
		}}},
	}
	for _, tc := range tests {
		t.Run(tc.fixture, func(t *testing.T) {
			got, err := DecodeBatch(readFixture(t, tc.fixture))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("decoded\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}

// Every truncation of a good batch, and some nonsense, is an error that
// wraps ErrBadBatch, never a panic.
func TestBadBatchesAreRefused(t *testing.T) {
	good := readFixture(t, "batch-map.msgpack")
	for n := range len(good) {
		if _, err := DecodeBatch(good[:n]); err == nil || !errors.Is(err, ErrBadBatch) {
			t.Fatalf("truncated at %d of %d: err %v, want ErrBadBatch", n, len(good), err)
		}
	}
	for name, b := range map[string][]byte{
		"a huge array header": {0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0xdd, 0xff, 0xff, 0xff, 0xff},
		"an empty event":      {0x92, 0x00, 0x91, 0x90},
		"a null block hash":   {0x92, 0x00, 0x91, 0x92, 0xab, 'B', 'l', 'o', 'c', 'k', 'S', 't', 'o', 'r', 'e', 'd', 0x91, 0xc0},
		"deep nesting":        append([]byte{0x92, 0x00, 0x91, 0x93, 0xac, 'B', 'l', 'o', 'c', 'k', 'R', 'e', 'm', 'o', 'v', 'e', 'd', 0x90}, deep(100)...),
	} {
		if _, err := DecodeBatch(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// deep is an array nested n deep.
func deep(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = 0x91
	}
	return append(b, 0x00)
}

func FuzzDecodeBatch(f *testing.F) {
	f.Add(readFixture(f, "batch-array.msgpack"))
	f.Add(readFixture(f, "batch-map.msgpack"))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := DecodeBatch(data)
		if err != nil {
			return
		}
		for _, e := range b.Events {
			if e.Kind == Unknown {
				t.Errorf("an unknown event was kept: %+v", e)
			}
		}
	})
}

// What EncodeBatch writes, in either shape, DecodeBatch reads back.
func TestEncodedBatchesDecode(t *testing.T) {
	b := Batch{TS: 3.5, HasRank: true, Rank: 2, Events: []Event{
		{Kind: Stored, Hashes: []uint64{1, 1 << 63}, Parent: 9, HasParent: true, Tokens: 32, BlockSize: 16, Medium: "GPU", LoRAName: "sql-lora"},
		{Kind: Stored, Hashes: []uint64{3}, Tokens: 16, BlockSize: 16, Medium: "GPU"},
		{Kind: Removed, Hashes: []uint64{1}, Medium: "GPU"},
		{Kind: Cleared},
	}}
	for _, shape := range []Shape{MapShape, ArrayShape} {
		got, err := DecodeBatch(EncodeBatch(b, shape))
		if err != nil || !reflect.DeepEqual(got, b) {
			t.Errorf("shape %d: %+v, %v; want %+v", shape, got, err, b)
		}
	}
}

// BenchmarkDecodeBatch decodes a batch of one BlockStored of 256 blocks
// (16 tokens each, with their token ids) and one BlockRemoved of 256, in
// each shape. Reported: block events per second.
func BenchmarkDecodeBatch(b *testing.B) {
	stored := Event{Kind: Stored, BlockSize: 16, Tokens: 16 * 256, Medium: "GPU"}
	removed := Event{Kind: Removed, Medium: "GPU"}
	for i := range 256 {
		stored.Hashes = append(stored.Hashes, uint64(i)*0x9E3779B97F4A7C15)
		removed.Hashes = append(removed.Hashes, uint64(i+1000)*0x9E3779B97F4A7C15)
	}
	for _, shape := range []struct {
		name  string
		shape Shape
	}{{"map", MapShape}, {"array", ArrayShape}} {
		payload := EncodeBatch(Batch{TS: 1, Events: []Event{stored, removed}, HasRank: true}, shape.shape)
		b.Run(shape.name, func(b *testing.B) {
			b.SetBytes(int64(len(payload)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := DecodeBatch(payload); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(512*b.N)/b.Elapsed().Seconds(), "block-events/s")
		})
	}
}
