package email_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/stripe-payments/stripe-payments/internal/email"
)

// Errors that become dead letters' last_error and log lines carry no email,
// since those are kept and read where personal data must not spread.
func TestErrorsCarryNoAddress(t *testing.T) {
	tests := []struct{ in, want string }{
		{"Email address is not verified. The following identities failed the check in region US-EAST-1: payer@example.com",
			"Email address is not verified. The following identities failed the check in region US-EAST-1: [email]"},
		{"rejected <First.Last+tag@sub.example.co.uk>, and a@b.c", "rejected <[email]>, and [email]"},
		{"no address here", "no address here"},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, email.RedactAddresses(tc.in))
	}
	err := email.Message{To: "not-an-address.example.com", Subject: "s", Text: "t"}.Validate()
	assert.Error(t, err)
	assert.False(t, strings.Contains(err.Error(), "not-an-address.example.com"), err.Error())
}
