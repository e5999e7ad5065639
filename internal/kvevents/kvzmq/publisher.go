// Package kvzmq carries KV-event batches over ZeroMQ the way vLLM's
// ZmqEventPublisher does, with go-zeromq/zmq4 (pure Go): a PUB socket
// sends multipart messages [topic, sequence number (8 bytes, big-endian),
// msgpack batch]; a ROUTER socket answers replay requests — a DEALER sends
// [empty frame, first wanted sequence number] and gets back [empty, seq,
// batch] for every buffered batch from there, then [empty, -1, empty].
// Follow is the subscriber: it checks the sequence, asks for replay on a
// gap, and says when the stream restarted or could not be kept whole.
package kvzmq

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/go-zeromq/zmq4"
)

// Publisher publishes batches and keeps the last Buffer of them for
// replay. Safe for concurrent use.
type Publisher struct {
	topic  []byte
	pub    zmq4.Socket
	router zmq4.Socket // nil without a replay endpoint
	mu     sync.Mutex
	seq    uint64
	buf    []buffered
	size   int
	cancel context.CancelFunc
	done   chan struct{}
}

type buffered struct {
	seq     uint64
	payload []byte
}

// PublisherConfig is where a publisher listens: vLLM's kv-events-config
// fields.
type PublisherConfig struct {
	Endpoint       string // e.g. tcp://*:5557
	ReplayEndpoint string // e.g. tcp://*:5558; "" for no replay
	Topic          string
	Buffer         int // batches kept for replay; default 10,000 (vLLM's buffer_steps)
}

// Listen starts a publisher.
func Listen(ctx context.Context, cfg PublisherConfig) (*Publisher, error) {
	if cfg.Buffer <= 0 {
		cfg.Buffer = 10_000
	}
	ctx, cancel := context.WithCancel(ctx)
	p := &Publisher{topic: []byte(cfg.Topic), pub: zmq4.NewPub(ctx), size: cfg.Buffer, cancel: cancel, done: make(chan struct{})}
	if err := p.pub.Listen(cfg.Endpoint); err != nil {
		cancel()
		return nil, fmt.Errorf("kv events: publish on %s: %w", cfg.Endpoint, err)
	}
	if cfg.ReplayEndpoint == "" {
		close(p.done)
		return p, nil
	}
	p.router = zmq4.NewRouter(ctx, zmq4.WithID(zmq4.SocketIdentity("replay")))
	if err := p.router.Listen(cfg.ReplayEndpoint); err != nil {
		cancel()
		_ = p.pub.Close()
		return nil, fmt.Errorf("kv events: replay on %s: %w", cfg.ReplayEndpoint, err)
	}
	go p.serveReplay()
	return p, nil
}

// Addr is the address the PUB socket listens on (its port, for an
// endpoint that asked for any).
func (p *Publisher) Addr() string { return p.pub.Addr().String() }

// ReplayAddr is the replay socket's address ("" without one).
func (p *Publisher) ReplayAddr() string {
	if p.router == nil {
		return ""
	}
	return p.router.Addr().String()
}

// Publish sends one batch under the next sequence number and keeps it for
// replay.
func (p *Publisher) Publish(payload []byte) error { return p.publish(payload, true, true) }

// Skip takes the next sequence number without sending the batch (a batch
// lost on the way, as PUB/SUB loses under pressure); kept says whether
// replay can still fill it.
func (p *Publisher) Skip(payload []byte, kept bool) { _ = p.publish(payload, false, kept) }

func (p *Publisher) publish(payload []byte, send, keep bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	seq := p.seq
	p.seq++
	if keep {
		p.buf = append(p.buf, buffered{seq, payload})
		if len(p.buf) > p.size {
			p.buf = p.buf[len(p.buf)-p.size:]
		}
	}
	if !send {
		return nil
	}
	return p.pub.Send(zmq4.NewMsgFrom(p.topic, seqBytes(int64(seq)), payload))
}

// Restart starts the sequence over with an empty buffer, as a restarted
// engine's publisher does.
func (p *Publisher) Restart() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seq, p.buf = 0, nil
}

// Close stops the publisher.
func (p *Publisher) Close() error {
	p.cancel()
	err := p.pub.Close()
	if p.router != nil {
		_ = p.router.Close()
	}
	<-p.done
	return err
}

// serveReplay answers replay requests until the publisher closes.
func (p *Publisher) serveReplay() {
	defer close(p.done)
	for {
		msg, err := p.router.Recv()
		if err != nil {
			return
		}
		// [identity, empty, start seq]
		if len(msg.Frames) != 3 || len(msg.Frames[2]) != 8 {
			continue
		}
		id, start := msg.Frames[0], binary.BigEndian.Uint64(msg.Frames[2])
		p.mu.Lock()
		var out []buffered
		for _, b := range p.buf {
			if b.seq >= start {
				out = append(out, b)
			}
		}
		p.mu.Unlock()
		for _, b := range out {
			if err := p.router.Send(zmq4.NewMsgFrom(id, nil, seqBytes(int64(b.seq)), b.payload)); err != nil {
				break
			}
		}
		_ = p.router.Send(zmq4.NewMsgFrom(id, nil, seqBytes(-1), nil))
	}
}

func seqBytes(seq int64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(seq))
	return b[:]
}
