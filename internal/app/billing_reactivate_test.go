package app_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing"
)

// docs/design.md §8 "Reactivation" end to end on DynamoDB Local and Postgres, on a
// test clock: a customer paid on the 10th cancels on Feb 5 (the Feb 10
// period is CANCELLED) and comes back on Feb 7 with a new card: Feb 10 is
// the rule's first date on or after that day and a term after the last
// charged period (Jan 10), so that period is scheduled again (process
// REACTIVATION, cause user-reactivated), announced at once (its reminder
// day had passed) and charged on its date with the new card; the history
// keeps the CANCELLED entry (append-only).
func TestReactivationEndToEnd(t *testing.T) {
	e := startDeclines(t) // no decline code set: every charge succeeds
	e.create("acc-back", "")
	acc, sub := "acc-back", e.subs["acc-back"]
	path := e.base + "/accounts/" + acc + "/subscriptions/" + sub
	e.advance("2024-01-10")
	e.advance("2024-02-05")
	status, body := send(t, http.MethodPost, path+"/reactivate", map[string]any{})
	require.Equal(t, http.StatusConflict, status, "ACTIVE: %v", body)
	status, body = send(t, http.MethodPatch, path, map[string]any{"action": "cancel"})
	require.Equal(t, http.StatusOK, status, body)
	e.advance("2024-02-07")

	status, body = send(t, http.MethodPost, path+"/reactivate", map[string]any{"payment_method": "pm_back"})
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, "ACTIVE", body["status"])
	assert.Equal(t, "2024-02-10", body["next_payment_date"])
	status, body = send(t, http.MethodPost, path+"/reactivate", map[string]any{})
	assert.Equal(t, http.StatusConflict, status, body)

	e.advance("2024-03-10")
	var charged []string
	for _, p := range e.a.Fake.PIs() {
		if p.Metadata[billing.MetaSubscription] == sub && p.Status == "succeeded" {
			charged = append(charged, p.Metadata[billing.MetaDate]+" "+p.PaymentMethod)
		}
	}
	assert.Equal(t, []string{"2024-01-10 pm_old", "2024-02-10 pm_back", "2024-03-10 pm_back"}, charged)

	status, list := get(t, path+"/history?limit=1000", token)
	require.Equal(t, http.StatusOK, status, list)
	var feb []string
	for _, it := range list["data"].([]any) {
		h := it.(map[string]any)
		if h["billing_date"] == "2024-02-10" {
			feb = append(feb, h["billing_status"].(string)+" "+h["process"].(string)+" "+h["updated_event"].(string))
		}
	}
	assert.Equal(t, []string{"SCHEDULED INITIAL scheduled", "CANCELLED ADMIN cancelled",
		"SCHEDULED REACTIVATION user-reactivated", "COMPLETED INITIAL completed"}, feb)

	var reminders int
	require.NoError(t, e.a.Pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE type = $1
		AND payload->>'account' = $2 AND payload->>'billing_date' = '2024-02-10'`, billing.ActionReminderDue, acc).Scan(&reminders))
	assert.Equal(t, 1, reminders, "the reactivated period is announced (once)")
}
