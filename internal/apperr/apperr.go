// Package apperr is the service's one error vocabulary: a stable code and a
// message for clients, mapped to an HTTP status in exactly one place.
package apperr

import (
	"errors"
	"fmt"
	"net/http"
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

// Wrap returns an Error that keeps cause for the logs.
func Wrap(cause error, code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Err: cause}
}

// Status maps a code to its HTTP status: the only such mapping.
func Status(code Code) int {
	switch code {
	case CodeMissingSignature, CodeInvalidSignature, CodeTimestampTolerance, CodeInvalidEvent, CodeInvalidParameter:
		return http.StatusBadRequest
	case CodePayloadTooLarge:
		return http.StatusRequestEntityTooLarge
	case CodeUnauthorized:
		return http.StatusUnauthorized
	case CodeTooManyRequests:
		return http.StatusTooManyRequests
	case CodeLivemode:
		return http.StatusForbidden
	case CodeNotFound:
		return http.StatusNotFound
	case CodeConflict:
		return http.StatusConflict
	case CodeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case CodePaymentFailed:
		return http.StatusPaymentRequired
	case CodeUpstream:
		return http.StatusBadGateway
	case CodeUnavailable:
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
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
