package incidents_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/failcause"
	"github.com/stripe-payments/stripe-payments/internal/incidents"
)

// repoFile reads a file by its path from the module root (tests run in
// their package's directory).
func repoFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", filepath.FromSlash(path)))
	require.NoError(t, err, "%s must exist", path)
	return string(b)
}

// Every cause class Classify can name, in every kind it occurs in, has a
// human title, a line of what to do and a runbook (or docs page) that
// exists; the title never shows the raw class.
func TestGuideForEveryClass(t *testing.T) {
	classes := failcause.Classes()
	require.Contains(t, classes, "stripe_unreachable")
	require.Contains(t, classes, "stripe_invalid_request_error")
	require.Contains(t, classes, "unknown")
	type variant struct {
		kind  incidents.Kind
		cause string
	}
	var all []variant
	for _, c := range classes {
		all = append(all, variant{incidents.KindEvent, c}, variant{incidents.KindEvent, "rejected." + c},
			variant{incidents.KindEvent, "hydration." + c}, variant{incidents.KindDelivery, c}, variant{incidents.KindBilling, c})
	}
	all = append(all, variant{incidents.KindEvent, "hydration.pending"},
		variant{incidents.KindBilling, incidents.CauseChargeOutcomeUnknown},
		variant{incidents.KindBilling, incidents.CauseRunEntriesFailed},
		variant{incidents.KindBilling, incidents.CauseRunAccountsLocked})
	for _, v := range all {
		t.Run(string(v.kind)+"/"+v.cause, func(t *testing.T) {
			g := incidents.Describe(incidents.Incident{Kind: v.kind, Cause: v.cause})
			assert.NotEmpty(t, g.Title)
			assert.NotContains(t, g.Title, v.cause, "the title is words, not the class")
			assert.NotContains(t, g.Title, "_", "the title is words, not the class")
			assert.NotEmpty(t, g.Action)
			require.True(t, strings.HasPrefix(g.Runbook, "docs/"), g.Runbook)
			assert.NotEmpty(t, repoFile(t, g.Runbook))
		})
	}
}

// Replay is offered only where a replay can succeed.
func TestGuideReplayableOnlyWhereAReplayCanSucceed(t *testing.T) {
	cases := []struct {
		name       string
		inc        incidents.Incident
		replayable bool
		runbook    string
	}{
		{"failed event, Stripe down", incidents.Incident{Kind: incidents.KindEvent, Cause: "stripe_unreachable"}, true, "docs/runbooks/StripePaymentsEventsFailing.md"},
		{"failed event, unclassified", incidents.Incident{Kind: incidents.KindEvent, Cause: "other:boom <id>"}, true, "docs/runbooks/StripePaymentsEventsFailing.md"},
		{"rejected event", incidents.Incident{Kind: incidents.KindEvent, Cause: "rejected.other:apply event <id>: event object cannot be processed"}, false, "docs/runbooks/StripePaymentsEventRejected.md"},
		{"rejected, undecodable", incidents.Incident{Kind: incidents.KindEvent, Cause: "rejected.invalid_payload"}, false, "docs/runbooks/StripePaymentsEventRejected.md"},
		{"thin event pending", incidents.Incident{Kind: incidents.KindEvent, Cause: "hydration.pending"}, false, "docs/runbooks/StripePaymentsThinHydrationBacklog.md"},
		{"thin event failing", incidents.Incident{Kind: incidents.KindEvent, Cause: "hydration.stripe_rate_limited"}, false, "docs/runbooks/StripePaymentsThinHydrationBacklog.md"},
		{"dead letters", incidents.Incident{Kind: incidents.KindDelivery, Cause: "other:receiver answered <n>"}, true, "docs/runbooks/StripePaymentsOutboxDeadLetters.md"},
		{"failed billing run", incidents.Incident{Kind: incidents.KindBilling, Cause: "stripe_unreachable"}, false, "docs/runbooks/StripePaymentsBillingRunFailed.md"},
		{"unknown outcomes", incidents.Incident{Kind: incidents.KindBilling, Cause: incidents.CauseChargeOutcomeUnknown}, false, "docs/runbooks/StripePaymentsBillingUnresolvedCharges.md"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := incidents.Describe(tc.inc)
			assert.Equal(t, tc.replayable, g.Replayable)
			assert.Equal(t, tc.runbook, g.Runbook)
		})
	}
	// A rejection says a replay would be rejected again, and what fixes it.
	g := incidents.Describe(incidents.Incident{Kind: incidents.KindEvent, Cause: "rejected.other:boom"})
	assert.Contains(t, g.Action, "rejected again")
	assert.Contains(t, g.Action, "fix")
}

// An unclassified cause gets a generic title that quotes the normalised
// message whole (cut only between words, as Classify cut it).
func TestGuideUnclassifiedTitle(t *testing.T) {
	cause := failcause.Classify(`apply event evt-bad-1: event object cannot be processed: payment intent id "i/d" is not a PaymentIntent id, and the invoice it names has no subscription, nor any line with a price`)
	g := incidents.Describe(incidents.Incident{Kind: incidents.KindEvent, Cause: "rejected." + cause})
	assert.True(t, strings.HasPrefix(g.Title, "Rejected: payment intent id <v> is not a PaymentIntent id, and the invoice it names has no subscription"), "the reason, without the wrappers that say it was rejected: %q", g.Title)
	assert.NotContains(t, g.Title, "other:")
	// A cause cut by Classify keeps its mark.
	long := failcause.Classify("apply event evt_1: event object cannot be processed: " + strings.Repeat("the invoice names a subscription whose schedule overlaps ", 4))
	g = incidents.Describe(incidents.Incident{Kind: incidents.KindEvent, Cause: "rejected." + long})
	assert.True(t, strings.HasSuffix(g.Title, "…"), g.Title)
	words := map[string]bool{"the": true, "invoice": true, "names": true, "a": true, "subscription": true, "whose": true, "schedule": true, "overlaps": true}
	for _, w := range strings.Fields(strings.TrimPrefix(strings.TrimSuffix(g.Title, "…"), "Rejected: ")) {
		assert.True(t, words[w], "cut between words: %q in %q", w, g.Title)
	}
}
