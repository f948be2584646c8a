package snowmint_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	snowmint "github.com/snowmint/snowmint/clients/go"
	pb "github.com/snowmint/snowmint/clients/go/internal/snowmintv1"
)

// collector keeps every ID a test was given.
type collector struct {
	mu  sync.Mutex
	ids []uint64
}

func (c *collector) add(ids ...uint64) {
	c.mu.Lock()
	c.ids = append(c.ids, ids...)
	c.mu.Unlock()
}

// assertUnique fails the test if any ID was handed out twice.
func (c *collector) assertUnique(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := make(map[uint64]struct{}, len(c.ids))
	for _, id := range c.ids {
		if _, dup := seen[id]; dup {
			t.Fatalf("ID %d handed out twice (among %d IDs)", id, len(c.ids))
		}
		seen[id] = struct{}{}
	}
}

func assertIncreasing(t *testing.T, ids []uint64) {
	t.Helper()
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			t.Errorf("batch not strictly increasing at %d: %d then %d", i, ids[i-1], ids[i])
			return
		}
	}
}

func newClient(t *testing.T, endpoints []string, opts ...snowmint.Option) *snowmint.Client {
	t.Helper()
	client, err := snowmint.New(context.Background(), endpoints, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// hammer runs callers goroutines, each making calls rounds of NextID and Batch of 1 to 300
// IDs in turn, and collects every ID. A call's error fails the test.
func hammer(t *testing.T, client *snowmint.Client, callers, rounds int, ids *collector) {
	t.Helper()
	var wg sync.WaitGroup
	for caller := range callers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(caller), 7))
			for round := range rounds {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				if round%2 == 0 {
					id, err := client.NextID(ctx)
					if err != nil {
						t.Errorf("caller %d NextID: %v", caller, err)
					} else {
						ids.add(id)
					}
				} else {
					n := 1 + rng.IntN(300)
					batch, err := client.Batch(ctx, n)
					if err != nil {
						t.Errorf("caller %d Batch(%d): %v", caller, n, err)
					} else if len(batch) != n {
						t.Errorf("Batch(%d) returned %d IDs", n, len(batch))
					} else {
						assertIncreasing(t, batch)
						ids.add(batch...)
					}
				}
				cancel()
			}
		})
	}
	wg.Wait()
}

func TestManyConcurrentCallersGetUniqueIDs(t *testing.T) {
	srv := startServer(t, 1, "")
	plain := newClient(t, []string{srv.addr})
	buffered := newClient(t, []string{"http://" + srv.addr}, snowmint.WithBuffer(snowmint.DefaultBufferConfig()))
	var ids collector
	var wg sync.WaitGroup
	for _, client := range []*snowmint.Client{plain, buffered} {
		wg.Go(func() { hammer(t, client, 8, 200, &ids) })
	}
	wg.Wait()
	ids.assertUnique(t)
	if len(ids.ids) < 16*100 {
		t.Fatalf("only %d IDs collected", len(ids.ids))
	}
}

func TestFailoverWhenAServerIsKilled(t *testing.T) {
	first := startServer(t, 1, "")
	second := startServer(t, 2, "")
	client := newClient(t, []string{first.addr, second.addr}, snowmint.WithTimeout(500*time.Millisecond))
	var ids collector
	var calls, afterKill atomic.Int64
	var killed atomic.Bool
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for caller := range 8 {
		wg.Go(func() {
			for round := 0; ; round++ {
				select {
				case <-stop:
					return
				default:
				}
				var got []uint64
				var err error
				if (caller+round)%2 == 0 {
					var id uint64
					id, err = client.NextID(context.Background())
					got = []uint64{id}
				} else {
					got, err = client.Batch(context.Background(), 50)
				}
				if err != nil {
					t.Errorf("call failed (server killed: %v): %v", killed.Load(), err)
					return
				}
				ids.add(got...)
				calls.Add(1)
				if killed.Load() {
					afterKill.Add(1)
				}
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	first.kill()
	killed.Store(true)
	time.Sleep(700 * time.Millisecond)
	close(stop)
	wg.Wait()

	ids.assertUnique(t)
	if afterKill.Load() < 10 {
		t.Fatalf("only %d calls succeeded after the kill (of %d)", afterKill.Load(), calls.Load())
	}
	// The last IDs came from the surviving worker.
	last, err := client.NextID(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := snowmint.Decode(last, snowmint.DefaultLayout()); d.WorkerID != 2 {
		t.Fatalf("after the kill an ID came from worker %d, want 2", d.WorkerID)
	}
}

func TestARefusingServerIsSkippedAndAloneGivesARetriableError(t *testing.T) {
	dir := t.TempDir()
	writeRefusingState(t, dir, 3)
	refusing := startServer(t, 3, dir)
	good := startServer(t, 4, "")

	// The server itself refuses with UNAVAILABLE.
	conn, err := grpc.NewClient(refusing.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := pb.NewIdServiceClient(conn).NextId(ctx, &pb.NextIdRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("the server with a reservation an hour ahead answered %v, want UNAVAILABLE", err)
	}

	// Listed first, it is skipped for the good one.
	client := newClient(t, []string{refusing.addr, good.addr})
	for range 3 {
		id, err := client.NextID(ctx)
		if err != nil {
			t.Fatalf("NextID with a good server listed second: %v", err)
		}
		if d, _ := snowmint.Decode(id, snowmint.DefaultLayout()); d.WorkerID != 4 {
			t.Fatalf("ID from worker %d, want 4", d.WorkerID)
		}
	}
	if _, err := client.Batch(ctx, 10); err != nil {
		t.Fatalf("Batch with a good server listed second: %v", err)
	}

	// Alone, it gives a retriable error, with and without a buffer.
	for _, opts := range [][]snowmint.Option{
		{snowmint.WithTimeout(300 * time.Millisecond)},
		{snowmint.WithTimeout(300 * time.Millisecond), snowmint.WithBuffer(snowmint.DefaultBufferConfig())},
	} {
		alone := newClient(t, []string{refusing.addr}, opts...)
		start := time.Now()
		_, err := alone.NextID(ctx)
		if !errors.Is(err, snowmint.ErrUnavailable) || status.Code(err) != codes.Unavailable {
			t.Fatalf("alone: got %v, want ErrUnavailable wrapping UNAVAILABLE", err)
		}
		if took := time.Since(start); took > 3*time.Second {
			t.Fatalf("the refusal took %v to come back", took)
		}
		if _, err := alone.Batch(ctx, 5); !errors.Is(err, snowmint.ErrUnavailable) {
			t.Fatalf("alone, Batch: got %v, want ErrUnavailable", err)
		}
	}
}

func TestTheBufferDropsBatchesPastTheirAge(t *testing.T) {
	srv := startServer(t, 5, "")
	maxAge := 200 * time.Millisecond
	client := newClient(t, []string{srv.addr},
		snowmint.WithBuffer(snowmint.BufferConfig{Batch: 64, LowWater: 8, MaxRefills: 1, MaxAge: maxAge}))
	ctx := context.Background()
	var ids collector
	for range 3 {
		first, err := client.NextID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ids.add(first)
		// The rest of first's batch is still buffered; let it go stale.
		time.Sleep(2 * maxAge)
		before := time.Now()
		next, err := client.NextID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ids.add(next)
		d, err := snowmint.Decode(next, snowmint.DefaultLayout())
		if err != nil {
			t.Fatal(err)
		}
		// Tick starts are whole milliseconds: allow for the rounding.
		if d.Time().Before(before.Add(-time.Millisecond)) {
			t.Fatalf("after the wait the next ID is from %v, before the call at %v: a stale batch was used",
				d.Time().Format(time.RFC3339Nano), before.UTC().Format(time.RFC3339Nano))
		}
	}
	// Many IDs through several refills: none twice.
	for range 1000 {
		id, err := client.NextID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ids.add(id)
	}
	ids.assertUnique(t)
}

func TestOtherErrorsReturnAsTheyAreWithoutFailover(t *testing.T) {
	first := startServer(t, 6, "")
	second := startServer(t, 7, "")
	client := newClient(t, []string{first.addr, second.addr})
	_, err := client.Batch(context.Background(), 0)
	if status.Code(err) != codes.InvalidArgument || errors.Is(err, snowmint.ErrUnavailable) {
		t.Fatalf("Batch(0): got %v, want INVALID_ARGUMENT as it is", err)
	}
	if n := first.requests(t, "BatchIds"); n != 1 {
		t.Fatalf("the first server saw %d BatchIds calls, want 1", n)
	}
	if n := second.requests(t, "BatchIds"); n != 0 {
		t.Fatalf("the error was failed over: the second server saw %d BatchIds calls", n)
	}
}

func TestTheCallersDeadlineWins(t *testing.T) {
	srv := startServer(t, 8, "")
	client := newClient(t, []string{srv.addr})
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	_, err := client.NextID(ctx)
	if status.Code(err) != codes.DeadlineExceeded || errors.Is(err, snowmint.ErrUnavailable) {
		t.Fatalf("NextID past the caller's deadline: got %v, want DEADLINE_EXCEEDED", err)
	}
	if _, err := client.NextID(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := client.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := client.NextID(context.Background()); !errors.Is(err, snowmint.ErrClosed) {
		t.Fatalf("NextID after Close: got %v, want ErrClosed", err)
	}
}
