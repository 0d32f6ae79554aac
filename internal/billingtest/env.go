package billingtest

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/stripe-payments/stripe-payments/internal/actions"
	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/store"
	"github.com/stripe-payments/stripe-payments/internal/billing/stripecharge"
	"github.com/stripe-payments/stripe-payments/internal/billing/testclock"
	"github.com/stripe-payments/stripe-payments/internal/dynamo"
	"github.com/stripe-payments/stripe-payments/internal/lock"
	"github.com/stripe-payments/stripe-payments/internal/stripeclient"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// Clock is a settable clock.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock starts at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// SetDate moves the clock to 10:00 UTC on d.
func (c *Clock) SetDate(d dates.Date) { c.Set(d.Time().Add(10 * time.Hour)) }

// Today is the clock's UTC date.
func (c *Clock) Today() dates.Date { return dates.Of(c.Now().UTC()) }

// Notifier records actions once per dedupe key, as the outbox does.
type Notifier struct {
	mu      sync.Mutex
	actions []actions.Action
	keys    map[string]int
	// Fail, when set, makes Notify fail (an outbage of Postgres).
	Fail func(a actions.Action) error
}

// Notify records a.
func (n *Notifier) Notify(_ context.Context, a actions.Action) error {
	if n.Fail != nil {
		if err := n.Fail(a); err != nil {
			return err
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.keys == nil {
		n.keys = map[string]int{}
	}
	n.keys[billing.DedupeKey(a)]++
	if n.keys[billing.DedupeKey(a)] == 1 {
		n.actions = append(n.actions, a)
	}
	return nil
}

// Actions returns the distinct actions so far.
func (n *Notifier) Actions() []actions.Action {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]actions.Action(nil), n.actions...)
}

// Options of an Env; zero values take test defaults.
type Options struct {
	Config billing.Config
	// Clocks bounds the test clocks (zero: testclock.DefaultConfig).
	Clocks      testclock.Config
	StripeLimit float64 // requests per second the fake enforces (0: none)
	StripeBurst int     // the fake's burst above StripeLimit (0: a tenth of a second's worth)
	ChargerRate float64 // the service's token bucket (default 1000/s)
	Lease       time.Duration
	Heartbeat   time.Duration
	Start       time.Time
	// Crash, when set, is asked at each step of every collection attempt
	// and crashes the process there when it returns billing.ErrCrash
	// (Crasher decorates the service's store and charger).
	Crash func(step string, p billing.Period) error
	Log   *slog.Logger
	// DynamoHTTP replaces the DynamoDB client's HTTP client (counting).
	DynamoHTTP *http.Client
	// Observer receives the service's money-safety metrics.
	Observer billing.Observer
	// LockNow is the lock's clock (default time.Now). A test that must not
	// depend on the machine's speed gives the lock a clock of its own: a
	// lease then runs out only when the test moves that clock.
	LockNow func() time.Time
}

// Env is a billing service on fresh DynamoDB Local tables and a fake Stripe.
type Env struct {
	DB       *dynamodb.Client
	Billing  string
	History  string
	Locks    string
	Store    *store.Store
	Lock     *lock.Client
	Stripe   *stripetest.Stripe
	Clock    *Clock
	Charger  *stripecharge.Charger
	Notifier *Notifier
	Service  *billing.Service
	// Clocks is the test-clock service over Service.
	Clocks *testclock.Service
}

// TestConfig is DefaultConfig scaled for tests.
func TestConfig() billing.Config {
	c := billing.DefaultConfig()
	c.Shards, c.WorkersPerShard = 4, 2
	c.LockedRetryWait = 0
	return c
}

// NewEnv creates the tables and the service.
func NewEnv(t testing.TB, o Options) *Env {
	t.Helper()
	db := testenv.Dynamo(t)
	if o.DynamoHTTP != nil {
		db = dynamodb.New(db.Options(), func(opts *dynamodb.Options) { opts.HTTPClient = o.DynamoHTTP })
	}
	e := &Env{DB: db, Billing: testenv.TableName("billing"), History: testenv.TableName("billing-history"),
		Locks: testenv.TableName("locks"), Notifier: &Notifier{}}
	// Tests run on simulated dates, so their receipts are born expired; and
	// DynamoDB Local's TTL sweeper stops for good at an expired item without
	// GSI keys (a receipt). TTL is off on test tables: readers hide expired
	// receipts themselves, which is what the tests check.
	billingSpec := dynamo.BillingTable(e.Billing)
	billingSpec.TTLAttribute = ""
	testenv.CreateTables(t, testenv.Dynamo(t), billingSpec, dynamo.BillingHistoryTable(e.History), dynamo.LocksTable(e.Locks))
	if o.Start.IsZero() {
		o.Start = time.Date(2024, 1, 1, 10, 0, 0, 0, time.UTC)
	}
	e.Clock = NewClock(o.Start)
	cfg := o.Config
	if cfg.Shards == 0 {
		cfg = TestConfig()
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	e.Stripe = stripetest.New(t, stripetest.Options{RateLimit: o.StripeLimit, RateBurst: o.StripeBurst, Now: e.Clock.Now})
	rateLimit := o.ChargerRate
	if rateLimit == 0 {
		rateLimit = 1000
	}
	api := stripeclient.New(stripeclient.Options{APIKey: "sk_test_fake_billing", BaseURL: e.Stripe.URL, Log: log, MaxNetworkRetries: 1})
	e.Charger = stripecharge.New(api, stripecharge.Options{Rate: rateLimit, Burst: max(1, int(rateLimit/10)),
		Backoff: func(n int) time.Duration { return time.Duration(n) * 20 * time.Millisecond }})
	lease, beat := o.Lease, o.Heartbeat
	if lease == 0 {
		lease, beat = 2*time.Second, 100*time.Millisecond
	}
	e.Lock = lock.New(db, e.Locks, lock.Options{Lease: lease, Heartbeat: beat, Now: o.LockNow, Log: log})
	e.Store = store.New(db, e.Billing, e.History, cfg.Shards)
	var (
		st      billing.Store   = e.Store
		charger billing.Charger = e.Charger
		crasher *Crasher
	)
	if o.Crash != nil {
		crasher = &Crasher{Step: o.Crash, Now: e.Clock.Now}
		st, charger = crasher.Store(st), crasher.Charger(charger)
	}
	svc, err := billing.New(cfg, billing.Deps{Store: st, Locks: e.Lock, Charger: charger,
		Notifier: e.Notifier, Now: e.Clock.Now, Log: log, Observer: o.Observer})
	if err != nil {
		t.Fatalf("billing service: %v", err)
	}
	if crasher != nil {
		crasher.Window = svc.Config().IdempotencyWindow
	}
	e.Service = svc
	e.Clocks, err = testclock.New(o.Clocks, testclock.Deps{Billing: svc, Store: e.Store, Now: e.Clock.Now, Log: log})
	if err != nil {
		t.Fatalf("test clocks: %v", err)
	}
	return e
}

// Input is a valid createSubscription request to vary.
func Input(sku string, day int) billing.CreateInput {
	return billing.CreateInput{SKU: sku, Email: "payer@example.com", PaymentDay: day, Amount: 1999,
		Currency: "usd", Term: dates.Monthly, Customer: "cus_test", PaymentMethod: "pm_ok", StripeAccount: "acct_test"}
}

// CountingTransport counts DynamoDB requests by operation (X-Amz-Target).
type CountingTransport struct {
	Base http.RoundTripper
	mu   sync.Mutex
	ops  map[string]int
}

// RoundTrip counts and forwards.
func (c *CountingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	op := r.Header.Get("X-Amz-Target")
	if i := strings.LastIndex(op, "."); i >= 0 {
		op = op[i+1:]
	}
	c.mu.Lock()
	if c.ops == nil {
		c.ops = map[string]int{}
	}
	c.ops[op]++
	c.mu.Unlock()
	base := c.Base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(r)
}

// Ops returns the counts so far and their total.
func (c *CountingTransport) Ops() (map[string]int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out, total := map[string]int{}, 0
	for k, v := range c.ops {
		out[k] = v
		total += v
	}
	return out, total
}
