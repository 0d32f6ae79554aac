package email_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/notify"
	"github.com/stripe-payments/stripe-payments/internal/billingtest"
	"github.com/stripe-payments/stripe-payments/internal/email"
	"github.com/stripe-payments/stripe-payments/internal/outbox"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// TestErasureReachesQueuedAndDeadLetteredEmails: erasing a subscriber's
// email (docs/retention.md) also erases it from the reminder emails already
// queued for that subscription, dead letters included: none is sent to the
// erased address afterwards, even when an operator re-drives the dead
// letters, and no stored message holds it. Another subscriber's reminders
// are untouched and still go out.
func TestErasureReachesQueuedAndDeadLetteredEmails(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	e := billingtest.NewEnv(t, billingtest.Options{})
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := billing.New(billingtest.TestConfig(), billing.Deps{Store: e.Store, Locks: e.Lock, Charger: e.Charger,
		Notifier: notify.Outbox{Pool: pool, Email: true}, Now: e.Clock.Now, Log: quiet})
	require.NoError(t, err)

	const erased, kept = "Erin.Example@Example.com", "keep@example.com"
	in := billingtest.Input("gold", 20)
	in.Email = erased
	gone, err := svc.CreateSubscription(ctx, "acc-erase", in)
	require.NoError(t, err)
	in.Email = kept
	_, err = svc.CreateSubscription(ctx, "acc-keep", in)
	require.NoError(t, err)
	remind := func(from, to string) {
		t.Helper()
		for day := dates.MustParse(from); !day.After(dates.MustParse(to)); day = day.AddDays(1) {
			e.Clock.SetDate(day)
			_, err := svc.Remind(ctx, day)
			require.NoError(t, err)
		}
	}

	// January's reminders: SES refuses them and they become dead letters.
	remind("2024-01-01", "2024-01-20")
	ses := newFakeSES(t, 2)
	client, err := email.NewSESClient(ctx, "us-east-1", ses.URL)
	require.NoError(t, err)
	worker := &outbox.Worker{Pool: pool, Topic: email.Topic, Log: quiet, MaxAttempts: 1,
		Deliver: email.Sender{Client: client, From: "billing@example.com"}.Deliver}
	_, err = worker.DeliverDue(ctx)
	require.NoError(t, err)
	require.Empty(t, ses.emails())
	dead, _, err := outbox.NewStore(pool, quiet, nil).ListDead(ctx, email.Topic, outbox.DeadCursor{}, 10)
	require.NoError(t, err)
	require.Len(t, dead, 2, "both January reminders are dead letters")
	// February's reminders are queued.
	remind("2024-01-21", "2024-02-20")
	pending, err := outbox.Pending(ctx, pool, email.Topic)
	require.NoError(t, err)
	require.Equal(t, 2, pending, "both February reminders are queued")
	require.Equal(t, 4, storedWith(t, pool, erased)+storedWith(t, pool, kept), "the test proves nothing unless the messages hold the addresses")

	_, err = svc.ErasePersonalData(ctx, "acc-erase", gone.SubscriptionID)
	require.NoError(t, err)
	assert.Zero(t, storedWith(t, pool, erased), "no stored message holds the erased address")
	assert.Equal(t, 2, storedWith(t, pool, kept), "another subscriber's messages are untouched")

	// An operator re-drives every dead letter; the worker sends what is due.
	_, err = outbox.NewStore(pool, quiet, nil).RedriveTopic(ctx, email.Topic)
	require.NoError(t, err)
	for range 4 {
		_, err = worker.DeliverDue(ctx)
		require.NoError(t, err)
	}
	var to []string
	for _, m := range ses.emails() {
		for _, a := range m["Destination"].(map[string]any)["ToAddresses"].([]any) {
			to = append(to, a.(string))
		}
	}
	assert.Equal(t, []string{kept, kept}, to, "nothing is sent to the erased address")
	pending, err = outbox.Pending(ctx, pool, email.Topic)
	require.NoError(t, err)
	assert.Zero(t, pending, "an erased message is settled, not retried")
	dead, _, err = outbox.NewStore(pool, quiet, nil).ListDead(ctx, email.Topic, outbox.DeadCursor{}, 10)
	require.NoError(t, err)
	assert.Empty(t, dead, "an erased message is settled, not a dead letter again")
	assert.Zero(t, storedWith(t, pool, erased))
}

// storedWith counts the outbox rows whose payload or last error holds addr
// in any letter case.
func storedWith(t *testing.T, pool *pgxpool.Pool, addr string) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox
		WHERE strpos(lower(payload::text), lower($1)) > 0 OR strpos(lower(coalesce(last_error, '')), lower($1)) > 0`, addr).Scan(&n))
	return n
}
