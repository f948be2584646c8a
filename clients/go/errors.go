package snowmint

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrUnavailable is matched (errors.Is) by the error a call returns when every attempt failed
// over: refused, failed in transport, or past its own timeout; or, with a buffer, when no IDs
// arrived in time. It is retriable: the servers may mint again a moment later, and a refusal
// never means an ID was issued twice. Its gRPC code (status.Code) is always Unavailable; the
// last attempt's error is wrapped too (errors.Unwrap), for the log.
var ErrUnavailable = errors.New("snowmint: every endpoint refused or failed")

// ErrClosed is returned by calls on a closed Client, and by calls that were waiting on it
// when it was closed.
var ErrClosed = errors.New("snowmint: client closed")

// callError is an error the client makes itself, with the gRPC status a caller speaking gRPC
// codes expects: code Unavailable for ErrUnavailable, DeadlineExceeded or Canceled for the
// caller's own context.
type callError struct {
	code  codes.Code
	msg   string
	kind  error // what errors.Is matches, besides the cause
	cause error
}

func (e *callError) Error() string              { return e.msg }
func (e *callError) GRPCStatus() *status.Status { return status.New(e.code, e.msg) }
func (e *callError) Is(target error) bool       { return e.kind != nil && target == e.kind }
func (e *callError) Unwrap() error              { return e.cause }

// unavailable is the error of a call whose every attempt failed over; last is the last
// attempt's error, or nil.
func unavailable(why string, last error) error {
	msg := "snowmint: every endpoint refused or failed: " + why
	if last != nil {
		msg = fmt.Sprintf("%s; the last: %v", msg, last)
	}
	return &callError{code: codes.Unavailable, msg: msg, kind: ErrUnavailable, cause: last}
}

// contextError is the error of a call whose context ended: DeadlineExceeded for its deadline
// (errors.Is(err, context.DeadlineExceeded) holds), Canceled for a cancellation.
func contextError(ctx context.Context) error {
	err := ctx.Err()
	code := codes.Canceled
	if errors.Is(err, context.DeadlineExceeded) {
		code = codes.DeadlineExceeded
	}
	return &callError{code: code, msg: "snowmint: the call's context ended: " + err.Error(), cause: err}
}
