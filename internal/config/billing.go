package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Defaults of the billing core (docs/design.md §8), the one place they are stated:
// the BILLING_* variables default to them, and billing.DefaultConfig and
// billing.NewCharger read them (config is a leaf; billing may import it).
const (
	DefaultBillingShards        = 8
	DefaultBillingWorkers       = 2
	DefaultBillingReminderDays  = 7
	DefaultBillingStaleDays     = 30
	DefaultBillingReceiptTTL    = 183 * 24 * time.Hour // 4392h
	DefaultBillingLookbackDays  = 3
	DefaultBillingLockLease     = 60 * time.Second
	DefaultBillingLockHeartbeat = time.Second
	// DefaultBillingTriggerMinGap: a billing period gets at most one
	// collection attempt triggered by the platform per this long
	// (BILLING_TRIGGER_MIN_GAP, docs/design.md §8).
	DefaultBillingTriggerMinGap = 24 * time.Hour
	// DefaultStripeRateLimit is the whole service's Stripe requests per
	// second, every replica and job together (STRIPE_RATE_LIMIT, docs/design.md §9).
	DefaultStripeRateLimit = 20.0
)

// DefaultBillingRetryDays are the days after a billing date on which a
// failed period is retried (BILLING_RETRY_DAYS); a function, since a slice
// cannot be a constant.
func DefaultBillingRetryDays() []int { return []int{1, 3, 5, 7} }

// DefaultBillingHardDeclineCodes are the Stripe decline codes retrying
// cannot fix (docs/design.md §8 "Declines that retrying cannot fix are not
// retried"; BILLING_HARD_DECLINE_CODES): a period declined with one is not
// retried on the retry days.
func DefaultBillingHardDeclineCodes() []string {
	return []string{"lost_card", "stolen_card", "pickup_card", "restricted_card", "fraudulent",
		"invalid_account", "card_not_supported", "currency_not_supported", "expired_card",
		"incorrect_number", "invalid_number", "authentication_required"}
}

// BillingConfig is the recurring billing core's part of the configuration
// (docs/configuration.md).
type BillingConfig struct {
	Shards          int   // BILLING_SHARDS
	WorkersPerShard int   // BILLING_WORKERS
	ReminderDays    int   // BILLING_REMINDER_DAYS
	RetryDays       []int // BILLING_RETRY_DAYS
	StaleDays       int   // BILLING_STALE_DAYS
	// HardDeclineCodes is BILLING_HARD_DECLINE_CODES (comma-separated).
	HardDeclineCodes []string
	ReceiptTTL       time.Duration // BILLING_RECEIPT_TTL
	LookbackDays     int           // BILLING_LOOKBACK_DAYS
	LockLease        time.Duration // BILLING_LOCK_LEASE
	LockHeartbeat    time.Duration // BILLING_LOCK_HEARTBEAT
	Every            time.Duration // BILLING_EVERY: in-process jobs in serve; 0 = off
	StripeRateLimit  float64       // STRIPE_RATE_LIMIT, requests per second
	TestClocksMax    int           // TEST_CLOCKS_MAX: test clocks that may exist at once
	// TestClockSettleWait (TEST_CLOCK_SETTLE_WAIT) bounds how long a test
	// clock's advance waits on a bank debit's settlement day for Stripe's
	// outcome; 0: it does not wait (docs/billing.md, Test clocks).
	TestClockSettleWait time.Duration
	// StripeExpectedReplicas (STRIPE_EXPECTED_REPLICAS, default 1): a
	// replica that cannot reach the shared Stripe budget's store spends
	// StripeRateLimit / StripeExpectedReplicas alone (docs/stripe-budget.md).
	StripeExpectedReplicas int
	// TriggerMinGap is BILLING_TRIGGER_MIN_GAP: at most one attempt
	// triggered by the platform per billing period per this long.
	TriggerMinGap time.Duration
	// QueueURL is BILLING_QUEUE_URL: the SQS FIFO queue that spreads a
	// collection run's accounts over every replica; empty: each run
	// collects in the process that runs it (docs/billing.md, Billing queue).
	QueueURL string
	// QueueMaxReceives is BILLING_QUEUE_MAX_RECEIVES: the queue's redrive
	// maxReceiveCount; a message failing on its last receive is recorded
	// dead and moves to the dead-letter queue.
	QueueMaxReceives int
	// QueueWorkers is BILLING_QUEUE_WORKERS: accounts one replica collects
	// from the queue at once.
	QueueWorkers int
	// QueueDeadline is BILLING_QUEUE_DEADLINE: a queued run not drained
	// this long after it started is overdue (the alert), and the next run
	// of its date replaces it.
	QueueDeadline time.Duration
}

// Defaults of the billing queue's settings.
const (
	DefaultBillingQueueMaxReceives = 10
	DefaultBillingQueueWorkers     = 16
	DefaultBillingQueueDeadline    = 6 * time.Hour
)

// DefaultTestClocksMax is TEST_CLOCKS_MAX's default (docs/retention.md).
const DefaultTestClocksMax = 100

// DefaultTestClockSettleWait is TEST_CLOCK_SETTLE_WAIT's default: the local
// Stripe settles a bank debit after 20 s, and its webhook takes a moment
// through the feed. MaxTestClockSettleWait bounds it: an advance holds one
// of the instance's advance slots while it waits.
const (
	DefaultTestClockSettleWait = 30 * time.Second
	MaxTestClockSettleWait     = 10 * time.Minute
)

// loadBilling reads the BILLING_* variables and STRIPE_RATE_LIMIT.
func loadBilling(get func(key, def string) string) (BillingConfig, error) {
	var errs []error
	atoi := func(key, def string, lo, hi int) int {
		n, err := strconv.Atoi(get(key, def))
		if err != nil || n < lo || n > hi {
			errs = append(errs, fmt.Errorf("%s: an integer from %d to %d", key, lo, hi))
		}
		return n
	}
	dur := func(key, def string, allowZero bool) time.Duration {
		d, err := time.ParseDuration(get(key, def))
		if err != nil || d < 0 || (d == 0 && !allowZero) {
			errs = append(errs, fmt.Errorf("%s: a positive duration such as %s", key, def))
		}
		return d
	}
	b := BillingConfig{
		Shards:          atoi("BILLING_SHARDS", strconv.Itoa(DefaultBillingShards), 1, 1000),
		WorkersPerShard: atoi("BILLING_WORKERS", strconv.Itoa(DefaultBillingWorkers), 1, 100),
		ReminderDays:    atoi("BILLING_REMINDER_DAYS", strconv.Itoa(DefaultBillingReminderDays), 0, 27),
		StaleDays:       atoi("BILLING_STALE_DAYS", strconv.Itoa(DefaultBillingStaleDays), 1, 365),
		LookbackDays:    atoi("BILLING_LOOKBACK_DAYS", strconv.Itoa(DefaultBillingLookbackDays), 0, 31),
		ReceiptTTL:      dur("BILLING_RECEIPT_TTL", shortDuration(DefaultBillingReceiptTTL), false),
		LockLease:       dur("BILLING_LOCK_LEASE", shortDuration(DefaultBillingLockLease), false),
		LockHeartbeat:   dur("BILLING_LOCK_HEARTBEAT", shortDuration(DefaultBillingLockHeartbeat), false),
		Every:           dur("BILLING_EVERY", "0s", true),
		TestClocksMax:   atoi("TEST_CLOCKS_MAX", strconv.Itoa(DefaultTestClocksMax), 1, 10000),
		TriggerMinGap:   dur("BILLING_TRIGGER_MIN_GAP", shortDuration(DefaultBillingTriggerMinGap), false),
	}
	b.TestClockSettleWait = dur("TEST_CLOCK_SETTLE_WAIT", shortDuration(DefaultTestClockSettleWait), true)
	if b.TestClockSettleWait > MaxTestClockSettleWait {
		errs = append(errs, fmt.Errorf("TEST_CLOCK_SETTLE_WAIT: at most %s (0: do not wait)", shortDuration(MaxTestClockSettleWait)))
	}
	retry := make([]string, 0, len(DefaultBillingRetryDays()))
	for _, d := range DefaultBillingRetryDays() {
		retry = append(retry, strconv.Itoa(d))
	}
	prev := 0
	for _, f := range strings.Split(get("BILLING_RETRY_DAYS", strings.Join(retry, ",")), ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= prev || n >= b.StaleDays {
			errs = append(errs, errors.New("BILLING_RETRY_DAYS: increasing day numbers below BILLING_STALE_DAYS, e.g. 1,3,5,7"))
			break
		}
		b.RetryDays, prev = append(b.RetryDays, n), n
	}
	for _, f := range strings.Split(get("BILLING_HARD_DECLINE_CODES", strings.Join(DefaultBillingHardDeclineCodes(), ",")), ",") {
		code := strings.TrimSpace(f)
		if code == "" || strings.Trim(code, "abcdefghijklmnopqrstuvwxyz0123456789_") != "" {
			errs = append(errs, errors.New("BILLING_HARD_DECLINE_CODES: comma-separated Stripe decline codes such as lost_card,stolen_card"))
			break
		}
		b.HardDeclineCodes = append(b.HardDeclineCodes, code)
	}
	rate, err := strconv.ParseFloat(get("STRIPE_RATE_LIMIT", strconv.FormatFloat(DefaultStripeRateLimit, 'f', -1, 64)), 64)
	if err != nil || rate <= 0 || rate > 10000 {
		errs = append(errs, errors.New("STRIPE_RATE_LIMIT: requests per second, above 0"))
	}
	b.StripeRateLimit = rate
	b.StripeExpectedReplicas = atoi("STRIPE_EXPECTED_REPLICAS", "1", 1, 1000)
	b.QueueURL = get("BILLING_QUEUE_URL", "")
	if b.QueueURL != "" {
		if u, err := url.Parse(b.QueueURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || !strings.HasSuffix(u.Path, ".fifo") {
			errs = append(errs, errors.New("BILLING_QUEUE_URL: must be an SQS FIFO queue URL (https://sqs.<region>.amazonaws.com/<account>/<queue>.fifo)"))
		}
	}
	b.QueueMaxReceives = atoi("BILLING_QUEUE_MAX_RECEIVES", strconv.Itoa(DefaultBillingQueueMaxReceives), 2, 1000)
	b.QueueWorkers = atoi("BILLING_QUEUE_WORKERS", strconv.Itoa(DefaultBillingQueueWorkers), 1, 256)
	b.QueueDeadline = dur("BILLING_QUEUE_DEADLINE", shortDuration(DefaultBillingQueueDeadline), false)
	if b.QueueDeadline > 0 && b.QueueDeadline < 10*time.Minute {
		errs = append(errs, errors.New("BILLING_QUEUE_DEADLINE: at least 10m"))
	}
	if b.LockHeartbeat > 0 && b.LockLease > 0 && b.LockHeartbeat*3 > b.LockLease {
		errs = append(errs, errors.New("BILLING_LOCK_HEARTBEAT: at most a third of BILLING_LOCK_LEASE"))
	}
	return b, errors.Join(errs...)
}

// LogValue renders the billing settings (no secrets among them).
func (b BillingConfig) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Int("shards", b.Shards), slog.Int("workers_per_shard", b.WorkersPerShard),
		slog.Int("reminder_days", b.ReminderDays), slog.Any("retry_days", b.RetryDays),
		slog.Int("stale_days", b.StaleDays), slog.Any("hard_decline_codes", b.HardDeclineCodes), slog.Duration("receipt_ttl", b.ReceiptTTL),
		slog.Int("lookback_days", b.LookbackDays), slog.Duration("lock_lease", b.LockLease),
		slog.Duration("lock_heartbeat", b.LockHeartbeat), slog.Duration("every", b.Every),
		slog.Float64("stripe_rate_limit", b.StripeRateLimit), slog.Int("test_clocks_max", b.TestClocksMax),
		slog.Duration("test_clock_settle_wait", b.TestClockSettleWait),
		slog.Int("stripe_expected_replicas", b.StripeExpectedReplicas),
		slog.Duration("trigger_min_gap", b.TriggerMinGap),
		slog.String("queue_url", b.QueueURL), slog.Int("queue_max_receives", b.QueueMaxReceives),
		slog.Int("queue_workers", b.QueueWorkers), slog.Duration("queue_deadline", b.QueueDeadline),
	)
}

// shortDuration writes d as people do: 4392h, not 4392h0m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
