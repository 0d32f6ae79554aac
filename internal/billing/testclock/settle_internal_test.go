package testclock

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
)

// A bank debit settles 4 business days (Monday to Friday) after the day it
// was sent (docs/billing.md, Test clocks; Stripe documents up to 4).
func TestSettleDateIsFourBusinessDaysLater(t *testing.T) {
	for _, tc := range []struct{ sent, settles string }{
		{"2027-01-11", "2027-01-15"}, // Monday: Friday
		{"2027-01-13", "2027-01-19"}, // Wednesday: Tuesday
		{"2027-01-15", "2027-01-21"}, // Friday: Thursday
		{"2027-01-16", "2027-01-21"}, // Saturday: Thursday
		{"2027-01-10", "2027-01-14"}, // Sunday: Thursday
		{"2027-12-30", "2028-01-05"}, // Thursday, over the year's end
		{"2028-02-28", "2028-03-03"}, // Monday, over a leap day
	} {
		assert.Equal(t, tc.settles, settleDate(dates.MustParse(tc.sent)).String(), tc.sent)
	}
}
