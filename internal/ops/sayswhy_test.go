package ops

import (
	"bytes"
	"html/template"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/replay"
)

// A bulk replay whose items failed again says why (the cause
// their incident still groups them under), and says nothing of the kind
// when none failed.
func TestReplayPageSaysWhyItemsFailedAgain(t *testing.T) {
	c := &Console{pages: map[string]*template.Template{}}
	require.NoError(t, c.parse())
	for _, tc := range []struct {
		name string
		d    replayData
		want []string
		not  []string
	}{
		{"failed again, with the incident's cause", replayData{Replay: replay.Replay{ID: "rpl_1", Status: "done", Matched: 3, Done: 3, Applied: 1, Failed: 2,
			Filter: replay.Filter{Incident: "inc_1"}}, FailedCause: "stripe.invalid_request_error", FailedKind: "event", FailedSamples: []string{"evt_1"}},
			[]string{"Why 2 failed again", "stripe.invalid_request_error", `href="/ops/events/evt_1"`}, nil},
		{"failed again, no incident", replayData{Replay: replay.Replay{ID: "rpl_2", Status: "done", Matched: 1, Done: 1, Failed: 1}},
			[]string{"Why 1 failed again", "/ops/problems"}, nil},
		{"none failed", replayData{Replay: replay.Replay{ID: "rpl_3", Status: "done", Matched: 1, Done: 1, Applied: 1}},
			nil, []string{"failed again"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			require.NoError(t, c.pages["replay"].ExecuteTemplate(&buf, "layout", view{Title: "Replay", Data: tc.d}))
			for _, w := range tc.want {
				assert.Contains(t, buf.String(), w)
			}
			for _, n := range tc.not {
				assert.NotContains(t, buf.String(), n)
			}
		})
	}
}

// Each history entry says what changed, in words, so an operator need
// not decode field names.
func TestDescribeChange(t *testing.T) {
	day := dates.MustParse("2024-01-10")
	for _, tc := range []struct {
		e    billing.HistoryEntry
		want string
	}{
		{billing.HistoryEntry{UpdatedEvent: "paused", Status: billing.Paused}, "paused"},
		{billing.HistoryEntry{UpdatedEvent: "resumed", Status: billing.Scheduled}, "resumed"},
		{billing.HistoryEntry{UpdatedEvent: "amount-changed", Amount: 2599, Status: billing.Scheduled}, "amount changed to 25.99 USD"},
		{billing.HistoryEntry{UpdatedEvent: "rule-changed-to-2024-02-12", Status: billing.Cancelled}, "rule changed: period moved to 2024-02-12"},
		{billing.HistoryEntry{UpdatedEvent: "rule-changed-kept", Status: billing.Scheduled}, "rule changed"},
		{billing.HistoryEntry{UpdatedEvent: "charge-date-moved-to-2024-01-12"}, "charge date moved to 2024-01-12"},
		{billing.HistoryEntry{UpdatedEvent: billing.UpdatedEventReactivated, Status: billing.Scheduled}, "reactivated"},
		{billing.HistoryEntry{UpdatedEvent: "completed", Status: billing.Completed}, "paid"},
		{billing.HistoryEntry{Status: billing.Error, Attempts: 2, Error: "card_declined"}, "declined (attempt 2)"},
		{billing.HistoryEntry{Status: billing.Error, Attempts: 1, Error: "not retried: lost_card (card_declined)"}, "declined, not retried: lost_card"},
		{billing.HistoryEntry{UpdatedEvent: "waived", Status: billing.Waived}, "waived"},
		{billing.HistoryEntry{UpdatedEvent: "cancelled", Status: billing.Cancelled}, "cancelled"},
	} {
		tc.e.BillingDate, tc.e.LastRunDate = day, time.Date(2024, 1, 10, 0, 0, 0, 0, time.UTC)
		assert.Equal(t, tc.want, describeChange(tc.e, "usd"), "%+v", tc.e)
	}
}

// An attempt whose outcome is unknown hides every action on the
// subscription page (any of them could charge twice) and says why; the account page lists it.
func TestUnknownOutcomeHidesTheActions(t *testing.T) {
	c := &Console{pages: map[string]*template.Template{}}
	require.NoError(t, c.parse())
	sub := billing.Subscription{AccountID: "acc-1", SubscriptionID: "sub-1", Status: billing.SubActive}
	since := time.Date(2024, 1, 10, 6, 0, 0, 0, time.UTC)
	p := billing.Period{AccountID: "acc-1", SubscriptionID: "sub-1", BillingDate: dates.MustParse("2024-01-10"), Status: billing.Error,
		Attempts: 1, InFlightKey: "billing:acc-1:sub-1:2024-01-10:2", InFlightAt: since}
	for _, tc := range []struct {
		name     string
		inFlight bool
	}{{"in flight", true}, {"settled", false}} {
		t.Run(tc.name, func(t *testing.T) {
			q := p
			d := subscriptionData{Sub: sub, Unpaid: true, Waivable: []billing.Period{q}}
			if tc.inFlight {
				d.InFlight = []inFlight{inFlightOf(q)}
			} else {
				q.InFlightKey, q.InFlightAt = "", time.Time{}
			}
			d.Periods = []billing.Period{q}
			var buf bytes.Buffer
			require.NoError(t, c.pages["subscription"].ExecuteTemplate(&buf, "layout", view{Title: "Subscription", Data: d}))
			page := buf.String()
			for _, id := range []string{`id="pause"`, `id="waive"`, `id="pay"`, `id="cancel"`} {
				assert.Equal(t, !tc.inFlight, strings.Contains(page, id), id)
			}
			assert.Equal(t, tc.inFlight, strings.Contains(page, "Outcome unknown: the next collection asks Stripe first"))
			assert.Equal(t, tc.inFlight, strings.Contains(page, "billing:acc-1:sub-1:2024-01-10:2"))
			assert.Equal(t, tc.inFlight, strings.Contains(page, "attempt 2 outcome unknown"))
		})
	}
}
