// Package snowmint is the Go client of snowmint, a service that mints unique, roughly
// time-sorted 64-bit IDs, and UUIDv7s made from them.
//
// The client follows the contract in clients/README.md: it talks to one or several servers,
// moves a call to the next server when one refuses (gRPC UNAVAILABLE) or cannot be reached,
// returns every other error as it is, and can keep a local buffer of prefetched IDs. IDs are
// uint64 values; a snowmint ID never has its top bit set, so it also fits an int64.
//
//	client, err := snowmint.New(ctx, []string{"10.0.0.1:50051", "10.0.0.2:50051"},
//		snowmint.WithBuffer(snowmint.DefaultBufferConfig()))
//	if err != nil { ... }
//	defer client.Close()
//	id, err := client.NextID(ctx)
//
// IDs: NextID (buffered when the client has a buffer) and Batch. Decode splits an ID into its
// time, worker and sequence with a Layout, locally, with no call.
//
// UUIDs: NextUUID and BatchUUIDs return UUIDv7s (RFC 9562) of type UUID, each made from one
// newly minted ID, so they are unique as the IDs are and a server's UUIDs strictly increase;
// they fail over as Batch does and are never buffered. UUID.String writes the canonical
// lowercase 8-4-4-4-12 form and ParseUUID reads it strictly (either case, nothing else). A
// Layout's DecodeUUID gives back the ID a UUID was made from, with its time, slot, sequence
// and random tail, or a *UUIDError whose Kind says why snowmint did not mint it:
//
//	u, err := client.NextUUID(ctx)
//	if err != nil { ... }
//	fmt.Println(u) // 019b76da-a801-7000-80c0-0004ddc55174
//	d, err := snowmint.DefaultLayout().DecodeUUID(u)
//	// d.ID, d.UnixMS, d.Slot, d.Sequence, d.Random
//
// WithToken gives every call a bearer token (gRPC metadata "authorization: Bearer <token>"),
// for a server with a tenants' policy. A call refused over its tenant's rate
// (RESOURCE_EXHAUSTED with a google.rpc.RetryInfo) waits the delay the server gives and tries
// the same server again, when it has an attempt left and its deadline is further than that.
//
// OpaqueID reads and writes the string form of the opaque public IDs of a server with an
// opaque key.
//
// A Client is safe for use by many goroutines at once.
package snowmint

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/snowmint/snowmint/clients/go/internal/snowmintv1"
)

// DefaultTimeout is the deadline of each attempt to one server unless WithTimeout says
// otherwise.
const DefaultTimeout = time.Second

// BufferConfig sets the local buffer of prefetched IDs (see WithBuffer). The buffer refills at
// the rate IDs are used, within these bounds, by the rule of clients/README.md.
type BufferConfig struct {
	// Batch is the most IDs one refill asks for (one BatchIds call).
	Batch uint32
	// LowWater is the most IDs the buffer keeps ahead of use: buffered, and asked for by
	// refills under way.
	LowWater int
	// MaxRefills is how many refills may be in flight at once, to keep up with heavy use.
	MaxRefills int
	// MaxAge drops a buffered batch unused once it is this old, counted from when its refill
	// was sent, so the IDs handed out stay close to the time they are used and roughly sorted
	// across clients.
	MaxAge time.Duration
}

// DefaultBufferConfig is the buffer every client has by default: refills of at most 4,096
// IDs, at most 8,192 IDs ahead, up to 3 refills in flight, batches dropped after 1 s.
func DefaultBufferConfig() BufferConfig {
	return BufferConfig{Batch: 4096, LowWater: 8192, MaxRefills: 3, MaxAge: time.Second}
}

// reconnect keeps grpc-go from holding a connection that failed in its reconnect backoff
// (up to 120 s by default, failing every call to it meanwhile) for more than half a second
// (plus a fifth of jitter): a server that comes back is used again within a second.
var reconnect = grpc.ConnectParams{
	Backoff: backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2,
		MaxDelay: 500 * time.Millisecond},
	MinConnectTimeout: 20 * time.Second,
}

// Option configures New.
type Option func(*config)

type config struct {
	timeout     time.Duration
	attempts    int
	buffer      *BufferConfig
	prefetch    int
	tls         *tls.Config
	token       *string
	dialOptions []grpc.DialOption
}

// WithTimeout sets the deadline of each attempt to one server (default DefaultTimeout). A
// caller's context deadline, when earlier, bounds the whole call, failover included.
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithAttempts sets how many calls one request may make across the endpoints before it
// gives up with ErrUnavailable (default: twice the number of endpoints, at least 2).
func WithAttempts(n int) Option { return func(c *config) { c.attempts = n } }

// WithBuffer makes NextID hand out IDs from a local buffer, refilled in the background with
// BatchIds calls: one ID then costs no round trip. The IDs of a buffer are as unique as any,
// but their time is when they were fetched, not when they are used (at most MaxAge older).
func WithBuffer(cfg BufferConfig) Option { return func(c *config) { c.buffer = &cfg } }

// WithSequencePrefetch makes NextValue fetch n values of each unordered named sequence ahead,
// in one BatchValues, and hand them out one by one (default 0: off, one NextValue per call).
// n is at most MaxSequencePrefetch, the server's default --max-batch; New refuses more.
// Values still buffered when the client is closed or the process ends are a gap, never handed
// out; buffered values leave the fleet-wide order of the calls, and may wait long in an idle
// client. Ordered sequences are never buffered.
func WithSequencePrefetch(n int) Option { return func(c *config) { c.prefetch = n } }

// WithTLS sets the TLS of https:// endpoints: RootCAs to verify servers with (the system's
// roots when nil), Certificates for a server that asks for a client certificate
// (--tls-client-ca). host:port and http:// endpoints stay plain text.
func WithTLS(cfg *tls.Config) Option { return func(c *config) { c.tls = cfg } }

// WithToken makes every attempt of every call carry the bearer token token, as the gRPC
// metadata "authorization: Bearer <token>", over plain text and TLS alike (beyond loopback,
// use https:// endpoints: plain text carries the token as it is). A token is 1 to
// MaxTokenLength characters, each a visible ASCII character ('!' to '~'); New refuses any
// other, with an error that does not show it. The token appears in no error of the client's
// nor in its printed form.
func WithToken(token string) Option { return func(c *config) { c.token = &token } }

// MaxTokenLength is the longest token WithToken takes, in characters.
const MaxTokenLength = 4096

// WithDialOptions adds gRPC dial options to every connection, after the client's own (plain
// text for host:port and http:// endpoints, TLS for https://, the reconnect backoff, the
// interceptors of WithToken), so they can replace any of those or add interceptors.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(c *config) { c.dialOptions = append(c.dialOptions, opts...) }
}

// Client mints IDs from one or several snowmint servers. Make one with New, share it, and
// Close it when done.
type Client struct {
	conns    []*grpc.ClientConn
	stubs    []pb.IdServiceClient
	current  atomic.Uint64 // the endpoint calls go to first
	timeout  time.Duration
	attempts int

	// background carries the buffer's refills; Close cancels it.
	background context.Context
	stop       context.CancelFunc
	refills    sync.WaitGroup
	closeOnce  sync.Once

	buf *buffer
	// prefetch holds the named sequences' buffers, with WithSequencePrefetch above 0.
	prefetch *prefetch
}

// New makes a client of endpoints, each "host:port", "http://host:port" (plain text) or
// "https://host:port" (TLS). Connections open lazily, so New does not fail when a server is
// down. Values of ctx (outgoing gRPC metadata, for one) go with the client's background
// calls; its cancellation does not: call Close.
func New(ctx context.Context, endpoints []string, opts ...Option) (*Client, error) {
	if len(endpoints) == 0 {
		return nil, errors.New("snowmint: no endpoints given")
	}
	cfg := config{timeout: DefaultTimeout, attempts: max(2, 2*len(endpoints))}
	for _, opt := range opts {
		opt(&cfg)
	}
	if cfg.timeout <= 0 {
		return nil, fmt.Errorf("snowmint: the timeout must be positive, got %v", cfg.timeout)
	}
	if cfg.attempts < 1 {
		return nil, fmt.Errorf("snowmint: attempts must be at least 1, got %d", cfg.attempts)
	}
	if b := cfg.buffer; b != nil && (b.Batch < 1 || b.LowWater < 0 || b.MaxRefills < 1 || b.MaxAge <= 0) {
		return nil, fmt.Errorf("snowmint: invalid buffer %+v: Batch and MaxRefills must be at least 1, MaxAge positive", *b)
	}
	prefetch, err := newPrefetch(cfg.prefetch)
	if err != nil {
		return nil, err
	}
	var own []grpc.DialOption
	if cfg.token != nil {
		if err := checkToken(*cfg.token); err != nil {
			return nil, err
		}
		own = bearer(*cfg.token)
	}
	c := &Client{timeout: cfg.timeout, attempts: cfg.attempts, prefetch: prefetch}
	for _, endpoint := range endpoints {
		target, creds, err := parseEndpoint(endpoint, cfg.tls)
		if err == nil {
			var conn *grpc.ClientConn
			dial := append([]grpc.DialOption{grpc.WithTransportCredentials(creds), grpc.WithConnectParams(reconnect)},
				own...)
			dial = append(dial, cfg.dialOptions...)
			if conn, err = grpc.NewClient(target, dial...); err == nil {
				c.conns = append(c.conns, conn)
				c.stubs = append(c.stubs, pb.NewIdServiceClient(conn))
				continue
			}
		}
		_ = c.closeConns()
		return nil, fmt.Errorf("snowmint: endpoint %q: %w", endpoint, err)
	}
	c.background, c.stop = context.WithCancel(context.WithoutCancel(ctx))
	if cfg.buffer != nil {
		c.buf = newBuffer(*cfg.buffer, time.Now())
	}
	return c, nil
}

// checkToken refuses a token of WithToken that is empty, longer than MaxTokenLength or holds
// anything but visible ASCII; its error says why, never what the token is.
func checkToken(token string) error {
	if len(token) < 1 || len(token) > MaxTokenLength {
		return fmt.Errorf("snowmint: the token must be 1 to %d characters, got %d bytes", MaxTokenLength, len(token))
	}
	for i := range len(token) {
		if token[i] < '!' || token[i] > '~' {
			return fmt.Errorf("snowmint: the token must be visible ASCII characters ('!' to '~'), its byte %d is not", i)
		}
	}
	return nil
}

// bearer is the dial options that add "authorization: Bearer <token>" to the metadata of
// every call, unary or streaming: interceptors rather than per-RPC credentials, which grpc-go
// refuses on a plain-text connection when they ask for transport security.
func bearer(token string) []grpc.DialOption {
	value := "Bearer " + token
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
			invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoker(metadata.AppendToOutgoingContext(ctx, "authorization", value), method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
			streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			return streamer(metadata.AppendToOutgoingContext(ctx, "authorization", value), desc, cc, method, opts...)
		}),
	}
}

func parseEndpoint(endpoint string, tlsConfig *tls.Config) (string, credentials.TransportCredentials, error) {
	scheme, rest, found := strings.Cut(endpoint, "://")
	if !found {
		scheme, rest = "http", endpoint
	}
	if rest == "" || strings.Contains(rest, "/") {
		return "", nil, errors.New("want host:port, http://host:port or https://host:port")
	}
	switch scheme {
	case "http":
		return rest, insecure.NewCredentials(), nil
	case "https":
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if tlsConfig != nil {
			cfg = tlsConfig.Clone()
		}
		return rest, credentials.NewTLS(cfg), nil
	}
	return "", nil, fmt.Errorf("unknown scheme %q (use host:port, http:// or https://)", scheme)
}

// NextID returns one new ID: from the buffer when the client has one, otherwise from a
// NextId call. A deadline or cancellation of ctx ends the call, failover and waits included,
// with an error of code DeadlineExceeded (or Canceled) that wraps ctx.Err().
func (c *Client) NextID(ctx context.Context) (uint64, error) {
	if c.background.Err() != nil {
		return 0, ErrClosed
	}
	if c.buf != nil {
		return c.nextBuffered(ctx)
	}
	return call(ctx, c, func(ctx context.Context, stub pb.IdServiceClient) (uint64, error) {
		resp, err := stub.NextId(ctx, &pb.NextIdRequest{})
		return resp.GetId(), err
	})
}

// Batch returns n new IDs, strictly increasing, all from one server in one BatchIds call
// (n = 1 too); never from the buffer. n must be between 1 and the server's maximum batch (65,536 by default); the
// server answers any other n with INVALID_ARGUMENT, returned as it is.
func (c *Client) Batch(ctx context.Context, n int) ([]uint64, error) {
	if c.background.Err() != nil {
		return nil, ErrClosed
	}
	if n < 0 || uint64(n) > math.MaxUint32 {
		return nil, status.Errorf(codes.InvalidArgument, "snowmint: batch size %d out of range", n)
	}
	return c.batch(ctx, uint32(n))
}

func (c *Client) batch(ctx context.Context, n uint32) ([]uint64, error) {
	return call(ctx, c, func(ctx context.Context, stub pb.IdServiceClient) ([]uint64, error) {
		resp, err := stub.BatchIds(ctx, &pb.BatchIdsRequest{Count: n})
		return resp.GetIds(), err
	})
}

// NextUUID returns one new UUIDv7 (see UUID), from one NextUuid call: made from one newly
// minted ID, and above every UUID its server minted before. It is never buffered: the buffer
// holds IDs only. It fails over, retries and keeps deadlines as NextID does without a buffer,
// and an answer that is not 16 bytes is an error of code Internal.
func (c *Client) NextUUID(ctx context.Context) (UUID, error) {
	if c.background.Err() != nil {
		return UUID{}, ErrClosed
	}
	return call(ctx, c, func(ctx context.Context, stub pb.IdServiceClient) (UUID, error) {
		resp, err := stub.NextUuid(ctx, &pb.NextUuidRequest{})
		if err != nil {
			return UUID{}, err
		}
		return uuidOf(resp.GetUuid())
	})
}

// BatchUUIDs returns n new UUIDv7s, strictly increasing (byte by byte, and so by their text
// forms), all from one server in one BatchUuids call (n = 1 too); never buffered. As for
// Batch, n must be between 1 and the server's maximum batch (65,536 by default); the server
// answers any other n with INVALID_ARGUMENT, returned as it is. An answer with another
// number of UUIDs, or one that is not 16 bytes, is an error of code Internal.
func (c *Client) BatchUUIDs(ctx context.Context, n int) ([]UUID, error) {
	if c.background.Err() != nil {
		return nil, ErrClosed
	}
	if n < 0 || uint64(n) > math.MaxUint32 {
		return nil, status.Errorf(codes.InvalidArgument, "snowmint: batch size %d out of range", n)
	}
	return call(ctx, c, func(ctx context.Context, stub pb.IdServiceClient) ([]UUID, error) {
		resp, err := stub.BatchUuids(ctx, &pb.BatchUuidsRequest{Count: uint32(n)})
		if err != nil {
			return nil, err
		}
		raw := resp.GetUuids()
		if len(raw) != n {
			return nil, status.Errorf(codes.Internal, "snowmint: asked the server for %d UUIDs, it answered %d", n, len(raw))
		}
		uuids := make([]UUID, len(raw))
		for i, b := range raw {
			if uuids[i], err = uuidOf(b); err != nil {
				return nil, err
			}
		}
		return uuids, nil
	})
}

// NextValue returns the next value of the named sequence name: positive, never issued twice.
// Without WithSequencePrefetch it is one NextValue call; with it, it comes from the sequence's
// buffer when that holds one (an unordered sequence's buffer is refilled by one BatchValues,
// shared by the callers waiting; an ordered sequence is never buffered). It fails over,
// retries and keeps deadlines as NextID does without a buffer; NOT_FOUND (no such sequence)
// and OUT_OF_RANGE (used up) are returned as they are, not asked of another server.
func (c *Client) NextValue(ctx context.Context, name string) (int64, error) {
	if c.background.Err() != nil {
		return 0, ErrClosed
	}
	if c.prefetch != nil {
		return c.prefetch.nextValue(ctx, c, name)
	}
	value, _, err := c.nextValue(ctx, name)
	return value, err
}

// nextValue is one NextValue call, with whether the answer says the sequence is ordered.
func (c *Client) nextValue(ctx context.Context, name string) (int64, bool, error) {
	type answer struct {
		value   int64
		ordered bool
	}
	got, err := call(ctx, c, func(ctx context.Context, stub pb.IdServiceClient) (answer, error) {
		resp, err := stub.NextValue(ctx, &pb.NextValueRequest{Sequence: name})
		if err != nil {
			return answer{}, err
		}
		if resp.GetValue() < 1 {
			return answer{}, status.Errorf(codes.Internal, "snowmint: the server answered the value %d, not a positive one", resp.GetValue())
		}
		return answer{resp.GetValue(), resp.GetOrdered()}, nil
	})
	return got.value, got.ordered, err
}

// BatchValues returns n values of the named sequence name, increasing, all from one server
// in one BatchValues call (n = 1 too). As for Batch, n must be between 1 and the server's
// maximum batch; the server answers any other n with INVALID_ARGUMENT, returned as it is. An
// answer with another number of values, or values not positive and increasing, is an error
// of code Internal.
func (c *Client) BatchValues(ctx context.Context, name string, n int) ([]int64, error) {
	if c.background.Err() != nil {
		return nil, ErrClosed
	}
	values, _, err := c.batchValues(ctx, name, n)
	return values, err
}

// batchValues is one BatchValues call, with whether the answer says the sequence is ordered.
func (c *Client) batchValues(ctx context.Context, name string, n int) ([]int64, bool, error) {
	if n < 0 || uint64(n) > math.MaxUint32 {
		return nil, false, status.Errorf(codes.InvalidArgument, "snowmint: batch size %d out of range", n)
	}
	type answer struct {
		values  []int64
		ordered bool
	}
	got, err := call(ctx, c, func(ctx context.Context, stub pb.IdServiceClient) (answer, error) {
		resp, err := stub.BatchValues(ctx, &pb.BatchValuesRequest{Sequence: name, Count: uint32(n)})
		if err != nil {
			return answer{}, err
		}
		values := resp.GetValues()
		if len(values) != n {
			return answer{}, status.Errorf(codes.Internal, "snowmint: asked the server for %d values, it answered %d", n, len(values))
		}
		for i, v := range values {
			if v < 1 || (i > 0 && v <= values[i-1]) {
				return answer{}, status.Errorf(codes.Internal, "snowmint: the server answered values not positive and increasing")
			}
		}
		return answer{values, resp.GetOrdered()}, nil
	})
	return got.values, got.ordered, err
}

// uuidOf is the UUID of a server's answer: 16 bytes, or an error of code Internal.
func uuidOf(b []byte) (UUID, error) {
	var u UUID
	if len(b) != len(u) {
		return u, status.Errorf(codes.Internal, "snowmint: the server answered a UUID of %d bytes, not 16", len(b))
	}
	copy(u[:], b)
	return u, nil
}

// call makes one request, moving to the next endpoint when a server refuses (UNAVAILABLE),
// cannot be reached, or does not answer within the attempt's deadline. A refusal over the
// tenant's rate that says how long to wait (RESOURCE_EXHAUSTED with a RetryInfo) is waited
// out, in place of the pause, and tried again on the same endpoint, when an attempt is left
// and the caller's deadline is further than the wait; every other error returns at once. The
// caller's own deadline and cancellation end the call and move nothing, as does Close.
func call[T any](ctx context.Context, c *Client, do func(context.Context, pb.IdServiceClient) (T, error)) (T, error) {
	var zero T
	var last error
	n := len(c.stubs)
	var i uint64                   // the endpoint of the attempt
	quotaWait := time.Duration(-1) // the wait a quota refusal asked for before this attempt
	for attempt := range c.attempts {
		pause := pauseBefore(attempt, n)
		again := quotaWait >= 0 // on endpoint i, whose quota refused the last attempt
		if again {
			pause, quotaWait = quotaWait, -1
		}
		if pause > 0 {
			timer := time.NewTimer(pause)
			select {
			case <-timer.C:
			case <-ctx.Done():
				timer.Stop()
				return zero, contextError(ctx)
			case <-c.background.Done():
				timer.Stop()
				return zero, ErrClosed
			}
		}
		if ctx.Err() != nil {
			return zero, contextError(ctx)
		}
		if c.background.Err() != nil {
			return zero, ErrClosed
		}
		if !again {
			i = c.current.Load()
		}
		attemptCtx, cancel := context.WithTimeout(ctx, c.timeout)
		result, err := do(attemptCtx, c.stubs[i])
		cancel()
		switch {
		case err == nil:
			return result, nil
		case c.background.Err() != nil:
			return zero, ErrClosed // Close cut the call: no answer of a server's
		case ctx.Err() != nil:
			return zero, contextError(ctx)
		case status.Code(err) == codes.ResourceExhausted:
			wait, ok := retryDelay(err)
			if !ok || attempt == c.attempts-1 || !before(ctx, wait) {
				return zero, err // no wait it could use: as it is
			}
			quotaWait = wait
			continue // the same endpoint: the quota is the tenant's at this server
		case !failsOver(err):
			return zero, err
		}
		last = err
		// Move on from this endpoint, unless another call already did.
		c.current.CompareAndSwap(i, (i+1)%uint64(n))
	}
	return zero, unavailable(fmt.Sprintf("%d attempts over %d endpoints", c.attempts, n), last)
}

// pauseBefore is the pause before attempt k (from 0) of a call over n endpoints: none until
// every endpoint was tried in the call, then 10 ms doubling up to 320 ms.
func pauseBefore(k, n int) time.Duration {
	if k < n || k == 0 {
		return 0
	}
	return 10 * time.Millisecond << min(k-n, 5)
}

// retryDelay is the wait a RESOURCE_EXHAUSTED asks for in its status details: the
// retry_delay of its google.rpc.RetryInfo, when it has one that grpc-go could read (details
// it could not are dropped, and an Any it cannot unmarshal is skipped) with a valid delay of
// zero or more.
func retryDelay(err error) (time.Duration, bool) {
	st, ok := status.FromError(err)
	if !ok {
		return 0, false
	}
	for _, detail := range st.Details() {
		if info, ok := detail.(*errdetails.RetryInfo); ok {
			delay := info.GetRetryDelay()
			if delay == nil || delay.CheckValid() != nil || delay.AsDuration() < 0 {
				return 0, false
			}
			return delay.AsDuration(), true
		}
	}
	return 0, false
}

// before tells whether ctx's deadline, if it has one, is further than d from now.
func before(ctx context.Context, d time.Duration) bool {
	deadline, ok := ctx.Deadline()
	return !ok || time.Until(deadline) > d
}

// failsOver tells whether another endpoint may succeed where this one failed: a refusal or a
// transport failure (grpc-go reports both as Unavailable), or no answer within the attempt's
// deadline. The caller's own context is still live here, so a DEADLINE_EXCEEDED is the
// attempt's: the server did not answer in time.
func failsOver(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}

// Close ends the client at once: the buffer stops refilling, every call waiting on the
// client (on an empty buffer, or in an attempt on a server) returns ErrClosed, the
// connections close, and every later call returns ErrClosed. Buffered IDs and sequence
// values are dropped, never handed out (a gap). It does not wait for a server, and calling it again does nothing.
func (c *Client) Close() error {
	var err error
	c.closeOnce.Do(func() {
		if c.buf != nil {
			c.buf.mu.Lock()
			c.stop()
			c.buf.stopTimerLocked()
			c.buf.mu.Unlock()
		} else {
			c.stop()
		}
		err = c.closeConns()
		c.refills.Wait()
	})
	return err
}

func (c *Client) closeConns() error {
	var errs []error
	for _, conn := range c.conns {
		errs = append(errs, conn.Close())
	}
	return errors.Join(errs...)
}
