package tracking_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/actions"
	"github.com/stripe-payments/stripe-payments/internal/dynamo"
	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/handler"
	"github.com/stripe-payments/stripe-payments/internal/ledger"
	"github.com/stripe-payments/stripe-payments/internal/stripeclient"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
	"github.com/stripe-payments/stripe-payments/internal/tracking"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// flowEnv is the real handler with the tracking flows registered, on a fresh
// Postgres database, fresh DynamoDB tables and a fake Stripe API.
type flowEnv struct {
	pool    *pgxpool.Pool
	store   *tracking.Store
	events  *events.Store
	handler *handler.Handler
	stripe  *stripetest.Stripe
}

func newFlowEnv(t *testing.T) *flowEnv {
	t.Helper()
	e := &flowEnv{pool: testenv.Postgres(t), stripe: stripetest.New(t, stripetest.Options{})}
	e.store = tracking.NewStore(e.pool)
	client := testenv.Dynamo(t)
	table := testenv.TableName("events")
	testenv.CreateTables(t, client, dynamo.EventsTable(table))
	e.events = events.NewStore(client, table, 720*time.Hour, nil)
	api := stripeclient.New(stripeclient.Options{APIKey: "sk_test_fake_flows", BaseURL: e.stripe.URL, MaxNetworkRetries: 1, Log: quiet})
	led := ledger.New(e.pool)
	flows := tracking.NewFlows(tracking.FlowsConfig{Log: quiet, Invoices: stripeclient.InvoiceFetcher(api), LookupTimeout: 5 * time.Second,
		Processed: led.Processed})
	e.handler = handler.New(handler.Config{PlatformAccount: "acct_platform_test", EventTTL: 720 * time.Hour},
		e.events, led, quiet, handler.WithRoutes(handler.NewRoutes(flows, nil)))
	return e
}

// ids names the objects of one purchase under test.
type ids struct {
	purchase uuid.UUID
	account  uuid.UUID
	pi       string
	sub      string
	inv      string
}

// purchase stores a purchase of kind with the rows the purchase API would
// store (a payment for legacy and one-off, a subscription for recurring)
// unless bare.
func (e *flowEnv) purchase(t *testing.T, kind tracking.Kind, bare bool) ids {
	t.Helper()
	ctx := context.Background()
	p, _, err := e.store.CreatePurchase(ctx, tracking.NewPurchase{Account: uuid.New(), StripeAccount: acct, Kind: kind})
	require.NoError(t, err)
	x := ids{purchase: p.ID, account: p.Account, pi: "pi_" + stripeSuffix(), sub: "sub_" + stripeSuffix(), inv: "in_" + stripeSuffix()}
	if bare {
		return x
	}
	switch kind {
	case tracking.KindLegacy:
		require.NoError(t, e.store.RecordPayment(ctx, p.ID, x.pi, ""))
	case tracking.KindOneOff:
		require.NoError(t, e.store.RecordPayment(ctx, p.ID, x.pi, x.inv))
	case tracking.KindRecurring:
		require.NoError(t, e.store.RecordSubscription(ctx, p.ID, x.sub))
	}
	return x
}

func (x ids) metadata() map[string]any {
	return map[string]any{"purchase_id": x.purchase.String(), "account": x.account.String()}
}

// deliver builds, signs nothing (the handler is called directly) and handles
// one event.
func (e *flowEnv) deliver(t *testing.T, ev stripetest.Event) (stripeevent.Outcome, error) {
	t.Helper()
	payload := ev.Build(t)
	parsed, err := stripeevent.Parse(payload)
	require.NoError(t, err)
	return e.handler.Handle(context.Background(), parsed, payload, stripeevent.SourceWebhook)
}

// state is what the tests assert after a sequence of events.
type state struct {
	fulfilled    bool
	payment      tracking.PaymentStatus      // "" = no row
	subscription tracking.SubscriptionStatus // "" = no row
	fulfils      int                         // purchase.fulfilled actions
	unsubscribes int                         // subscription.terminated actions
}

func (e *flowEnv) state(t *testing.T, x ids) state {
	t.Helper()
	ctx := context.Background()
	var s state
	p, err := e.store.GetPurchase(ctx, x.purchase)
	require.NoError(t, err)
	s.fulfilled = p.Fulfilled
	if pay, err := e.store.GetPayment(ctx, x.pi); err == nil {
		s.payment = pay.Status
		require.Equal(t, x.purchase, pay.Purchase)
	}
	if sub, err := e.store.GetSubscription(ctx, x.sub); err == nil {
		s.subscription = sub.Status
		require.Equal(t, x.purchase, sub.Purchase)
	}
	for _, a := range e.actions(t) {
		if a.PurchaseID == nil || *a.PurchaseID != x.purchase.String() {
			continue
		}
		switch a.Type {
		case actions.TypePurchaseFulfilled:
			s.fulfils++
		case actions.TypeSubscriptionTerminated:
			s.unsubscribes++
		}
	}
	return s
}

// actions reads every action in the outbox and checks its id is the
// message's.
func (e *flowEnv) actions(t *testing.T) []actions.Action {
	t.Helper()
	rows, err := e.pool.Query(context.Background(), `SELECT id, type, dedupe_key, payload FROM outbox WHERE topic = 'action' ORDER BY created_at`)
	require.NoError(t, err)
	defer rows.Close()
	var out []actions.Action
	for rows.Next() {
		var id uuid.UUID
		var typ, key string
		var payload []byte
		require.NoError(t, rows.Scan(&id, &typ, &key, &payload))
		var a actions.Action
		require.NoError(t, json.Unmarshal(payload, &a))
		require.Equal(t, id, a.ID, "the action id is the outbox message id")
		require.Equal(t, typ, a.Type)
		out = append(out, a)
	}
	require.NoError(t, rows.Err())
	return out
}

// stripeSuffix is a unique tail for a Stripe-looking id (letters and
// digits only, as Stripe's).
func stripeSuffix() string { return strings.ReplaceAll(uuid.NewString(), "-", "")[:16] }
