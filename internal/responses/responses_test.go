package responses

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"skywalker/internal/request"
)

var home = request.Home{Region: "eu-west", Replica: "10.0.3.7:8000"}

// TestIDsCarryTheirHome: an id reads back as written, with its tenant;
// without the key, edited or forged, or not ours, it is refused with the
// reason; a rotated-out key still verifies while listed.
func TestIDsCarryTheirHome(t *testing.T) {
	primary, old := []byte("0123456789abcdef"), []byte("fedcba9876543210")
	c := NewCodec([][]byte{primary, old})
	id := c.Encode(home, "acme", "resp_9f2c41e0b7d84a5c")
	if !strings.HasPrefix(id, Prefix) || strings.ContainsFunc(id, func(r rune) bool { return !idByte(byte(r)) }) {
		t.Fatalf("id %q: want %s… of letters, digits, _ and - (OpenAI's id characters)", id, Prefix)
	}
	ref, err := c.Decode(id)
	if err != nil || ref.Home != home || ref.EngineID != "resp_9f2c41e0b7d84a5c" || !ref.OwnedBy("acme") || ref.OwnedBy("globex") || ref.OwnedBy("") {
		t.Fatalf("decoded %+v, %v", ref, err)
	}
	if _, err := NewCodec([][]byte{[]byte("another key.....")}).Decode(id); !errors.Is(err, ErrForged) {
		t.Errorf("another mesh's key: %v, want forged", err)
	}
	if ref, err := NewCodec([][]byte{[]byte("new primary.....")}).Decode(NewCodec([][]byte{old}).Encode(home, "", "resp_1")); !errors.Is(err, ErrForged) {
		t.Errorf("a key no longer listed: %+v %v, want forged", ref, err)
	}
	if _, err := c.Decode(NewCodec([][]byte{old}).Encode(home, "", "resp_1")); err != nil {
		t.Errorf("a rotated key still listed: %v", err)
	}
	unsigned := NewCodec(nil).Encode(home, "", "resp_1")
	if _, err := c.Decode(unsigned); !errors.Is(err, ErrForged) {
		t.Errorf("an unsigned id where keys are set: %v, want forged", err)
	}
	if ref, err := NewCodec(nil).Decode(unsigned); err != nil || ref.Home != home {
		t.Errorf("unsigned, no keys: %+v %v", ref, err)
	}
	edited := []byte(id)
	edited[len(Prefix)+5] ^= 1
	for _, bad := range []struct {
		id   string
		want error
	}{
		{"resp_9f2c41e0b7d84a5c", ErrNotOurs},
		{Prefix + "!!", ErrMalformed},
		{Prefix, ErrMalformed},
		{Prefix + "AQ", ErrMalformed},
		{string(edited), nil}, // malformed or forged, either way refused
	} {
		if _, err := c.Decode(bad.id); err == nil || bad.want != nil && !errors.Is(err, bad.want) {
			t.Errorf("%q: %v, want %v", bad.id, err, bad.want)
		}
	}
}

// TestIDsAreOpaque: with a key, an id reveals neither the replica's
// address nor the engine's id (it is sealed); one response always has the
// same id; an id the previous release signed (readable) still reads.
func TestIDsAreOpaque(t *testing.T) {
	key := []byte("0123456789abcdef")
	c := NewCodec([][]byte{key})
	id := c.Encode(home, "acme", "resp_9f2c41e0b7d84a5c")
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(id, Prefix))
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{home.Replica, home.Region, "resp_9f2c41e0b7d84a5c", "9f2c41e0b7d84a5c"} {
		if bytes.Contains(raw, []byte(secret)) || strings.Contains(id, secret) {
			t.Errorf("id %q reveals %q", id, secret)
		}
	}
	if again := c.Encode(home, "acme", "resp_9f2c41e0b7d84a5c"); again != id {
		t.Errorf("one response, two ids (%q, %q): a client could not match a GET's answer to its creation", id, again)
	}
	if other := c.Encode(home, "acme", "resp_9f2c41e0b7d84a5d"); other[:len(Prefix)+16] == id[:len(Prefix)+16] {
		t.Error("two responses share a nonce")
	}
	// The previous release's id: version 1, signed, readable.
	fields := appendField(appendField(nil, home.Region), home.Replica)
	fields = binary.LittleEndian.AppendUint64(fields, tenantTag("acme"))
	fields = appendField(fields, "resp_old")
	v1 := append([]byte{idVersion, flagSigned}, fields...)
	v1 = append(v1, mac(key, v1)...)
	if ref, err := c.Decode(Prefix + base64.RawURLEncoding.EncodeToString(v1)); err != nil || ref.EngineID != "resp_old" || !ref.OwnedBy("acme") {
		t.Errorf("an id of the previous release: %+v %v", ref, err)
	}
	if _, err := NewCodec(nil).Decode(id); !errors.Is(err, ErrForged) {
		t.Errorf("a sealed id without a key to open it: %v, want refused", err)
	}
}

func FuzzDecode(f *testing.F) {
	c := NewCodec([][]byte{[]byte("0123456789abcdef")})
	f.Add(c.Encode(home, "t", "resp_1"))
	f.Add(NewCodec(nil).Encode(home, "", "resp_2"))
	f.Add(Prefix + "AQE")
	f.Fuzz(func(t *testing.T, id string) {
		for _, codec := range []Codec{c, NewCodec(nil)} {
			if ref, err := codec.Decode(id); err == nil && (ref.Home.Replica == "" || ref.EngineID == "") {
				t.Errorf("%q decoded to %+v", id, ref)
			}
		}
	})
}

// mapped maps engine ids to "resp_swX" + the id.
func mapped(id string) string {
	if strings.HasPrefix(id, Prefix) {
		return id
	}
	return Prefix + "X" + id[len("resp_"):]
}

// TestRewriterMapsEveryIDAndNothingElse: the response's id and its
// previous_response_id are mapped, in a JSON answer and in an SSE stream
// read in pieces of any size; an id quoted inside text, or one already
// ours, is left alone.
func TestRewriterMapsEveryIDAndNothingElse(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"json", `{"id":"resp_abc","object":"response","previous_response_id": "resp_0ff","output":[{"content":[{"text":"see \"resp_abc\" [\"resp_q\"]"}]}]}`,
			`{"id":"resp_swXabc","object":"response","previous_response_id": "resp_swX0ff","output":[{"content":[{"text":"see \"resp_abc\" [\"resp_q\"]"}]}]}`},
		{"sse", "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_77\",\"status\":\"in_progress\"}}\n\n" +
			"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"item_id\":\"msg_1\",\"delta\":\"resp_77\"}\n\n" +
			"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_77\",\"previous_response_id\":null}}\n\n",
			"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_swX77\",\"status\":\"in_progress\"}}\n\n" +
				"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"item_id\":\"msg_1\",\"delta\":\"resp_77\"}\n\n" +
				"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_swX77\",\"previous_response_id\":null}}\n\n"},
		{"ours already", `{"id":"resp_swabc"}`, `{"id":"resp_swabc"}`},
		{"cut short", `{"id":"resp_ab`, `{"id":"resp_ab`},
		{"a quote at the end", `["x",`, `["x",`},
	} {
		for _, piece := range []int{1, 2, 3, 7, 4096} {
			got, err := io.ReadAll(NewRewriter(io.NopCloser(iotest.OneByteReader(strings.NewReader(tc.in))), mapped))
			if piece > 1 {
				got, err = io.ReadAll(NewRewriter(io.NopCloser(&chunked{s: tc.in, n: piece}), mapped))
			}
			if err != nil || string(got) != tc.want {
				t.Errorf("%s, read %d bytes at a time:\n got %q (%v)\nwant %q", tc.name, piece, got, err, tc.want)
			}
		}
	}
}

// chunked reads s n bytes at a time.
type chunked struct {
	s string
	n int
}

func (c *chunked) Read(p []byte) (int, error) {
	if c.s == "" {
		return 0, io.EOF
	}
	k := copy(p[:min(len(p), c.n)], c.s)
	c.s = c.s[k:]
	return k, nil
}

// FuzzRewriter: whatever the bytes and however they are cut, the rewriter
// gives what it gives the whole, and never panics.
func FuzzRewriter(f *testing.F) {
	f.Add(`{"id":"resp_1","x":["resp_2", "resp_3"]}`, uint8(3))
	f.Add("data: {\"response\":{\"id\":\"resp_a\"}}\n\n", uint8(1))
	f.Fuzz(func(t *testing.T, in string, n uint8) {
		whole, _ := io.ReadAll(NewRewriter(io.NopCloser(strings.NewReader(in)), mapped))
		cut, _ := io.ReadAll(NewRewriter(io.NopCloser(&chunked{s: in, n: int(n%16) + 1}), mapped))
		if string(whole) != string(cut) {
			t.Errorf("%q: whole %q, in pieces of %d %q", in, whole, n%16+1, cut)
		}
	})
}
