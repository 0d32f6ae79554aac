// Package reads answers the API's and the console's questions about
// subscriptions, periods, receipts and history; it changes nothing.
package reads

import (
	"context"
	"sort"

	"github.com/stripe-payments/stripe-payments/internal/billing/env"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
)

// GetSubscription reads one subscription.
// Reads reads.
type Reads struct {
	*env.Env
}

func (r *Reads) GetSubscription(ctx context.Context, account, sub string) (model.Subscription, error) {
	return r.Store.GetSubscription(ctx, account, sub)
}

// ListSubscriptions pages through an account's subscriptions.
func (r *Reads) ListSubscriptions(ctx context.Context, account string, limit int32, cursor string) (model.Page[model.Subscription], error) {
	return r.Store.ListSubscriptions(ctx, account, limit, cursor)
}

// ListReceipts pages through an account's unexpired receipts, newest first.
func (r *Reads) ListReceipts(ctx context.Context, account string, limit int32, cursor string) (model.Page[model.Receipt], error) {
	return r.Store.ListReceipts(ctx, account, r.Now(), r.Cfg.ReceiptTTL, limit, cursor)
}

// ListHistory pages through a subscription's history; apperr.ErrNotFound when the
// account has no such subscription.
func (r *Reads) ListHistory(ctx context.Context, account, sub string, limit int32, cursor string) (model.Page[model.HistoryEntry], error) {
	if _, err := r.Store.GetSubscription(ctx, account, sub); err != nil {
		return model.Page[model.HistoryEntry]{}, err
	}
	return r.Store.ListHistory(ctx, account, sub, limit, cursor)
}

// PeriodsPage pages through a subscription's periods, newest first (the
// console's subscription page; a page at a time, however many periods a
// long-lived subscription has).
func (r *Reads) PeriodsPage(ctx context.Context, account, sub string, limit int32, cursor string) (model.Page[model.Period], error) {
	return r.Store.ListPeriodsPage(ctx, account, sub, limit, cursor)
}

// OpenPeriods reads at most limit periods of a subscription that an
// operator can still act on or must know about: SCHEDULED or ERROR (waive,
// pay now), or with an attempt in flight. Oldest first.
func (r *Reads) OpenPeriods(ctx context.Context, account, sub string, limit int32) ([]model.Period, error) {
	return r.Store.ListOpenPeriods(ctx, account, sub, limit)
}

// PeriodsToWatch reads the periods of an account that an operator must
// see: those whose collection attempt has no recorded outcome
// (docs/design.md §8 "Failures": every change of their subscription is
// refused until the next collection asks Stripe), and those left unpaid
// (ERROR, STALE).
func (r *Reads) PeriodsToWatch(ctx context.Context, account string) (PeriodsToWatch, error) {
	all, err := r.Store.ListPeriodsToWatch(ctx, account)
	if err != nil {
		return PeriodsToWatch{}, err
	}
	var w PeriodsToWatch
	for _, p := range all {
		if p.InFlightKey != "" {
			w.InFlight = append(w.InFlight, p)
		}
		if p.Status == model.Error || p.Status == model.Stale {
			w.Unpaid = append(w.Unpaid, p)
		}
	}
	return w, nil
}

// PeriodsToWatch is what PeriodsToWatch finds, by reason (a period can be
// in both: a retry of an ERROR period whose outcome is unknown).
type PeriodsToWatch struct {
	InFlight []model.Period
	Unpaid   []model.Period
}

// FindSubscriptions finds subscriptions by id, Stripe customer or email, in
// any account (subscriptions created before lookups existed: by account).
func (r *Reads) FindSubscriptions(ctx context.Context, by model.LookupBy, value string, limit int32) ([]model.Subscription, error) {
	return r.Store.FindSubscriptions(ctx, by, value, limit)
}

// HistoryNewestFirst reads the whole history of a subscription, the most
// recent change first (the store keeps it by billing date, so every entry is
// read: a subscription has a few per period).
func (r *Reads) HistoryNewestFirst(ctx context.Context, account, sub string) ([]model.HistoryEntry, error) {
	var all []model.HistoryEntry
	cursor := ""
	for {
		page, err := r.ListHistory(ctx, account, sub, 1000, cursor)
		if err != nil {
			return nil, err
		}
		all = append(all, page.Items...)
		if page.NextCursor == "" {
			sortNewestFirst(all)
			return all, nil
		}
		cursor = page.NextCursor
	}
}

// sortNewestFirst orders entries by the time of their change, latest
// first; within one instant, the later version first.
func sortNewestFirst(h []model.HistoryEntry) {
	sort.SliceStable(h, func(i, j int) bool {
		if !h[i].LastRunDate.Equal(h[j].LastRunDate) {
			return h[i].LastRunDate.After(h[j].LastRunDate)
		}
		if !h[i].BillingDate.Equal(h[j].BillingDate) {
			return h[i].BillingDate.After(h[j].BillingDate)
		}
		return h[i].Version > h[j].Version
	})
}
