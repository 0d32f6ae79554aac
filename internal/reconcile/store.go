package reconcile

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
)

// IDPattern is a run's id: rec_ and 24 hex digits.
var IDPattern = regexp.MustCompile(`^rec_[0-9a-f]{24}$`)

// Store keeps runs, their items and findings in Postgres.
type Store struct {
	pool    *pgxpool.Pool
	window  time.Duration
	now     func() time.Time
	billing BillingPeriods // nil: billing attempts are not compared
	// accounts lists the connected accounts the poller walks (nil: accounts
	// are not compared); platform is STRIPE_PLATFORM_ACCOUNT, never one.
	accounts AccountLister
	platform string
}

// AccountLister lists the connected accounts the poller walks
// (thin.Polled, the poller's own source).
type AccountLister interface {
	Accounts(ctx context.Context) ([]string, error)
}

// WithAccounts returns the store comparing the accounts src lists, less
// the platform's own.
func (s *Store) WithAccounts(src AccountLister, platform string) *Store {
	c := *s
	c.accounts, c.platform = src, platform
	return &c
}

// BillingPeriods is what a run reads of the billing core's periods
// (billing/store.Store).
type BillingPeriods interface {
	// PeriodsToReconcile lists the periods whose bank debit waits to
	// settle (ACHSENT) and those with an attempt whose outcome is unknown.
	PeriodsToReconcile(ctx context.Context) ([]billing.Period, error)
	GetPeriod(ctx context.Context, account, sub string, d dates.Date) (billing.Period, error)
}

// NewStore returns a Store; window is RECONCILE_WINDOW (0: DefaultWindow);
// periods may be nil (no billing core: runs of kind billing_attempt are
// refused).
func NewStore(pool *pgxpool.Pool, window time.Duration, periods BillingPeriods) *Store {
	if window <= 0 {
		window = DefaultWindow
	}
	return &Store{pool: pool, window: window, now: time.Now, billing: periods}
}

// WithClock replaces time.Now (tests).
func (s *Store) WithClock(now func() time.Time) *Store { c := *s; c.now = now; return &c }

// The local objects in scope, one statement per kind: every object not
// final, and every final one changed since $1. A PaymentIntent is final
// once its payment is paid and its purchase fulfilled; a subscription once
// it is terminated. Ordered by account so that the runner lists each
// account's objects together.
var scope = map[string]string{
	KindPaymentIntent: `SELECT 'payment_intent', p.payment_intent, p.stripe_account, p.id, p.created
		FROM purchases p LEFT JOIN payments pay ON pay.id = p.payment_intent
		WHERE p.payment_intent IS NOT NULL AND p.kind <> 'recurring'
		  AND (NOT p.fulfilled OR pay.status IS DISTINCT FROM 'paid' OR p.last_updated >= $1 OR pay.last_updated >= $1)`,
	KindSubscription: `SELECT 'subscription', p.subscription, p.stripe_account, p.id, p.created
		FROM purchases p LEFT JOIN subscriptions sub ON sub.id = p.subscription
		WHERE p.subscription IS NOT NULL AND p.kind = 'recurring'
		  AND (sub.status IS DISTINCT FROM 'terminated' OR p.last_updated >= $1 OR sub.last_updated >= $1)`,
}

// Start records a run of r and its items (the objects in scope now); the
// runner carries it out.
func (s *Store) Start(ctx context.Context, r Request, actor string) (Run, error) {
	r, sc, err := s.prepare(ctx, r)
	if err != nil {
		return Run{}, err
	}
	var run Run
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		run, err = s.start(ctx, tx, r, sc, actor)
		return err
	})
	if err != nil {
		return Run{}, apperr.Ensure(err, apperr.CodeUnavailable, "could not start the reconciliation")
	}
	return run, nil
}

// StartDue starts a run of r as actor unless actor started one within
// every: RECONCILE_EVERY inside serve, on every replica at once, starts
// one run per period (the check and the start hold one advisory lock).
// started is false when none was due.
func (s *Store) StartDue(ctx context.Context, r Request, actor string, every time.Duration) (run Run, started bool, err error) {
	r, sc, err := s.prepare(ctx, r)
	if err != nil {
		return Run{}, false, err
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('stripe-payments:reconcile-schedule'))`); err != nil {
			return errorf("schedule lock: %w", err)
		}
		var recent bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM reconciliations WHERE created_by = $1 AND created_at > $2)`,
			actor, s.now().Add(-every)).Scan(&recent); err != nil {
			return errorf("last scheduled run: %w", err)
		}
		if recent {
			return nil
		}
		run, err = s.start(ctx, tx, r, sc, actor)
		started = err == nil
		return err
	})
	return run, started, err
}

// prepare checks r and reads what is in scope outside Postgres (the
// billing periods from DynamoDB, the poller's accounts) before any
// Postgres transaction opens.
func (s *Store) prepare(ctx context.Context, r Request) (Request, scoped, error) {
	r, err := r.Normalize(s.now().UTC(), s.window)
	if err != nil {
		return r, scoped{}, err
	}
	var sc scoped
	if slices.Contains(r.Kinds, KindAccount) {
		if s.accounts == nil {
			return r, sc, apperr.Invalid("kinds: account needs the poller's account list, which this process does not have")
		}
		if sc.accounts, err = s.accounts.Accounts(ctx); err != nil {
			return r, sc, apperr.Wrap(err, apperr.CodeUnavailable, "could not list the connected accounts")
		}
	}
	if !slices.Contains(r.Kinds, KindBillingAttempt) {
		return r, sc, nil
	}
	if s.billing == nil {
		return r, sc, apperr.Invalid("kinds: billing_attempt needs the billing core, which this process does not run")
	}
	if sc.periods, err = s.billing.PeriodsToReconcile(ctx); err != nil {
		return r, sc, apperr.Wrap(err, apperr.CodeUnavailable, "could not read the billing periods")
	}
	return r, sc, nil
}

// scoped is what a run's scope holds outside Postgres, read before its
// transaction opens.
type scoped struct {
	periods  []billing.Period
	accounts []string
}

func (s *Store) start(ctx context.Context, tx pgx.Tx, r Request, sc scoped, actor string) (Run, error) {
	periods := sc.periods
	now := s.now().UTC()
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return Run{}, errorf("run id: %w", err)
	}
	run := Run{ID: "rec_" + hex.EncodeToString(b[:]), Status: StatusRunning, DryRun: r.DryRun, Since: r.Since,
		Kinds: r.Kinds, CreatedBy: actor, CreatedAt: now}
	if _, err := tx.Exec(ctx, `INSERT INTO reconciliations (id, status, dry_run, since, kinds, matched, created_by, created_at)
		VALUES ($1, 'running', $2, $3, $4, 0, $5, $6)`, run.ID, run.DryRun, run.Since, run.Kinds, actor, now); err != nil {
		return Run{}, errorf("record run: %w", err)
	}
	var union string
	for _, k := range r.Kinds {
		if q, ok := scope[k]; ok {
			if union != "" {
				union += " UNION ALL "
			}
			union += "(" + q + ")"
		}
	}
	if union != "" {
		tag, err := tx.Exec(ctx, `INSERT INTO reconcile_items (reconciliation_id, seq, kind, object_id, stripe_account, purchase, created)
			SELECT $2, row_number() OVER (ORDER BY s.stripe_account, s.kind, s.created, s.object_id), s.*
			FROM (`+union+`) AS s (kind, object_id, stripe_account, purchase, created)`, run.Since, run.ID)
		if err != nil {
			return Run{}, errorf("list objects in scope: %w", err)
		}
		run.Matched = int(tag.RowsAffected())
	}
	// The billing attempts, sorted by account as the others are.
	slices.SortFunc(periods, func(a, b billing.Period) int {
		return strings.Compare(a.PaymentDetails.StripeAccount+"|"+a.BillingDate.String(), b.PaymentDetails.StripeAccount+"|"+b.BillingDate.String())
	})
	for _, p := range periods {
		// A bank debit waiting to settle is named by its PaymentIntent; an
		// attempt whose outcome is unknown by its idempotency key (no
		// PaymentIntent is known until Stripe is asked).
		var objects []string
		if p.Status == billing.ACHSent && p.TransactionID != "" {
			objects = append(objects, p.TransactionID)
		}
		if p.InFlightKey != "" {
			objects = append(objects, p.InFlightKey)
		}
		for _, object := range objects {
			run.Matched++
			if _, err := tx.Exec(ctx, `INSERT INTO reconcile_items (reconciliation_id, seq, kind, object_id, stripe_account, period, created)
				VALUES ($1, $2, 'billing_attempt', $3, $4, $5, $6)`, run.ID, run.Matched, object, p.PaymentDetails.StripeAccount,
				periodRef(p.AccountID, p.SubscriptionID, p.BillingDate), p.BillingDate.Time()); err != nil {
				return Run{}, errorf("list billing attempts in scope: %w", err)
			}
		}
	}
	// The connected accounts, less the platform and those the registry
	// already holds closed (the poller stops walking them).
	if len(sc.accounts) > 0 {
		tag, err := tx.Exec(ctx, `INSERT INTO reconcile_items (reconciliation_id, seq, kind, object_id, stripe_account, created)
			SELECT $1, $2 + row_number() OVER (ORDER BY a), 'account', a, a, $5
			FROM (SELECT DISTINCT unnest($3::text[]) AS a) accounts
			WHERE a <> $4 AND NOT EXISTS (SELECT 1 FROM connected_accounts c WHERE c.account = a AND c.status = 'closed')`,
			run.ID, run.Matched, sc.accounts, s.platform, now)
		if err != nil {
			return Run{}, errorf("list connected accounts in scope: %w", err)
		}
		run.Matched += int(tag.RowsAffected())
	}
	if _, err := tx.Exec(ctx, `UPDATE reconciliations SET matched = $2 WHERE id = $1`, run.ID, run.Matched); err != nil {
		return Run{}, errorf("record run: %w", err)
	}
	return run, nil
}

const runColumns = `id, status, dry_run, since, kinds, matched, checked, drifted, healed, failed, created_by, created_at, finished_at`

func scanRun(row pgx.Row) (Run, error) {
	var r Run
	var finished *time.Time
	err := row.Scan(&r.ID, &r.Status, &r.DryRun, &r.Since, &r.Kinds, &r.Matched, &r.Checked, &r.Drifted, &r.Healed, &r.Failed,
		&r.CreatedBy, &r.CreatedAt, &finished)
	if finished != nil {
		r.FinishedAt = *finished
	}
	return r, err
}

// Get reads a run.
func (s *Store) Get(ctx context.Context, id string) (Run, error) {
	r, err := scanRun(s.pool.QueryRow(ctx, `SELECT `+runColumns+` FROM reconciliations WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Run{}, apperr.New(apperr.CodeNotFound, "reconciliation %s not found", id)
	}
	if err != nil {
		return Run{}, apperr.Wrap(err, apperr.CodeUnavailable, "could not read reconciliation %s", id)
	}
	return r, nil
}

// Recent lists the latest runs, newest first.
func (s *Store) Recent(ctx context.Context, n int) ([]Run, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+runColumns+` FROM reconciliations ORDER BY created_at DESC LIMIT $1`, n)
	if err != nil {
		return nil, apperr.Wrap(err, apperr.CodeUnavailable, "could not list reconciliations")
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Run, error) { return scanRun(row) })
	if err != nil {
		return nil, apperr.Wrap(err, apperr.CodeUnavailable, "could not list reconciliations")
	}
	return out, nil
}

// Findings lists a run's findings in the order they were found, those
// after item number after, at most limit; next is the after of the next
// page (0: none).
func (s *Store) Findings(ctx context.Context, id string, after, limit int) (list []Finding, next int, err error) {
	if _, err := s.Get(ctx, id); err != nil {
		return nil, 0, err
	}
	rows, err := s.pool.Query(ctx, `SELECT seq, object_id, kind, stripe_account, local_state, stripe_state, action, coalesce(error, ''), at
		FROM reconcile_findings WHERE reconciliation_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`, id, after, limit+1)
	if err != nil {
		return nil, 0, apperr.Wrap(err, apperr.CodeUnavailable, "could not list the findings of %s", id)
	}
	var seqs []int
	list, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Finding, error) {
		var f Finding
		var seq int
		err := row.Scan(&seq, &f.Object, &f.Kind, &f.StripeAccount, &f.Local, &f.Stripe, &f.Action, &f.Error, &f.At)
		seqs = append(seqs, seq)
		return f, err
	})
	if err != nil {
		return nil, 0, apperr.Wrap(err, apperr.CodeUnavailable, "could not list the findings of %s", id)
	}
	if len(list) > limit {
		return list[:limit], seqs[limit-1], nil
	}
	return list, 0, nil
}

// item is one object of a run.
type item struct {
	seq           int
	kind          string
	objectID      string
	stripeAccount string
	purchase      uuid.UUID // a purchase's object
	period        string    // a billing attempt's (periodRef)
	created       time.Time
}

// periodRef names a billing period in an item: account, subscription and
// date, which the billing core's ids never contain a tab in.
func periodRef(account, sub string, d dates.Date) string {
	return account + "\t" + sub + "\t" + d.String()
}

func parsePeriodRef(ref string) (account, sub string, d dates.Date, err error) {
	parts := strings.Split(ref, "\t")
	if len(parts) != 3 {
		return "", "", d, fmt.Errorf("billing period %q is not account, subscription and date", clip(ref))
	}
	d, err = dates.Parse(parts[2])
	return parts[0], parts[1], d, err
}

func (s *Store) pending(ctx context.Context, id string, n int) ([]item, error) {
	rows, err := s.pool.Query(ctx, `SELECT seq, kind, object_id, stripe_account, coalesce(purchase, '00000000-0000-0000-0000-000000000000'),
			coalesce(period, ''), created FROM reconcile_items
		WHERE reconciliation_id = $1 AND outcome IS NULL ORDER BY seq LIMIT $2`, id, n)
	if err != nil {
		return nil, errorf("%s: pending items: %w", id, err)
	}
	items, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (item, error) {
		var it item
		err := row.Scan(&it.seq, &it.kind, &it.objectID, &it.stripeAccount, &it.purchase, &it.period, &it.created)
		return it, err
	})
	if err != nil {
		return nil, errorf("%s: pending items: %w", id, err)
	}
	return items, nil
}

// localState is what the service holds for an item now.
type localState struct {
	exists       bool
	fulfilled    bool
	kind         string // the purchase's kind
	payment      string // payment status, "" without a row
	subscription string // subscription status, "" without a row
	// A billing attempt's period: its status and the PaymentIntent of its
	// latest attempt.
	period, transaction string
	// An account: closed in the poller's registry.
	closed bool
}

func (l localState) String(kind string) string {
	if kind == KindAccount {
		if l.closed {
			return "account closed (no longer polled)"
		}
		return "account polled"
	}
	if kind == KindBillingAttempt {
		if !l.exists {
			return "billing period missing"
		}
		return "billing period " + l.period
	}
	if !l.exists {
		return "purchase missing"
	}
	purchase := "purchase new"
	if l.fulfilled {
		purchase = "purchase fulfilled"
	}
	status := l.payment
	if kind == KindSubscription {
		status = l.subscription
	}
	if status == "" {
		status = "untracked"
	}
	return fmt.Sprintf("%s %s, %s", kind, status, purchase)
}

func (s *Store) local(ctx context.Context, it item) (localState, error) {
	var l localState
	if it.kind == KindAccount {
		var status string
		err := s.pool.QueryRow(ctx, `SELECT status FROM connected_accounts WHERE account = $1`, it.objectID).Scan(&status)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return l, errorf("read account %s: %w", it.objectID, err)
		}
		l.exists, l.closed = true, status == "closed"
		return l, nil
	}
	if it.kind == KindBillingAttempt {
		if s.billing == nil {
			return l, errorf("billing attempt %s: no billing core in this process", it.objectID)
		}
		account, sub, d, err := parsePeriodRef(it.period)
		if err != nil {
			return l, err
		}
		p, err := s.billing.GetPeriod(ctx, account, sub, d)
		if errors.Is(err, apperr.ErrNotFound) {
			return l, nil
		}
		if err != nil {
			return l, errorf("read billing period %s %s: %w", sub, d, err)
		}
		l.exists, l.period, l.transaction = true, string(p.Status), p.TransactionID
		return l, nil
	}
	err := s.pool.QueryRow(ctx, `SELECT p.fulfilled, p.kind::text,
			coalesce((SELECT status::text FROM payments WHERE id = $2 AND purchase = p.id), ''),
			coalesce((SELECT status::text FROM subscriptions WHERE id = $2 AND purchase = p.id), '')
		FROM purchases p WHERE p.id = $1`, it.purchase, it.objectID).Scan(&l.fulfilled, &l.kind, &l.payment, &l.subscription)
	if errors.Is(err, pgx.ErrNoRows) {
		return l, nil
	}
	if err != nil {
		return l, errorf("read purchase %s: %w", it.purchase, err)
	}
	l.exists = true
	return l, nil
}
