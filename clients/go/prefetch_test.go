package snowmint_test

// The sequence prefetch buffer (WithSequencePrefetch) against a real server.

import (
	"context"
	"errors"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	snowmint "github.com/snowmint/snowmint/clients/go"
)

// sequencesServer starts a server on a state dir where `snowmint sequence create` made each
// of sequences (its arguments after the name, such as --ordered or --max 25).
func sequencesServer(t *testing.T, sequences map[string][]string) *server {
	t.Helper()
	stateDir := t.TempDir()
	for name, flags := range sequences {
		args := append([]string{"sequence", "create", name, "--state-dir", stateDir}, flags...)
		if out, err := exec.Command(binary(t), args...).CombinedOutput(); err != nil {
			t.Fatalf("sequence create %s: %v: %s", name, err, out)
		}
	}
	return startServer(t, 4, stateDir)
}

// TestSequencePrefetchBuffersUnorderedSequencesOnly: with prefetch 10, two clients taking
// turns on an unordered sequence get their values in runs of 10 for one NextValue and about
// one BatchValues per 10 values; the last values before the sequence's maximum are still
// handed out; an ordered sequence is never buffered (two clients taking turns get increasing
// values, one NextValue each).
func TestSequencePrefetchBuffersUnorderedSequencesOnly(t *testing.T) {
	srv := sequencesServer(t, map[string][]string{"orders": nil, "invoices": {"--ordered"}, "short": {"--max", "25"}})
	a := newClient(t, []string{srv.addr}, snowmint.WithSequencePrefetch(10))
	b := newClient(t, []string{srv.addr}, snowmint.WithSequencePrefetch(10))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	next := func(c *snowmint.Client, name string) int64 {
		t.Helper()
		v, err := c.NextValue(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}

	var fromA, fromB []int64
	for range 50 {
		fromA = append(fromA, next(a, "orders"))
		fromB = append(fromB, next(b, "orders"))
	}
	seen := map[int64]bool{}
	for _, values := range [][]int64{fromA, fromB} {
		jumps := 0
		for i := 1; i < len(values); i++ {
			if values[i] <= values[i-1] {
				t.Fatalf("not increasing: %v", values)
			}
			if i > 1 && values[i] != values[i-1]+1 {
				jumps++
			}
		}
		if jumps > 5 {
			t.Fatalf("%d jumps, want runs of 10: %v", jumps, values)
		}
		for _, v := range values {
			if seen[v] {
				t.Fatalf("value %d twice", v)
			}
			seen[v] = true
		}
	}
	if got := [2]int{srv.requests(t, "NextValue"), srv.requests(t, "BatchValues")}; got != [2]int{2, 10} {
		t.Fatalf("100 values took %d NextValue and %d BatchValues, want 2 and 10", got[0], got[1])
	}

	for range 10 {
		x, y, z := next(a, "invoices"), next(b, "invoices"), next(a, "invoices")
		if x >= y || y >= z {
			t.Fatalf("an ordered sequence taken in turns gave %d, %d, %d", x, y, z)
		}
	}
	if got := srv.requests(t, "NextValue"); got != 2+30 {
		t.Fatalf("30 values of an ordered sequence: %d NextValue calls in all, want 32", got)
	}

	var short []int64
	for len(short) <= 25 {
		v, err := a.NextValue(ctx, "short")
		if err != nil {
			if status.Code(err) != codes.OutOfRange {
				t.Fatalf("the end of a sequence: %v, want OUT_OF_RANGE", err)
			}
			break
		}
		short = append(short, v)
	}
	if len(short) != 25 || short[0] != 1 || short[24] != 25 {
		t.Fatalf("a sequence of 25 gave %v", short)
	}
	if _, err := a.NextValue(ctx, "missing"); status.Code(err) != codes.NotFound {
		t.Fatalf("a missing sequence gave %v, want NOT_FOUND", err)
	}
	_ = a.Close()
	if _, err := a.NextValue(ctx, "orders"); !errors.Is(err, snowmint.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// TestSequencePrefetchSharesRefillsBetweenGoroutines: 500 goroutines on one client with
// prefetch 100 get 500 distinct values from a handful of calls.
func TestSequencePrefetchSharesRefillsBetweenGoroutines(t *testing.T) {
	srv := sequencesServer(t, map[string][]string{"orders": nil})
	client := newClient(t, []string{srv.addr}, snowmint.WithSequencePrefetch(100))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	var values []int64
	var wg sync.WaitGroup
	for range 500 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := client.NextValue(ctx, "orders")
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			values = append(values, v)
			mu.Unlock()
		}()
	}
	wg.Wait()
	sort.Slice(values, func(i, j int) bool { return values[i] < values[j] })
	for i := 1; i < len(values); i++ {
		if values[i] == values[i-1] {
			t.Fatalf("value %d twice", values[i])
		}
	}
	if len(values) != 500 {
		t.Fatalf("%d values, want 500", len(values))
	}
	if calls := srv.requests(t, "NextValue") + srv.requests(t, "BatchValues"); calls > 7 {
		t.Fatalf("500 values took %d calls", calls)
	}
}

func TestSequencePrefetchIsChecked(t *testing.T) {
	for _, n := range []int{0, snowmint.MaxSequencePrefetch} {
		c, err := snowmint.New(context.Background(), []string{"127.0.0.1:1"}, snowmint.WithSequencePrefetch(n))
		if err != nil {
			t.Fatalf("prefetch %d: %v", n, err)
		}
		_ = c.Close()
	}
	for _, n := range []int{-1, snowmint.MaxSequencePrefetch + 1} {
		_, err := snowmint.New(context.Background(), []string{"127.0.0.1:1"}, snowmint.WithSequencePrefetch(n))
		if err == nil || !strings.Contains(err.Error(), "65536") {
			t.Fatalf("prefetch %d: %v, want an error naming 65536", n, err)
		}
	}
}
