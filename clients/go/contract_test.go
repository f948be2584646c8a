package snowmint_test

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	snowmint "github.com/snowmint/snowmint/clients/go"
)

// pause stops the server's process group (SIGSTOP): its connections stay open and nothing
// answers. The server is killed at the end of the test, which resumes nothing it needs.
func (s *server) pause(t *testing.T) {
	t.Helper()
	if err := syscall.Kill(-s.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
}

// Every attempt failing over ends the call with code UNAVAILABLE, whatever the last attempt
// said (here DEADLINE_EXCEEDED: the server answers nothing); the caller's own deadline ends it
// with DEADLINE_EXCEEDED, and that error is not ErrUnavailable (issue 30, finding 3).
func TestAFailedCallIsUnavailableAndACallersDeadlineIsDeadlineExceeded(t *testing.T) {
	hung := startServer(t, 20, "")
	hung.pause(t)
	for _, buffered := range []bool{false, true} {
		opts := []snowmint.Option{snowmint.WithTimeout(200 * time.Millisecond), snowmint.WithAttempts(2)}
		if buffered {
			opts = append(opts, snowmint.WithBuffer(snowmint.DefaultBufferConfig()))
		}
		_, err := newClient(t, []string{hung.addr}, opts...).NextID(context.Background())
		if !errors.Is(err, snowmint.ErrUnavailable) || status.Code(err) != codes.Unavailable {
			t.Errorf("buffered %v: got %v (code %v), want ErrUnavailable with code UNAVAILABLE", buffered, err, status.Code(err))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
		_, err = newClient(t, []string{hung.addr}, opts...).NextID(ctx)
		cancel()
		if status.Code(err) != codes.DeadlineExceeded || errors.Is(err, snowmint.ErrUnavailable) ||
			!errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("buffered %v, a 150 ms deadline: got %v (code %v), want DEADLINE_EXCEEDED", buffered, err, status.Code(err))
		}
	}
}

// Close ends every call waiting on the client at once with ErrClosed: callers on an empty
// buffer and calls in an attempt on a server that does not answer (issue 30, finding 11).
func TestCloseEndsEveryWaitingCall(t *testing.T) {
	hung := startServer(t, 21, "")
	hung.pause(t)
	for _, buffered := range []bool{false, true} {
		opts := []snowmint.Option{snowmint.WithTimeout(10 * time.Second)}
		if buffered {
			opts = append(opts, snowmint.WithBuffer(snowmint.DefaultBufferConfig()))
		}
		client := newClient(t, []string{hung.addr}, opts...)
		errs := make(chan error, 4)
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				_, err := client.NextID(context.Background())
				errs <- err
			})
		}
		wg.Go(func() {
			_, err := client.Batch(context.Background(), 5)
			errs <- err
		})
		time.Sleep(300 * time.Millisecond)
		closed := time.Now()
		if err := client.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if took := time.Since(closed); took > 500*time.Millisecond {
			t.Errorf("buffered %v: the waiting calls ended %v after Close", buffered, took)
		}
		close(errs)
		for err := range errs {
			if !errors.Is(err, snowmint.ErrClosed) {
				t.Errorf("buffered %v: a call waiting at Close got %v, want ErrClosed", buffered, err)
			}
		}
	}
}

// A buffered client sends nothing before it is used, and a process that uses 10 IDs a second
// makes the server mint a small multiple of that, not a batch per MaxAge (issue 30, finding 1).
func TestTheBufferRefillsAtTheRateOfUse(t *testing.T) {
	srv := startServer(t, 22, "")
	client := newClient(t, []string{srv.addr}, snowmint.WithBuffer(snowmint.DefaultBufferConfig()))
	time.Sleep(300 * time.Millisecond)
	if n := srv.requests(t, "BatchIds"); n != 0 {
		t.Fatalf("a buffered client sent %d BatchIds before it was used", n)
	}
	var ids collector
	start := time.Now()
	for n := range 40 {
		time.Sleep(time.Until(start.Add(time.Duration(n) * 100 * time.Millisecond)))
		id, err := client.NextID(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		ids.add(id)
	}
	ids.assertUnique(t)
	if minted := srv.issued(t); minted > 3*40+20 {
		t.Fatalf("%d IDs minted for 40 used in 4 s", minted)
	}
}

// A server with a lower --max-batch than the buffer's batch still serves the buffer.
func TestTheBufferFitsAServerWithASmallMaxBatch(t *testing.T) {
	srv := startServer(t, 23, "", "--max-batch", "50")
	client := newClient(t, []string{srv.addr}, snowmint.WithBuffer(snowmint.DefaultBufferConfig()))
	var ids collector
	for range 500 {
		id, err := client.NextID(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		ids.add(id)
	}
	ids.assertUnique(t)
}
