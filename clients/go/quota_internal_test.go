// Tests of quota waits against a fake gRPC server that answers every call RESOURCE_EXHAUSTED
// with the grpc-status-details-bin trailer it is given, byte for byte: how the client reads
// RetryInfo from what grpc-go decodes (a good blob, none, garbage), where and how long it
// waits, and the bearer token on every attempt.
package snowmint

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/durationpb"
)

// refuser is a fake gRPC server over HTTP/2 without TLS: it answers every call with the
// status RESOURCE_EXHAUSTED and details (the raw grpc-status-details-bin; none when nil), and
// keeps the authorization metadata of each call.
type refuser struct {
	addr    string
	details []byte

	mu    sync.Mutex
	calls []string // each call's authorization values, joined by ","
}

func startRefuser(t *testing.T, details []byte) *refuser {
	t.Helper()
	r := &refuser{details: details}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.addr = listener.Addr().String()
	srv := &http.Server{Handler: http.HandlerFunc(r.serve), Protocols: new(http.Protocols)}
	srv.Protocols.SetUnencryptedHTTP2(true)
	go func() { _ = srv.Serve(listener) }()
	t.Cleanup(func() { _ = srv.Close() })
	return r
}

func (r *refuser) serve(w http.ResponseWriter, req *http.Request) {
	_, _ = io.Copy(io.Discard, req.Body)
	auth := ""
	for i, v := range req.Header.Values("Authorization") {
		if i > 0 {
			auth += ","
		}
		auth += v
	}
	r.mu.Lock()
	r.calls = append(r.calls, auth)
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/grpc")
	w.WriteHeader(http.StatusOK)
	w.Header().Set(http.TrailerPrefix+"Grpc-Status", "8")
	w.Header().Set(http.TrailerPrefix+"Grpc-Message", "over the tenant's rate")
	if r.details != nil {
		w.Header().Set(http.TrailerPrefix+"Grpc-Status-Details-Bin", base64.RawStdEncoding.EncodeToString(r.details))
	}
}

// seen is the authorization of each call the refuser answered.
func (r *refuser) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.calls...)
}

// statusBlob is a google.rpc.Status {1: code, 2: message, 3: details} written by hand, as a
// server sends it; each of details is one google.protobuf.Any.
func statusBlob(code codes.Code, details ...[]byte) []byte {
	b := protowire.AppendTag(nil, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(code))
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendString(b, "over the tenant's rate")
	for _, d := range details {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendBytes(b, d)
	}
	return b
}

// anyOf is a google.protobuf.Any {1: type_url, 2: value}.
func anyOf(typeURL string, value []byte) []byte {
	b := protowire.AppendTag(nil, 1, protowire.BytesType)
	b = protowire.AppendString(b, typeURL)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	return protowire.AppendBytes(b, value)
}

// retryInfoOf is a google.rpc.RetryInfo {1: retry_delay {1: seconds, 2: nanos}} in an Any.
func retryInfoOf(seconds int64, nanos int32) []byte {
	delay := protowire.AppendTag(nil, 1, protowire.VarintType)
	delay = protowire.AppendVarint(delay, uint64(seconds))
	delay = protowire.AppendTag(delay, 2, protowire.VarintType)
	delay = protowire.AppendVarint(delay, uint64(nanos))
	info := protowire.AppendTag(nil, 1, protowire.BytesType)
	info = protowire.AppendBytes(info, delay)
	return anyOf("type.googleapis.com/google.rpc.RetryInfo", info)
}

const retryInfoURL = "type.googleapis.com/google.rpc.RetryInfo"

// One call of a client with the default 2 attempts, for each details blob: a RetryInfo is
// waited out and tried once more (then RESOURCE_EXHAUSTED as it is); anything else, garbage
// included, ends the call at once with RESOURCE_EXHAUSTED after one attempt.
func TestQuotaRefusalsByTheirDetails(t *testing.T) {
	reason := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "quota")
	errorInfo := anyOf("type.googleapis.com/google.rpc.ErrorInfo", reason)
	for _, tc := range []struct {
		name    string
		details []byte
		calls   int
	}{
		{"RetryInfo of 80 ms", statusBlob(codes.ResourceExhausted, retryInfoOf(0, 80_000_000)), 2},
		{"RetryInfo after another detail", statusBlob(codes.ResourceExhausted, errorInfo, retryInfoOf(0, 80_000_000)), 2},
		{"no details", nil, 1},
		{"a Status without RetryInfo", statusBlob(codes.ResourceExhausted, errorInfo), 1},
		{"a Status of no details", statusBlob(codes.ResourceExhausted), 1},
		{"garbage", []byte{0xff, 0xff, 0xff, 0xff, 0x0f, 0x1a, 0x99}, 1},
		{"a truncated Status", statusBlob(codes.ResourceExhausted, retryInfoOf(0, 80_000_000))[:12], 1},
		{"a RetryInfo that does not decode", statusBlob(codes.ResourceExhausted, anyOf(retryInfoURL, []byte{0x0a, 0x09, 0x08})), 1},
		{"a negative delay", statusBlob(codes.ResourceExhausted, retryInfoOf(-1, 0)), 1},
		{"nanos out of range", statusBlob(codes.ResourceExhausted, retryInfoOf(0, 2_000_000_000)), 1},
		{"a RetryInfo with no delay", statusBlob(codes.ResourceExhausted, anyOf(retryInfoURL, nil)), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := startRefuser(t, tc.details)
			client, err := New(context.Background(), []string{fake.addr})
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			start := time.Now()
			_, err = client.Batch(context.Background(), 1)
			took := time.Since(start)
			if status.Code(err) != codes.ResourceExhausted || errors.Is(err, ErrUnavailable) {
				t.Fatalf("got %v, want RESOURCE_EXHAUSTED as it is", err)
			}
			if calls := len(fake.seen()); calls != tc.calls {
				t.Fatalf("%d calls, want %d", calls, tc.calls)
			}
			if tc.calls == 2 && took < 80*time.Millisecond {
				t.Fatalf("the call ended after %v, without waiting the 80 ms asked for", took)
			}
		})
	}
}

// retryDelay itself, on statuses as grpc-go hands them over.
func TestRetryDelayReadsRetryInfo(t *testing.T) {
	withDetails := func(details ...*errdetails.RetryInfo) error {
		st := status.New(codes.ResourceExhausted, "over the tenant's rate")
		for _, d := range details {
			var err error
			if st, err = st.WithDetails(d); err != nil {
				t.Fatal(err)
			}
		}
		return st.Err()
	}
	if d, ok := retryDelay(withDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(1500 * time.Millisecond)})); !ok || d != 1500*time.Millisecond {
		t.Errorf("a RetryInfo of 1.5 s: got %v, %v", d, ok)
	}
	if d, ok := retryDelay(withDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(0)})); !ok || d != 0 {
		t.Errorf("a RetryInfo of 0 s: got %v, %v", d, ok)
	}
	for name, err := range map[string]error{
		"no details":     withDetails(),
		"no delay":       withDetails(&errdetails.RetryInfo{}),
		"a negative one": withDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(-time.Second)}),
		"not a status":   errors.New("no status"),
		"nil":            nil,
	} {
		if d, ok := retryDelay(err); ok {
			t.Errorf("%s: got a delay of %v", name, d)
		}
	}
}

// A quota wait stays on its endpoint: with two endpoints and 4 attempts every attempt goes to
// the first, each after the wait it asked for; the second gets none. Each attempt carries the
// token.
func TestAQuotaWaitStaysOnItsEndpointAndEveryAttemptCarriesTheToken(t *testing.T) {
	first := startRefuser(t, statusBlob(codes.ResourceExhausted, retryInfoOf(0, 30_000_000)))
	second := startRefuser(t, statusBlob(codes.ResourceExhausted, retryInfoOf(0, 30_000_000)))
	client, err := New(context.Background(), []string{first.addr, second.addr}, WithAttempts(4), WithToken("tok-Q~!9"))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	start := time.Now()
	_, err = client.NextUUID(context.Background())
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("got %v, want RESOURCE_EXHAUSTED", err)
	}
	if took := time.Since(start); took < 90*time.Millisecond {
		t.Fatalf("4 attempts with 3 waits of 30 ms took %v", took)
	}
	seen := first.seen()
	if len(seen) != 4 || len(second.seen()) != 0 {
		t.Fatalf("the first endpoint got %d calls, the second %d; want 4 and 0", len(seen), len(second.seen()))
	}
	for i, auth := range seen {
		if auth != "Bearer tok-Q~!9" {
			t.Fatalf("attempt %d carried authorization %q", i, auth)
		}
	}
	// The current endpoint did not move: the next call goes to the first again.
	_, _ = client.NextID(context.Background())
	if len(second.seen()) != 0 {
		t.Fatal("after the quota waits a call went to the second endpoint")
	}
}

// Every call kind carries the token; a client without one sends no authorization.
func TestEveryCallCarriesTheToken(t *testing.T) {
	fake := startRefuser(t, nil)
	client, err := New(context.Background(), []string{fake.addr}, WithToken("abc"))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()
	_, _ = client.NextID(ctx)
	_, _ = client.Batch(ctx, 2)
	_, _ = client.NextUUID(ctx)
	_, _ = client.BatchUUIDs(ctx, 2)
	_, _ = client.NextValue(ctx, "orders")
	_, _ = client.BatchValues(ctx, "orders", 2)
	seen := fake.seen()
	if len(seen) != 6 {
		t.Fatalf("%d calls, want 6", len(seen))
	}
	for i, auth := range seen {
		if auth != "Bearer abc" {
			t.Errorf("call %d carried authorization %q", i, auth)
		}
	}
	plain, err := New(context.Background(), []string{fake.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	_, _ = plain.NextID(ctx)
	if auth := fake.seen()[6]; auth != "" {
		t.Fatalf("a client without a token sent authorization %q", auth)
	}
}

// A wait the call cannot use is not waited: no attempt left, or the caller's deadline nearer
// than the delay. A wait it does use ends at once at a cancellation or Close, as a pause does.
func TestAQuotaWaitEndsOrIsSkippedAsThePauseIs(t *testing.T) {
	fake := startRefuser(t, statusBlob(codes.ResourceExhausted, retryInfoOf(2, 0)))
	quick := func(t *testing.T, what string, took time.Duration) {
		t.Helper()
		if took > 500*time.Millisecond {
			t.Errorf("%s: the call took %v, not ended at once", what, took)
		}
	}

	one, err := New(context.Background(), []string{fake.addr}, WithAttempts(1))
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	start := time.Now()
	if _, err := one.NextID(context.Background()); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("no attempt left: got %v, want RESOURCE_EXHAUSTED", err)
	}
	quick(t, "no attempt left", time.Since(start))

	client, err := New(context.Background(), []string{fake.addr})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	start = time.Now()
	_, err = client.NextID(ctx)
	cancel()
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a deadline nearer than the delay: got %v, want RESOURCE_EXHAUSTED", err)
	}
	quick(t, "a deadline nearer than the delay", time.Since(start))

	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	start = time.Now()
	_, err = client.NextID(ctx)
	if status.Code(err) != codes.Canceled || !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled in the wait: got %v, want CANCELLED", err)
	}
	quick(t, "cancelled in the wait", time.Since(start))

	time.AfterFunc(200*time.Millisecond, func() { _ = client.Close() })
	start = time.Now()
	if _, err := client.NextID(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("closed in the wait: got %v, want ErrClosed", err)
	}
	quick(t, "closed in the wait", time.Since(start))
	if calls := len(fake.seen()); calls != 4 {
		t.Errorf("%d calls, want 4 (one each: none after a wait cut short)", calls)
	}
}
