package email_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/actions"
	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/notify"
	"github.com/stripe-payments/stripe-payments/internal/email"
	"github.com/stripe-payments/stripe-payments/internal/outbox"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// fakeSES speaks the SES v2 SendEmail REST API; it refuses the first
// `reject` requests with a non-retryable error.
type fakeSES struct {
	mu     sync.Mutex
	reject int
	sent   []map[string]any
	*httptest.Server
}

func newFakeSES(t *testing.T, reject int) *fakeSES {
	f := &fakeSES{reject: reject}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v2/email/outbound-emails" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		defer f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if f.reject > 0 {
			f.reject--
			w.Header().Set("X-Amzn-ErrorType", "MessageRejected")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"message":"Email address is not verified."}`))
			return
		}
		var in map[string]any
		if err := json.Unmarshal(body, &in); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		f.sent = append(f.sent, in)
		_, _ = w.Write([]byte(`{"MessageId":"0100018c-test"}`))
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeSES) emails() []map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]map[string]any(nil), f.sent...)
}

// A reminder enqueues one email beside its action; the email worker sends it
// through SES, retrying a refused send later, once per reminder.
func TestReminderEmailsGoThroughSES(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	ses := newFakeSES(t, 1)
	client, err := email.NewSESClient(ctx, "us-east-1", ses.URL)
	require.NoError(t, err)

	n := notify.Outbox{Pool: pool, Email: true}
	sub1, sub2 := "sub-1", "sub-2"
	a := actions.Action{Type: billing.ActionReminderDue, Account: "acc-1", StripeAccount: "acct_1X", SubscriptionID: &sub1,
		Created: time.Now().UTC().Format(time.RFC3339), BillingDetails: &actions.BillingDetails{SKU: "pro", Email: "buyer@example.com",
			BillingDate: "2026-12-01", Amount: 1500, Currency: "usd"}}
	require.NoError(t, n.Notify(ctx, a))
	require.NoError(t, n.Notify(ctx, a), "a rerun of the reminder job enqueues nothing new")
	// No email for payment outcomes, nor without an address.
	require.NoError(t, n.Notify(ctx, actions.Action{Type: billing.ActionPaymentCompleted, Account: "acc-1", SubscriptionID: &sub1,
		BillingDetails: &actions.BillingDetails{Email: "buyer@example.com", BillingDate: "2026-12-01"}}))
	require.NoError(t, n.Notify(ctx, actions.Action{Type: billing.ActionReminderDue, Account: "acc-2", SubscriptionID: &sub2,
		BillingDetails: &actions.BillingDetails{BillingDate: "2026-12-01"}}))

	pending, err := outbox.Pending(ctx, pool, email.Topic)
	require.NoError(t, err)
	require.Equal(t, 1, pending)

	now := time.Now()
	w := &outbox.Worker{Pool: pool, Topic: email.Topic, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Deliver: email.Sender{Client: client, From: "billing@example.com"}.Deliver, Now: func() time.Time { return now }}
	_, err = w.DeliverDue(ctx) // refused by SES: retried later
	require.NoError(t, err)
	assert.Empty(t, ses.emails())
	now = now.Add(time.Hour)
	_, err = w.DeliverDue(ctx)
	require.NoError(t, err)

	sent := ses.emails()
	require.Len(t, sent, 1)
	assert.Equal(t, "billing@example.com", sent[0]["FromEmailAddress"])
	assert.Equal(t, []any{"buyer@example.com"}, sent[0]["Destination"].(map[string]any)["ToAddresses"])
	simple := sent[0]["Content"].(map[string]any)["Simple"].(map[string]any)
	assert.Equal(t, "Your pro payment is due on 2026-12-01", simple["Subject"].(map[string]any)["Data"])
	assert.Contains(t, simple["Body"].(map[string]any)["Text"].(map[string]any)["Data"], "15.00 USD")
	pending, err = outbox.Pending(ctx, pool, email.Topic)
	require.NoError(t, err)
	assert.Zero(t, pending)
}

func TestMessageValidation(t *testing.T) {
	tests := []struct {
		name string
		m    email.Message
		ok   bool
	}{
		{"valid", email.Message{To: "a@example.com", Subject: "s", Text: "t"}, true},
		{"bad address", email.Message{To: "not an address", Subject: "s", Text: "t"}, false},
		{"no subject", email.Message{To: "a@example.com", Text: "t"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.ok, tc.m.Validate() == nil)
		})
	}
}
