package model

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A run that was not OK says why in words (counters alone do not tell an
// operator what to fix): a charge with no answer because Stripe
// could not be reached is "Stripe unreachable: …", an answer that was an
// error keeps what it was; the same failure seen twice (by the attempt,
// then by its entry) is one cause; at most MaxCauses are kept.
func TestReportCauses(t *testing.T) {
	refused := &url.Error{Op: "Post", URL: "http://127.0.0.1:1/v1/payment_intents",
		Err: &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}}
	answered := errors.New(`create payment intent: {"status":500,"message":"internal error"}`)
	for _, tc := range []struct {
		name string
		errs []error
		want []string
	}{
		{"unreachable", []error{fmt.Errorf("create payment intent: %w", refused)}, []string{"Stripe unreachable: create payment intent: Post"}},
		{"a timeout", []error{fmt.Errorf("charge: %w", context.DeadlineExceeded)}, []string{"Stripe unreachable: charge: context deadline exceeded"}},
		{"an answer that was an error", []error{answered}, []string{"charge of sub-1 2024-01-02: outcome unknown: create payment intent: {"}},
		{"one failure seen twice", []error{answered, fmt.Errorf("charge sub-1 2024-01-02: %w", answered)}, []string{"charge of sub-1"}},
		{"at most three", []error{errors.New("a"), errors.New("b"), errors.New("c"), errors.New("d")}, []string{"a", "b", "c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r Report
			for _, err := range tc.errs {
				r.Because("charge of sub-1 2024-01-02: outcome unknown", err)
			}
			assert.Len(t, r.Causes, len(tc.want), "%q", r.Causes)
			for i, w := range tc.want {
				if i < len(r.Causes) {
					assert.True(t, strings.HasPrefix(r.Causes[i], w) || strings.HasSuffix(r.Causes[i], ": "+w), "%q does not start with %q", r.Causes[i], w)
				}
			}
		})
	}
}
