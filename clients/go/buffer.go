package snowmint

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// retryPause is how long no refill starts after one failed on every endpoint, so callers
// looping on NextID do not hammer servers that are all down.
const retryPause = 100 * time.Millisecond

// buffer holds prefetched IDs and refills at the rate they are used, by the rule of
// clients/README.md (the same in every client), with lead = MaxAge/4:
//
//   - rate: IDs handed out per second, in windows of at least lead;
//   - a refill is sent when, after dropping the stale batches, the IDs still fresh a lead
//     from now plus those asked for by refills in flight are at most
//     mark = min(LowWater, rate × lead) (or fewer than the callers waiting), fewer than
//     MaxRefills are in flight, none failed in the last 100 ms, and a caller waits or mark ≥ 1;
//     it asks for min(Batch, max(rate × MaxAge, mark + 1, callers waiting)) IDs;
//   - the decision is made when a caller finds the buffer empty, when a pop leaves mark or
//     fewer buffered and on their way (unless every refill is in flight), when a refill ends,
//     and a lead before the oldest batch goes stale.
//
// Every field is guarded by mu. An ID leaves the buffer under mu, exactly once, so no ID is
// handed out twice; decide reads no clock (now is an argument), so tests drive it through
// simulated time.
type buffer struct {
	cfg  BufferConfig
	lead time.Duration

	mu          sync.Mutex
	batches     []fetched // by when their refills were sent, oldest first
	buffered    int       // IDs in batches
	refilling   int       // refills under way
	asked       int       // IDs the refills under way asked for
	taken       uint64    // IDs handed out
	windowStart time.Time // the rate window: when it began, and taken then
	windowTaken uint64
	rate        float64 // IDs per second as of the last decision
	mark        int     // the last decision's mark
	countdown   int     // pops before the next decision
	waiting     int     // callers waiting on an empty buffer
	limit       uint32  // the most a refill asks for: Batch, halved by each INVALID_ARGUMENT
	failures    uint64  // refills that failed so far
	lastErr     error   // the last failed refill's error
	retryAt     time.Time
	filled      chan struct{} // closed and replaced whenever waiting callers may look again
	timer       *time.Timer   // the next decision, a lead before the oldest batch goes stale
	timerAt     time.Time
}

// fetched is one refill's IDs, with the time its request was sent: every ID in it was minted
// after that, so its age is measured from there.
type fetched struct {
	ids  []uint64
	sent time.Time
}

func newBuffer(cfg BufferConfig, now time.Time) *buffer {
	return &buffer{cfg: cfg, lead: cfg.MaxAge / 4, limit: cfg.Batch, windowStart: now, filled: make(chan struct{})}
}

// popLocked takes the next ID, first dropping every batch MaxAge old.
func (b *buffer) popLocked(now time.Time) (uint64, bool) {
	for len(b.batches) > 0 {
		front := &b.batches[0]
		if len(front.ids) > 0 && now.Sub(front.sent) < b.cfg.MaxAge {
			id := front.ids[0]
			front.ids = front.ids[1:]
			b.buffered--
			b.taken++
			return id, true
		}
		b.buffered -= len(front.ids)
		b.batches[0] = fetched{}
		b.batches = b.batches[1:]
	}
	return 0, false
}

// measureLocked applies the rate rule: windows of at least lead; a window still under way
// raises the rate once its own count says more.
func (b *buffer) measureLocked(now time.Time) {
	elapsed := now.Sub(b.windowStart)
	taken := float64(b.taken - b.windowTaken)
	if elapsed >= b.lead {
		b.rate = taken / elapsed.Seconds()
		b.windowStart, b.windowTaken = now, b.taken
	} else {
		b.rate = max(b.rate, taken/b.lead.Seconds())
	}
}

// decideLocked returns the sizes of the refills to send at now (counted as under way), and
// when to decide again (zero: not before something happens).
func (b *buffer) decideLocked(now time.Time) (refills []uint32, wakeAt time.Time) {
	for len(b.batches) > 0 && now.Sub(b.batches[0].sent) >= b.cfg.MaxAge {
		b.buffered -= len(b.batches[0].ids)
		b.batches = b.batches[1:]
	}
	b.measureLocked(now)
	b.mark = min(b.cfg.LowWater, int(b.rate*b.lead.Seconds()))
	ahead := b.asked
	for _, batch := range b.batches {
		if batch.sent.Add(b.cfg.MaxAge).After(now.Add(b.lead)) {
			ahead += len(batch.ids)
		}
	}
	// Fetch ahead only when an ID will be used within the lead; else a prefetched ID would
	// mostly go stale unused.
	wanted := b.waiting > 0 || b.mark >= 1
	for wanted && !now.Before(b.retryAt) && b.refilling < b.cfg.MaxRefills && (ahead <= b.mark || ahead < b.waiting) {
		n := max(int(math.Ceil(b.rate*b.cfg.MaxAge.Seconds())), b.mark+1, b.waiting-ahead)
		n = max(1, min(n, int(b.limit)))
		refills = append(refills, uint32(n))
		b.refilling++
		b.asked += n
		ahead += n
	}
	// Pops before the next decision: until the mark is reached; none while every refill is in
	// flight (the next to end decides).
	b.countdown = max(1, b.buffered+b.asked-b.mark)
	if b.refilling >= b.cfg.MaxRefills {
		b.countdown = math.MaxInt
	}
	for _, batch := range b.batches {
		if at := batch.sent.Add(b.cfg.MaxAge - b.lead); at.After(now) {
			wakeAt = at
			break
		}
	}
	if b.waiting > 0 && b.retryAt.After(now) && (wakeAt.IsZero() || b.retryAt.Before(wakeAt)) {
		wakeAt = b.retryAt
	}
	return refills, wakeAt
}

// endedLocked records a refill of asked IDs, sent at sent, that brought ids or failed with
// err. It tells whether the callers waiting may look again: IDs came, or the refill failed for
// good (a refusal of the count is sent again for half as many).
func (b *buffer) endedLocked(asked uint32, sent time.Time, ids []uint64, err error, now time.Time) bool {
	b.refilling--
	b.asked -= int(asked)
	if err == nil {
		i, _ := slices.BinarySearchFunc(b.batches, sent, func(f fetched, t time.Time) int { return f.sent.Compare(t) })
		b.batches = slices.Insert(b.batches, i, fetched{ids: ids, sent: sent})
		b.buffered += len(ids)
		return true
	}
	if status.Code(err) == codes.InvalidArgument && asked > 1 {
		// More than the server's --max-batch: ask for half as many from now on.
		b.limit = max(1, min(b.limit, asked/2))
		return false
	}
	b.failures++
	b.lastErr = err
	b.retryAt = now.Add(retryPause)
	return true
}

// wakeLocked wakes every caller waiting for a refill to end.
func (b *buffer) wakeLocked() {
	close(b.filled)
	b.filled = make(chan struct{})
}

func (b *buffer) stopTimerLocked() {
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
}

// decideLocked decides, starts the refills, and sets the timer of the next decision.
func (c *Client) decideLocked(now time.Time) {
	b := c.buf
	if c.background.Err() != nil {
		return
	}
	refills, wakeAt := b.decideLocked(now)
	for _, n := range refills {
		c.refills.Add(1)
		go c.refill(n, now)
	}
	if !wakeAt.IsZero() && (b.timer == nil || wakeAt.Before(b.timerAt)) {
		b.stopTimerLocked()
		b.timerAt = wakeAt
		b.timer = time.AfterFunc(wakeAt.Sub(now), func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.timer = nil
			c.decideLocked(time.Now())
		})
	}
}

// nextBuffered pops an ID, waiting for a refill when the buffer is empty. It waits until
// ctx ends or, without a deadline on ctx, as long as one unbuffered call could take.
func (c *Client) nextBuffered(ctx context.Context) (uint64, error) {
	b := c.buf
	b.mu.Lock()
	now := time.Now()
	if id, ok := b.popLocked(now); ok {
		if b.countdown--; b.countdown <= 0 {
			c.decideLocked(now)
		}
		b.mu.Unlock()
		return id, nil
	}
	return c.waitBufferedLocked(ctx)
}

// waitBufferedLocked waits on an empty buffer, counted among the callers waiting; b.mu is
// held on entry and released on return.
func (c *Client) waitBufferedLocked(ctx context.Context) (uint64, error) {
	b := c.buf
	b.waiting++
	defer func() {
		b.mu.Lock()
		b.waiting--
		b.mu.Unlock()
	}()
	seen := b.failures
	wait := c.timeout * time.Duration(c.attempts)
	var timeout <-chan time.Time
	if _, ok := ctx.Deadline(); !ok {
		timer := time.NewTimer(wait)
		defer timer.Stop()
		timeout = timer.C
	}
	for {
		now := time.Now()
		id, ok := b.popLocked(now)
		c.decideLocked(now)
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
		select {
		case <-filled:
		case <-ctx.Done():
			return 0, contextError(ctx)
		case <-c.background.Done():
			return 0, ErrClosed
		case <-timeout:
			return 0, unavailable(fmt.Sprintf("no IDs arrived within %v", wait), nil)
		}
		b.mu.Lock()
	}
}

// refill fetches one batch of n IDs into the buffer, sent at sent, then decides again.
func (c *Client) refill(n uint32, sent time.Time) {
	defer c.refills.Done()
	b := c.buf
	ids, err := c.batch(c.background, n)
	b.mu.Lock()
	defer b.mu.Unlock()
	if c.background.Err() != nil {
		return
	}
	now := time.Now()
	if b.endedLocked(n, sent, ids, err, now) {
		b.wakeLocked()
	}
	c.decideLocked(now)
}
