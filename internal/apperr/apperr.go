// Package apperr is the service's one error vocabulary: a stable code and a
// message for clients, mapped to an HTTP status in exactly one place.
package apperr

import (
	"errors"
	"fmt"
)

// Code is a stable, machine-readable error code.
type Code string

const (
	CodeMissingSignature   Code = "missing_signature"
	CodeInvalidSignature   Code = "invalid_signature"
	CodeTimestampTolerance Code = "timestamp_out_of_tolerance"
	CodeInvalidEvent       Code = "invalid_event"
	CodePayloadTooLarge    Code = "payload_too_large"
	CodeUnauthorized       Code = "unauthorized"
	// CodeTooManyRequests: too many failed authentications from the
	// client's address (or in total); 429 with Retry-After.
	CodeTooManyRequests Code = "too_many_requests"
	// CodeLivemode: a test-mode feature (test clocks) asked of a service
	// running on a live Stripe key.
	CodeLivemode         Code = "livemode"
	CodeNotFound         Code = "not_found"
	CodeInvalidParameter Code = "invalid_parameter"
	CodeConflict         Code = "conflict"
	CodeMethodNotAllowed Code = "method_not_allowed"
	CodeUnavailable      Code = "unavailable"
	CodePaymentFailed    Code = "payment_failed"
	CodeUpstream         Code = "upstream_error"
	CodeInternal         Code = "internal"
)

// Error is an error a client may see.
type Error struct {
	Code    Code
	Message string
	Err     error // the cause, for logs only
	// kind: this Error is one of the kind sentinels below, which errors.Is
	// matches by code rather than by identity.
	kind bool
}

// The kinds: errors.Is(err, ErrNotFound) is true for every *Error of code
// CodeNotFound in err's chain, whichever package made it. Packages return
// New(CodeNotFound, "event %s not found", id) and say what in the message;
// they declare a sentinel of their own (apperr.New at package level, matched
// by identity) only when callers must tell it apart from other errors of
// its code, as billing does for ErrConflict (a concurrent change: re-read
// and retry) against ErrLocked or ErrAttemptInFlight. ErrConflict matches
// all of them: branch on it only where any conflict means the same.
var (
	ErrNotFound = &Error{Code: CodeNotFound, Message: "not found", kind: true}
	ErrInvalid  = &Error{Code: CodeInvalidParameter, Message: "invalid request", kind: true}
	ErrConflict = &Error{Code: CodeConflict, Message: "conflict", kind: true}
)

// Is matches the kind sentinels by code; any other target only by identity
// (errors.Is checks that itself).
func (e *Error) Is(target error) bool {
	k, ok := target.(*Error)
	return ok && k.kind && k.Code == e.Code
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// New returns an Error.
func New(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Invalid is a request that breaks a rule (ErrInvalid: 400
// invalid_parameter); the message says which. Every domain package's
// refusals of bad input are made here.
func Invalid(format string, args ...any) error {
	return New(CodeInvalidParameter, format, args...)
}

// Wrap returns an Error that keeps cause for the logs.
func Wrap(cause error, code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Err: cause}
}

// Status maps a code to its HTTP status: the only such mapping. Numbers,
// not net/http's names, so that the domain packages that return these
// errors do not import net/http through apperr (internal/depcheck forbids
// it to some; TestStatus pins every number against net/http's names).
func Status(code Code) int {
	switch code {
	case CodeMissingSignature, CodeInvalidSignature, CodeTimestampTolerance, CodeInvalidEvent, CodeInvalidParameter:
		return 400
	case CodePayloadTooLarge:
		return 413
	case CodeUnauthorized:
		return 401
	case CodeTooManyRequests:
		return 429
	case CodeLivemode:
		return 403
	case CodeNotFound:
		return 404
	case CodeConflict:
		return 409
	case CodeMethodNotAllowed:
		return 405
	case CodePaymentFailed:
		return 402
	case CodeUpstream:
		return 502
	case CodeUnavailable:
		return 503
	default:
		return 500
	}
}

// Ensure returns err as it is when its chain carries an *Error (the code
// its package chose), else err wrapped as code: what a caller answers for
// an error nobody classified (a store that is down is CodeUnavailable).
// nil stays nil.
func Ensure(err error, code Code, format string, args ...any) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	return Wrap(err, code, format, args...)
}

// CodeOf is the code of the first *Error in err's chain, "" when none.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// From finds the Error in err's chain; anything else is internal.
func From(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: CodeInternal, Message: "internal error", Err: err}
}

// Body is the JSON shape of an error response.
type Body struct {
	Error BodyError `json:"error"`
}

// BodyError is the inner object of Body.
type BodyError struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
}
