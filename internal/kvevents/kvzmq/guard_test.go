package kvzmq

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
)

// guardOver reads stream through a guarded connection with the given
// limit, in reads of at most chunk bytes, and returns what it delivered
// and the error that ended it.
func guardOver(t *testing.T, stream []byte, limit int64, chunk int) ([]byte, error) {
	t.Helper()
	client, server := net.Pipe()
	go func() {
		_, _ = server.Write(stream)
		_ = server.Close()
	}()
	g := &guardedConn{Conn: client, limit: limit, skip: zmtpGreeting}
	var got []byte
	buf := make([]byte, chunk)
	for {
		n, err := g.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			return got, err
		}
	}
}

// frame is a ZMTP frame: flags, a short or long length, the body.
func frame(flags byte, body []byte) []byte {
	if len(body) > 255 {
		return append(binary.BigEndian.AppendUint64([]byte{flags | 0x02}, uint64(len(body))), body...)
	}
	return append([]byte{flags, byte(len(body))}, body...)
}

// TestAFrameOverTheLimitIsRefusedFromItsLength: a 256 MiB frame's length
// never reaches zmq4 whole (so it never allocates the body); frames within
// the limit, short and long, pass untouched, whatever the read sizes.
func TestAFrameOverTheLimitIsRefusedFromItsLength(t *testing.T) {
	greeting := bytes.Repeat([]byte{0xff}, zmtpGreeting)
	ok := append(append(append([]byte(nil), greeting...), frame(0x04, []byte("READY"))...), frame(0x01, bytes.Repeat([]byte("b"), 1000))...)
	for _, chunk := range []int{1, 7, 4096} {
		got, err := guardOver(t, ok, 2000, chunk)
		if err != nil || !bytes.Equal(got, ok) {
			t.Errorf("reads of %d: frames within the limit: %d of %d bytes, %v", chunk, len(got), len(ok), err)
		}
		huge := binary.BigEndian.AppendUint64([]byte{0x02}, 256<<20)
		got, err = guardOver(t, append(append([]byte(nil), ok...), huge...), 2000, chunk)
		if err == nil || !strings.Contains(err.Error(), "268435456 bytes, over the 2000-byte limit") {
			t.Errorf("reads of %d: a 256 MiB frame: %v, want it refused from its length", chunk, err)
		}
		if want := len(ok) + len(huge) - 1; len(got) != want {
			t.Errorf("reads of %d: %d bytes delivered, want %d (all but the length's last byte)", chunk, len(got), want)
		}
	}
}

// FuzzGuardedConn: any stream, read in any sizes, never panics, and never
// delivers a complete frame length over the limit.
func FuzzGuardedConn(f *testing.F) {
	f.Add(append(bytes.Repeat([]byte{0}, zmtpGreeting), frame(0x01, []byte("hi"))...), 3)
	f.Add(append(bytes.Repeat([]byte{0}, zmtpGreeting), binary.BigEndian.AppendUint64([]byte{0x02}, 1<<40)...), 1)
	f.Fuzz(func(t *testing.T, stream []byte, chunk int) {
		chunk = 1 + abs(chunk)%64
		got, _ := guardOver(t, stream, 100, chunk)
		// Re-parse what was delivered: every length completed in it is
		// within the limit.
		g := &guardedConn{limit: 100, skip: zmtpGreeting}
		for i := 0; i < len(got); i++ {
			switch {
			case g.skip > 0:
				g.skip--
			case g.lenLeft == 0:
				g.length, g.lenLeft = 0, 1
				if got[i]&0x02 != 0 {
					g.lenLeft = 8
				}
			default:
				g.length = g.length<<8 | uint64(got[i])
				if g.lenLeft--; g.lenLeft == 0 {
					if g.length > 100 {
						t.Fatalf("a frame of %d bytes delivered whole over the 100-byte limit", g.length)
					}
					g.skip = int64(g.length)
				}
			}
		}
	})
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
