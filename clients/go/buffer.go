package snowmint

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/status"
)

// buffer holds prefetched IDs. Every field is guarded by mu; an ID leaves the buffer under
// mu, exactly once, so no ID is handed out twice.
type buffer struct {
	cfg BufferConfig

	mu        sync.Mutex
	batches   []fetched // oldest first
	buffered  int       // IDs in batches
	refilling int       // refills under way
	failures  uint64    // refills that failed so far
	lastErr   error     // the last failed refill's error
	filled    chan struct{}
}

// fetched is one refill's IDs, with the time its request was sent: every ID in it was minted
// after that, so its age is measured from there.
type fetched struct {
	ids []uint64
	at  time.Time
}

func newBuffer(cfg BufferConfig) *buffer {
	return &buffer{cfg: cfg, filled: make(chan struct{})}
}

// popLocked takes the next ID, first dropping every batch older than MaxAge.
func (b *buffer) popLocked(now time.Time) (uint64, bool) {
	for len(b.batches) > 0 {
		front := &b.batches[0]
		if len(front.ids) > 0 && now.Sub(front.at) <= b.cfg.MaxAge {
			id := front.ids[0]
			front.ids = front.ids[1:]
			b.buffered--
			return id, true
		}
		b.buffered -= len(front.ids)
		b.batches[0] = fetched{}
		b.batches = b.batches[1:]
	}
	return 0, false
}

// wakeLocked wakes every caller waiting for a refill to end.
func (b *buffer) wakeLocked() {
	close(b.filled)
	b.filled = make(chan struct{})
}

// nextBuffered pops an ID, waiting for a refill when the buffer is empty. It waits until
// ctx ends (returning its error as a gRPC status, as an unbuffered call would) or, without a
// deadline on ctx, as long as one unbuffered call could take.
func (c *Client) nextBuffered(ctx context.Context) (uint64, error) {
	b := c.buf
	var timeout <-chan time.Time // made on the first wait only: the common case never waits
	b.mu.Lock()
	seen := b.failures
	for {
		id, ok := b.popLocked(time.Now())
		c.startRefillsLocked()
		if ok {
			b.mu.Unlock()
			return id, nil
		}
		if b.failures != seen {
			err := b.lastErr
			b.mu.Unlock()
			return 0, err
		}
		filled := b.filled
		b.mu.Unlock()
		if _, ok := ctx.Deadline(); !ok && timeout == nil {
			timer := time.NewTimer(c.timeout * time.Duration(c.attempts))
			defer timer.Stop()
			timeout = timer.C
		}
		select {
		case <-filled:
		case <-ctx.Done():
			return 0, status.FromContextError(ctx.Err()).Err()
		case <-c.background.Done():
			return 0, ErrClosed
		case <-timeout:
			return 0, fmt.Errorf("%w: no IDs arrived within %v", ErrUnavailable, c.timeout*time.Duration(c.attempts))
		}
		b.mu.Lock()
	}
}

// startRefillsLocked starts refills while the buffer, counting the refills under way, is at
// or below its low-water mark, up to MaxRefills at once.
func (c *Client) startRefillsLocked() {
	b := c.buf
	for b.refilling < b.cfg.MaxRefills && b.buffered+b.refilling*int(b.cfg.Batch) <= b.cfg.LowWater {
		if c.background.Err() != nil {
			return
		}
		b.refilling++
		c.refills.Add(1)
		go c.refill()
	}
}

// refill fetches one batch into the buffer, then starts more refills if still low.
func (c *Client) refill() {
	defer c.refills.Done()
	b := c.buf
	at := time.Now()
	ids, err := c.batch(c.background, b.cfg.Batch)
	b.mu.Lock()
	if err != nil {
		b.failures++
		b.lastErr = err
		b.wakeLocked()
		b.mu.Unlock()
		// Every endpoint failed: keep this refill's place a moment so that callers looping
		// on NextID do not hammer the servers. Then wake the waiting callers again: they
		// start the next refill.
		select {
		case <-time.After(100 * time.Millisecond):
		case <-c.background.Done():
		}
		b.mu.Lock()
		b.refilling--
		b.wakeLocked()
		b.mu.Unlock()
		return
	}
	b.refilling--
	b.batches = append(b.batches, fetched{ids: ids, at: at})
	b.buffered += len(ids)
	b.wakeLocked()
	c.startRefillsLocked()
	b.mu.Unlock()
}
