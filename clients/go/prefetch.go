package snowmint

// The prefetch buffer of named sequences (WithSequencePrefetch), the contract of
// clients/README.md: per sequence, values fetched ahead by one BatchValues and handed out one
// by one by NextValue.
//
// Each sequence has a one-slot lock over its buffered values, held across a refill: a caller
// that finds the buffer empty refills it while the others wait on the lock (each within its
// own context), then take what it left, so no two callers refill one sequence at once and no
// value goes to two callers. Until an answer has said whether the sequence is ordered, a
// refill is one NextValue; an unordered sequence is refilled by BatchValues(n); an ordered one
// is never buffered (its values increase fleet-wide in the order calls are answered, which
// buffering would break), so its callers skip the lock and make one NextValue each. A refill
// that fails returns the error the direct call would; the next caller tries again. A batch
// answered OUT_OF_RANGE (fewer values left than asked for) is followed by one NextValue, so
// the last values of a sequence are still handed out. NOT_FOUND forgets whether the sequence
// is ordered: it may be created again otherwise.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// MaxSequencePrefetch is the most values one refill asks for: the server's default
// --max-batch.
const MaxSequencePrefetch = 65536

// What the answers said of a sequence.
const (
	kindUnknown int32 = iota
	kindUnordered
	kindOrdered
)

// prefetch holds the buffers of one client, one per sequence used.
type prefetch struct {
	perRefill int
	mu        sync.Mutex
	sequences map[string]*sequenceBuffer
}

type sequenceBuffer struct {
	// kind is read before taking the lock, so callers of an ordered sequence never wait on
	// each other.
	kind atomic.Int32
	// lock holds one token while a caller owns values (and refills them).
	lock chan struct{}
	// values fetched and not yet handed out, in the order they came (increasing within a
	// refill); only touched while holding lock.
	values []int64
}

func newPrefetch(perRefill int) (*prefetch, error) {
	if perRefill < 0 || perRefill > MaxSequencePrefetch {
		return nil, fmt.Errorf("snowmint: sequence prefetch %d is out of range: 0 (off) to %d, the server's default --max-batch",
			perRefill, MaxSequencePrefetch)
	}
	if perRefill == 0 {
		return nil, nil
	}
	return &prefetch{perRefill: perRefill, sequences: map[string]*sequenceBuffer{}}, nil
}

func (p *prefetch) sequence(name string) *sequenceBuffer {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.sequences[name]
	if s == nil {
		s = &sequenceBuffer{lock: make(chan struct{}, 1)}
		p.sequences[name] = s
	}
	return s
}

func (s *sequenceBuffer) learn(ordered bool, err error) {
	switch {
	case status.Code(err) == codes.NotFound:
		s.kind.Store(kindUnknown)
	case err != nil:
	case ordered:
		s.kind.Store(kindOrdered)
	default:
		s.kind.Store(kindUnordered)
	}
}

// nextValue is NextValue through the buffer of name.
func (p *prefetch) nextValue(ctx context.Context, c *Client, name string) (int64, error) {
	s := p.sequence(name)
	one := func() (int64, error) {
		value, ordered, err := c.nextValue(ctx, name)
		s.learn(ordered, err)
		return value, err
	}
	if s.kind.Load() == kindOrdered {
		return one()
	}
	select {
	case s.lock <- struct{}{}:
	case <-ctx.Done():
		return 0, contextError(ctx)
	case <-c.background.Done():
		return 0, ErrClosed
	}
	defer func() { <-s.lock }()
	if c.background.Err() != nil {
		return 0, ErrClosed // values left buffered are a gap
	}
	if len(s.values) > 0 {
		value := s.values[0]
		s.values = s.values[1:]
		return value, nil
	}
	if s.kind.Load() != kindUnordered {
		return one()
	}
	values, ordered, err := c.batchValues(ctx, name, p.perRefill)
	if status.Code(err) == codes.OutOfRange {
		return one()
	}
	s.learn(ordered, err)
	if err != nil {
		return 0, err
	}
	// Values of a batch answered ordered (the sequence was made ordered since) are still this
	// client's alone: they are handed out from here, never twice.
	s.values = values[1:]
	return values[0], nil
}
