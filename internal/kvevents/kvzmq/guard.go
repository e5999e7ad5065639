package kvzmq

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"

	"skywalker/internal/kvevents"
)

// Frames are refused from their length prefix. zmq4 allocates a frame's
// whole body from the length its header claims before reading a byte of
// it, so an engine (or whoever reaches its event port) that announces a
// 256 MiB frame costs the proxy 256 MiB even if the batch is then refused.
// The follower dials through guardedTCP instead of tcp: a connection that
// reads the ZMTP stream as it passes, and fails — before handing zmq4 the
// length — at the first frame over MaxFrameBytes.

// MaxFrameBytes is the largest ZMTP frame a follower reads: a batch at
// its limit (kvevents.MaxBatchBytes) with room for its envelope.
const MaxFrameBytes = kvevents.MaxBatchBytes + 64<<10

// guardedScheme is the transport the follower's tcp endpoints are dialed
// through.
const guardedScheme = "skywalker-kvtcp"

var registerGuard sync.Once

// guardedEndpoint is endpoint dialed through the guarded transport (a
// tcp endpoint; others as they are).
func guardedEndpoint(endpoint string) string {
	registerGuard.Do(func() {
		if err := zmq4.RegisterTransport(guardedScheme, guardedTCP{transport.New("tcp")}); err != nil {
			panic(err) // registered once, by this package only
		}
	})
	if rest, ok := strings.CutPrefix(endpoint, "tcp://"); ok {
		return guardedScheme + "://" + rest
	}
	return endpoint
}

// guardedTCP is the tcp transport whose connections refuse oversized
// frames.
type guardedTCP struct{ transport.Transport }

func (g guardedTCP) Dial(ctx context.Context, dialer transport.Dialer, addr string) (net.Conn, error) {
	c, err := g.Transport.Dial(ctx, dialer, addr)
	if err != nil {
		return nil, err
	}
	return &guardedConn{Conn: c, limit: MaxFrameBytes, skip: zmtpGreeting}, nil
}

// zmtpGreeting is the length of a ZMTP 3 greeting, which precedes the
// first frame.
const zmtpGreeting = 64

// guardedConn follows the ZMTP framing of what it reads: a frame is a
// flags byte (bit 1: the length is 8 bytes, big-endian, else 1), its
// length, and its body.
type guardedConn struct {
	net.Conn
	limit int64
	// The parse state: skip body (or greeting) bytes still to pass;
	// lenLeft length bytes still to read into length (0: a flags byte is
	// next).
	skip    int64
	lenLeft int
	length  uint64
	err     error // the refusal, returned from the next Read on
}

func (g *guardedConn) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	n, err := g.Conn.Read(p)
	for i := 0; i < n; i++ {
		switch {
		case g.skip > 0:
			step := min(g.skip, int64(n-i))
			g.skip -= step
			i += int(step) - 1
		case g.lenLeft == 0: // a flags byte
			g.length, g.lenLeft = 0, 1
			if p[i]&0x02 != 0 {
				g.lenLeft = 8
			}
		default:
			g.length = g.length<<8 | uint64(p[i])
			g.lenLeft--
			if g.lenLeft > 0 {
				continue
			}
			if g.length > uint64(g.limit) {
				// zmq4 never gets the length's last byte, so it never
				// completes the header, and never allocates the body.
				g.err = fmt.Errorf("kv events: a frame of %d bytes, over the %d-byte limit: refused from its length, unread", g.length, g.limit)
				_ = g.Conn.Close()
				return i, nil
			}
			g.skip = int64(g.length)
		}
	}
	return n, err
}
