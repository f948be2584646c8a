// Command conformance is the Go client's driver for the conformance suite
// (clients/conformance): it reads one JSON request a line on stdin and answers each on stdout
// once its call has ended, many at once. The ops and the error kinds are described in
// clients/conformance/drivers.py.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	snowmint "github.com/snowmint/snowmint/clients/go"
)

type request struct {
	ID         int             `json:"id"`
	Op         string          `json:"op"`
	Name       string          `json:"name"`
	Endpoints  []string        `json:"endpoints"`
	TimeoutMS  *int            `json:"timeout_ms"`
	Attempts   *int            `json:"attempts"`
	Prefetch   *int            `json:"sequence_prefetch"`
	Sequence   string          `json:"sequence"`
	Buffer     *bufferSettings `json:"buffer"`
	TLS        *tlsFiles       `json:"tls"`
	Token      *string         `json:"token"`
	Client     string          `json:"client"`
	DeadlineMS *float64        `json:"deadline_ms"`
	N          int             `json:"n"`
	EveryMS    float64         `json:"every_ms"`
	DurationMS float64         `json:"duration_ms"`
	Value      string          `json:"value"`
	Layout     *layoutSpec     `json:"layout"`
	KeyVersion *int64          `json:"key_version"`
	Text       string          `json:"text"`
}

type bufferSettings struct {
	Batch      *uint32  `json:"batch"`
	LowWater   *int     `json:"low_water"`
	MaxRefills *int     `json:"max_refills"`
	MaxAgeMS   *float64 `json:"max_age_ms"`
}

type tlsFiles struct {
	CA   string `json:"ca"`
	Cert string `json:"cert"`
	Key  string `json:"key"`
}

type layoutSpec struct {
	EpochMS      int64  `json:"epoch_ms"`
	TickMS       int64  `json:"tick_ms"`
	TimeBits     uint   `json:"time_bits"`
	WorkerBits   uint   `json:"worker_bits"`
	SequenceBits uint   `json:"sequence_bits"`
	Order        string `json:"order"`
}

type result = map[string]any

var (
	out     = json.NewEncoder(os.Stdout)
	outLock sync.Mutex
	clients sync.Map // name -> *snowmint.Client
)

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<24)
	var wg sync.WaitGroup
	for in.Scan() {
		var req request
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			fmt.Fprintln(os.Stderr, "bad request:", err)
			continue
		}
		wg.Go(func() { answer(req) })
	}
	wg.Wait()
}

func answer(req request) {
	start := time.Now()
	res, err := run(req)
	if res == nil {
		res = result{}
	}
	res["id"] = req.ID
	res["ok"] = err == nil
	if err != nil {
		res["error"] = errorOf(err)
	}
	res["elapsed_ms"] = float64(time.Since(start).Nanoseconds()) / 1e6
	outLock.Lock()
	defer outLock.Unlock()
	_ = out.Encode(res)
}

// errorOf is the suite's form of an error: its kind, gRPC code and message.
func errorOf(err error) result {
	kind := "rejected"
	var opaque *opaqueError
	switch {
	case errors.Is(err, snowmint.ErrUnavailable):
		kind = "unavailable"
	case errors.Is(err, snowmint.ErrClosed):
		kind = "closed"
	case errors.As(err, &opaque):
		return result{"kind": "opaque", "opaque_kind": opaque.kind, "code": nil, "message": err.Error()}
	case errors.Is(err, errInvalid):
		return result{"kind": "invalid", "code": nil, "message": err.Error()}
	case status.Code(err) == codes.DeadlineExceeded:
		kind = "deadline"
	}
	return result{"kind": kind, "code": codeName(status.Code(err)), "message": err.Error()}
}

// codeName is a code as the gRPC spec writes it: UNAVAILABLE, DEADLINE_EXCEEDED.
func codeName(c codes.Code) string {
	names := map[codes.Code]string{
		codes.OK: "OK", codes.Canceled: "CANCELLED", codes.Unknown: "UNKNOWN",
		codes.InvalidArgument: "INVALID_ARGUMENT", codes.DeadlineExceeded: "DEADLINE_EXCEEDED",
		codes.NotFound: "NOT_FOUND", codes.AlreadyExists: "ALREADY_EXISTS",
		codes.PermissionDenied: "PERMISSION_DENIED", codes.ResourceExhausted: "RESOURCE_EXHAUSTED",
		codes.FailedPrecondition: "FAILED_PRECONDITION", codes.Aborted: "ABORTED",
		codes.OutOfRange: "OUT_OF_RANGE", codes.Unimplemented: "UNIMPLEMENTED", codes.Internal: "INTERNAL",
		codes.Unavailable: "UNAVAILABLE", codes.DataLoss: "DATA_LOSS", codes.Unauthenticated: "UNAUTHENTICATED",
	}
	return names[c]
}

var errInvalid = errors.New("invalid")

type opaqueError struct {
	kind string
	err  error
}

func (e *opaqueError) Error() string { return e.err.Error() }

func run(req request) (result, error) {
	switch req.Op {
	case "client":
		return nil, newClient(req)
	case "decode":
		return decode(req)
	case "opaque_format", "opaque_parse":
		return opaque(req)
	}
	value, ok := clients.Load(req.Client)
	if !ok {
		return nil, fmt.Errorf("no client %q", req.Client)
	}
	client := value.(*snowmint.Client)
	ctx, cancel := callContext(req)
	defer cancel()
	switch req.Op {
	case "next_id":
		id, err := client.NextID(ctx)
		if err != nil {
			return nil, err
		}
		return result{"ids": []string{strconv.FormatUint(id, 10)}}, nil
	case "batch":
		ids, err := client.Batch(ctx, req.N)
		if err != nil {
			return nil, err
		}
		texts := make([]string, len(ids))
		for i, id := range ids {
			texts[i] = strconv.FormatUint(id, 10)
		}
		return result{"ids": texts}, nil
	case "next_value":
		v, err := client.NextValue(ctx, req.Sequence)
		if err != nil {
			return nil, err
		}
		return result{"value": strconv.FormatInt(v, 10)}, nil
	case "close":
		return nil, client.Close()
	case "burst":
		return burst(client, req.N), nil
	case "loop":
		return loop(client, req), nil
	}
	return nil, fmt.Errorf("unknown op %q", req.Op)
}

func callContext(req request) (context.Context, context.CancelFunc) {
	if req.DeadlineMS == nil {
		return context.WithCancel(context.Background())
	}
	return context.WithTimeout(context.Background(), time.Duration(*req.DeadlineMS*float64(time.Millisecond)))
}

func newClient(req request) error {
	var opts []snowmint.Option
	if req.TimeoutMS != nil {
		opts = append(opts, snowmint.WithTimeout(time.Duration(*req.TimeoutMS)*time.Millisecond))
	}
	if req.Attempts != nil {
		opts = append(opts, snowmint.WithAttempts(*req.Attempts))
	}
	if req.Prefetch != nil {
		opts = append(opts, snowmint.WithSequencePrefetch(*req.Prefetch))
	}
	if b := req.Buffer; b != nil {
		cfg := snowmint.DefaultBufferConfig()
		if b.Batch != nil {
			cfg.Batch = *b.Batch
		}
		if b.LowWater != nil {
			cfg.LowWater = *b.LowWater
		}
		if b.MaxRefills != nil {
			cfg.MaxRefills = *b.MaxRefills
		}
		if b.MaxAgeMS != nil {
			cfg.MaxAge = time.Duration(*b.MaxAgeMS * float64(time.Millisecond))
		}
		opts = append(opts, snowmint.WithBuffer(cfg))
	}
	if req.TLS != nil {
		config, err := tlsConfig(req.TLS)
		if err != nil {
			return err
		}
		opts = append(opts, snowmint.WithTLS(config))
	}
	if req.Token != nil {
		opts = append(opts, snowmint.WithToken(*req.Token))
	}
	client, err := snowmint.New(context.Background(), req.Endpoints, opts...)
	if err != nil {
		return fmt.Errorf("%w: %w", errInvalid, err) // a setting New refused
	}
	clients.Store(req.Name, client)
	return nil
}

func tlsConfig(files *tlsFiles) (*tls.Config, error) {
	ca, err := os.ReadFile(files.CA)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	config := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if files.Cert != "" {
		pair, err := tls.LoadX509KeyPair(files.Cert, files.Key)
		if err != nil {
			return nil, err
		}
		config.Certificates = []tls.Certificate{pair}
	}
	return config, nil
}

func one(client *snowmint.Client) result {
	id, err := client.NextID(context.Background())
	if err != nil {
		return result{"ok": false, "error": errorOf(err)}
	}
	return result{"ok": true, "id": strconv.FormatUint(id, 10)}
}

func burst(client *snowmint.Client, n int) result {
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { results[i] = one(client) })
	}
	wg.Wait()
	return result{"results": results}
}

func loop(client *snowmint.Client, req request) result {
	var calls [][]any
	start := time.Now()
	every := time.Duration(req.EveryMS * float64(time.Millisecond))
	for n := 0; time.Since(start) < time.Duration(req.DurationMS*float64(time.Millisecond)); n++ {
		time.Sleep(time.Until(start.Add(time.Duration(n) * every)))
		at := float64(time.Now().UnixNano()) / 1e6
		begun := time.Now()
		ctx, cancel := callContext(req)
		id, err := client.NextID(ctx)
		cancel()
		took := float64(time.Since(begun).Nanoseconds()) / 1e6
		if err != nil {
			calls = append(calls, []any{at, took, nil, errorOf(err)["kind"]})
		} else {
			calls = append(calls, []any{at, took, strconv.FormatUint(id, 10), nil})
		}
	}
	return result{"calls": calls}
}

func decode(req request) (result, error) {
	spec := req.Layout
	order := snowmint.WorkerSequence
	if spec.Order == "sequence_worker" {
		order = snowmint.SequenceWorker
	}
	layout := snowmint.Layout{Name: "test", EpochMS: spec.EpochMS, TickMS: spec.TickMS, TimeBits: spec.TimeBits,
		WorkerBits: spec.WorkerBits, SequenceBits: spec.SequenceBits, Order: order}
	id, err := strconv.ParseUint(req.Value, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errInvalid, err)
	}
	d, err := snowmint.Decode(id, layout)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errInvalid, err)
	}
	return result{
		"unix_ms": strconv.FormatInt(d.UnixMS, 10), "tick": strconv.FormatUint(d.Tick, 10),
		"worker_id": d.WorkerID, "sequence": d.Sequence, "time": d.Time().Format("2006-01-02T15:04:05.000Z"),
	}, nil
}

func opaque(req request) (result, error) {
	kindOf := func(err error) error {
		for _, k := range []struct {
			err  error
			kind string
		}{
			{snowmint.ErrOpaqueCharacter, "character"}, {snowmint.ErrOpaqueLength, "length"},
			{snowmint.ErrOpaqueRange, "range"}, {snowmint.ErrOpaqueVersion, "version"},
		} {
			if errors.Is(err, k.err) {
				return &opaqueError{kind: k.kind, err: err}
			}
		}
		return err
	}
	if req.Op == "opaque_format" {
		value, err := strconv.ParseUint(req.Value, 10, 64)
		if err != nil {
			return nil, &opaqueError{kind: "range", err: err}
		}
		o, err := snowmint.NewOpaqueID(uint32(*req.KeyVersion), value)
		if err != nil {
			return nil, kindOf(err)
		}
		return result{"text": o.String()}, nil
	}
	o, err := snowmint.ParseOpaqueID(req.Text)
	if err != nil {
		return nil, kindOf(err)
	}
	return result{"key_version": o.KeyVersion, "value": strconv.FormatUint(o.Value, 10)}, nil
}
