package snowmint_test

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	snowmint "github.com/snowmint/snowmint/clients/go"
)

// TestSequenceValuesFromARealServer: a sequence made with `snowmint sequence create`, its
// values through NextValue and BatchValues past an endpoint that is gone, dense and
// increasing; a name with no sequence is NOT_FOUND, returned as it is.
func TestSequenceValuesFromARealServer(t *testing.T) {
	stateDir := t.TempDir()
	create := exec.Command(binary(t), "sequence", "create", "orders", "--start", "41", "--state-dir", stateDir)
	if out, err := create.CombinedOutput(); err != nil {
		t.Fatalf("sequence create: %v: %s", err, out)
	}
	down := startServer(t, 2, "")
	down.kill()
	srv := startServer(t, 3, stateDir)
	client := newClient(t, []string{down.addr, srv.addr}, snowmint.WithTimeout(500*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	first, err := client.NextValue(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	values := []int64{first}
	batch, err := client.BatchValues(ctx, "orders", 1000)
	if err != nil {
		t.Fatal(err)
	}
	values = append(values, batch...)
	for i, v := range values {
		if v != int64(41+i) {
			t.Fatalf("value %d is %d, want %d", i, v, 41+i)
		}
	}
	if _, err := client.NextValue(ctx, "nope"); status.Code(err) != codes.NotFound {
		t.Fatalf("a missing sequence gave %v, want NOT_FOUND", err)
	}
	if _, err := client.BatchValues(ctx, "orders", 0); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a batch of 0 gave %v, want INVALID_ARGUMENT", err)
	}
}
