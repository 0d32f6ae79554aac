package localstripe_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/localstripe"
)

// POST /_local/dashboard/{id} changes an object as Stripe's Dashboard would
// and sends no event (the drift a reconciliation finds); the API then
// answers the object as changed, retrieved and listed; a change it does
// not simulate is refused and changes nothing.
func TestDashboardChangeSendsNoEvent(t *testing.T) {
	s, c := start(t, localstripe.Config{})
	_, _, pi := c.call(http.MethodPost, "/v1/payment_intents", url.Values{"amount": {"2000"}, "currency": {"usd"}}, "Stripe-Account", "acct_1")
	id := pi["id"].(string)
	_, _, sub := c.call(http.MethodPost, "/v1/subscriptions", url.Values{"customer": {"cus_1"}, "items[0][price]": {"price_1"}}, "Stripe-Account", "acct_1")
	subID := sub["id"].(string)
	events := len(s.Deliveries())

	status, _, changed := c.call(http.MethodPost, "/_local/dashboard/"+id, form("status", "succeeded"))
	require.Equal(t, http.StatusOK, status, changed)
	assert.Equal(t, "succeeded", changed["status"])
	status, _, got := c.call(http.MethodGet, "/v1/payment_intents/"+id, nil, "Stripe-Account", "acct_1")
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, "succeeded", got["status"])

	status, _, changed = c.call(http.MethodPost, "/_local/dashboard/"+subID, form("status", "canceled"))
	require.Equal(t, http.StatusOK, status, changed)
	status, _, got = c.call(http.MethodGet, "/v1/subscriptions/"+subID, nil, "Stripe-Account", "acct_1")
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, "canceled", got["status"])
	_, _, list := c.call(http.MethodGet, "/v1/subscriptions?status=all&limit=100", nil, "Stripe-Account", "acct_1")
	require.Len(t, list["data"], 1)
	_, _, list = c.call(http.MethodGet, "/v1/subscriptions", nil, "Stripe-Account", "acct_1")
	assert.Empty(t, list["data"], "Stripe lists canceled subscriptions only with status=all")
	assert.Len(t, s.Deliveries(), events, "no event for a Dashboard change")

	status, _, refused := c.call(http.MethodPost, "/_local/dashboard/"+id, form("status", "refunded"))
	assert.Equal(t, http.StatusBadRequest, status, refused)
	status, _, _ = c.call(http.MethodPost, "/_local/dashboard/pi_missing", form("status", "succeeded"))
	assert.Equal(t, http.StatusBadRequest, status)
	_, _, got = c.call(http.MethodGet, "/v1/payment_intents/"+id, nil, "Stripe-Account", "acct_1")
	assert.Equal(t, "succeeded", got["status"], "nothing changed")
}
