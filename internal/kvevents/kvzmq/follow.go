package kvzmq

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"

	"skywalker/internal/kvevents"
)

// Source is one publisher of KV events: one engine, or one data-parallel
// rank of it (vLLM's /kv_event_sources lists one per rank).
type Source struct {
	Endpoint       string // tcp://host:port of its PUB socket
	ReplayEndpoint string // tcp://host:port of its ROUTER socket; "" for none
	Topic          string
	Rank           int
}

// Sink receives what Follow reads, in order, from one goroutine.
type Sink interface {
	// Batch is the next batch of the stream, whole and in order.
	Batch(rank int, b kvevents.Batch)
	// Restarted: the publisher's sequence began again (its engine
	// restarted, and its cache with it). The batches that follow are the
	// new engine's.
	Restarted(rank int)
	// Lost: the stream could not be kept whole (a gap replay did not fill,
	// a batch that could not be read): what the engine holds is no longer
	// known exactly. Batches that follow are still delivered.
	Lost(rank int, why string)
}

// ReplayTimeout bounds one replay exchange.
const ReplayTimeout = 2 * time.Second

// Follow subscribes to src and feeds sink until ctx ends. It returns the
// first error that stops it (the subscription itself failing), or nil
// when ctx ended.
//
// Sequence numbers: the first batch heard after a later one's number is a
// restart (the number went back); a number past the next expected is a
// gap, filled from the replay endpoint (the batches missed, then the one
// heard); a gap replay cannot fill, or any undecodable batch, is reported
// Lost and the stream goes on from there. The first batch heard with a
// number above 0 is a gap too (the batches before subscribing): replay
// from 0 fills it when the publisher still buffers its whole history.
func Follow(ctx context.Context, src Source, sink Sink) error {
	sub := zmq4.NewSub(ctx, zmq4.WithAutomaticReconnect(true), zmq4.WithDialerRetry(250*time.Millisecond))
	defer sub.Close()
	if err := sub.SetOption(zmq4.OptionSubscribe, src.Topic); err != nil {
		return fmt.Errorf("kv events %s: subscribe: %w", src.Endpoint, err)
	}
	if err := sub.Dial(guardedEndpoint(src.Endpoint)); err != nil {
		return fmt.Errorf("kv events %s: %w", src.Endpoint, err)
	}
	f := follower{src: src, sink: sink, next: -1}
	for {
		msg, err := sub.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("kv events %s: %w", src.Endpoint, err)
		}
		if len(msg.Frames) != 3 || len(msg.Frames[1]) != 8 {
			f.lost(fmt.Sprintf("a message of %d frames, not [topic, seq, batch]", len(msg.Frames)))
			continue
		}
		f.heard(ctx, int64(binary.BigEndian.Uint64(msg.Frames[1])), msg.Frames[2])
	}
}

// follower is Follow's sequence state.
type follower struct {
	src  Source
	sink Sink
	next int64 // the sequence number expected next; -1 before any
}

// heard handles batch seq.
func (f *follower) heard(ctx context.Context, seq int64, payload []byte) {
	switch {
	case f.next >= 0 && seq < f.next:
		f.sink.Restarted(f.src.Rank)
		if seq > 0 { // the restarted publisher's first batches were missed too
			f.fill(ctx, 0, seq)
		}
	case seq > max(f.next, 0):
		f.fill(ctx, max(f.next, 0), seq)
	}
	f.apply(seq, payload)
}

// fill replays batches from..to-1, or reports them lost.
func (f *follower) fill(ctx context.Context, from, to int64) {
	if f.src.ReplayEndpoint == "" {
		f.lost(fmt.Sprintf("batches %d to %d were missed and the engine offers no replay", from, to-1))
		return
	}
	got, err := replay(ctx, f.src.ReplayEndpoint, from)
	if err != nil {
		f.lost(fmt.Sprintf("replay of batches %d to %d: %v", from, to-1, err))
		return
	}
	want := from
	for _, b := range got {
		if b.seq < want || b.seq >= to {
			continue
		}
		if b.seq != want {
			break
		}
		f.apply(b.seq, b.payload)
		want++
	}
	if want < to {
		f.lost(fmt.Sprintf("batches %d to %d are no longer in the engine's replay buffer", want, to-1))
		f.next = to
	}
}

// apply decodes and delivers one batch.
func (f *follower) apply(seq int64, payload []byte) {
	f.next = seq + 1
	b, err := kvevents.DecodeBatch(payload)
	if err != nil {
		f.lost(fmt.Sprintf("batch %d: %v", seq, err))
		return
	}
	f.sink.Batch(f.src.Rank, b)
}

func (f *follower) lost(why string) { f.sink.Lost(f.src.Rank, why) }

type replayed struct {
	seq     int64
	payload []byte
}

// dealerIDs makes each replay's DEALER identity unique (the ROUTER
// answers by identity).
var dealerIDs atomic.Uint64

// replay asks endpoint for every buffered batch from seq on.
func replay(ctx context.Context, endpoint string, from int64) ([]replayed, error) {
	ctx, cancel := context.WithTimeout(ctx, ReplayTimeout)
	defer cancel()
	id := zmq4.SocketIdentity(fmt.Sprintf("skywalker-replay-%d", dealerIDs.Add(1)))
	d := zmq4.NewDealer(ctx, zmq4.WithID(id), zmq4.WithTimeout(ReplayTimeout))
	defer d.Close()
	if err := d.Dial(guardedEndpoint(endpoint)); err != nil {
		return nil, err
	}
	if err := d.Send(zmq4.NewMsgFrom(nil, seqBytes(from))); err != nil {
		return nil, err
	}
	var out []replayed
	for {
		type result struct {
			msg zmq4.Msg
			err error
		}
		ch := make(chan result, 1)
		go func() { m, err := d.Recv(); ch <- result{m, err} }()
		var r result
		select {
		case r = <-ch:
		case <-ctx.Done():
			return out, errors.New("no end of replay in time")
		}
		if r.err != nil {
			return out, r.err
		}
		frames := r.msg.Frames
		if len(frames) > 0 && len(frames[0]) == 0 {
			frames = frames[1:] // the empty delimiter
		}
		if len(frames) != 2 || len(frames[0]) != 8 {
			return out, fmt.Errorf("a replay message of %d frames", len(frames))
		}
		seq := int64(binary.BigEndian.Uint64(frames[0]))
		if seq == -1 {
			return out, nil
		}
		out = append(out, replayed{seq, frames[1]})
	}
}
