package digest

import "testing"

// FuzzDecode proves no input makes Decode panic or allocate past its size,
// and that whatever it accepts re-encodes to the same bytes.
func FuzzDecode(f *testing.F) {
	d := New("us-east", "proxy-0", 3, 64, 0.01)
	d.Add(1)
	good, _ := d.MarshalBinary()
	f.Add(good)
	f.Add([]byte("SWDG"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := Decode(in)
		if err != nil {
			return
		}
		out, err := got.MarshalBinary()
		if err != nil {
			t.Fatalf("decoded digest does not encode: %v", err)
		}
		if string(out) != string(in) {
			t.Fatalf("round trip changed the bytes")
		}
		got.MatchLength([]uint64{1, 2, 3})
	})
}
