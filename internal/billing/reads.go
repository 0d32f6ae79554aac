package billing

import (
	"context"
	"sort"
)

// GetSubscription reads one subscription.
func (s *Service) GetSubscription(ctx context.Context, account, sub string) (Subscription, error) {
	return s.store.GetSubscription(ctx, account, sub)
}

// ListSubscriptions pages through an account's subscriptions.
func (s *Service) ListSubscriptions(ctx context.Context, account string, limit int32, cursor string) (Page[Subscription], error) {
	return s.store.ListSubscriptions(ctx, account, limit, cursor)
}

// ListReceipts pages through an account's unexpired receipts, newest first.
func (s *Service) ListReceipts(ctx context.Context, account string, limit int32, cursor string) (Page[Receipt], error) {
	return s.store.ListReceipts(ctx, account, s.now(), s.cfg.ReceiptTTL, limit, cursor)
}

// ListHistory pages through a subscription's history; apperr.ErrNotFound when the
// account has no such subscription.
func (s *Service) ListHistory(ctx context.Context, account, sub string, limit int32, cursor string) (Page[HistoryEntry], error) {
	if _, err := s.store.GetSubscription(ctx, account, sub); err != nil {
		return Page[HistoryEntry]{}, err
	}
	return s.store.ListHistory(ctx, account, sub, limit, cursor)
}

// PeriodsPage pages through a subscription's periods, newest first (the
// console's subscription page; a page at a time, however many periods a
// long-lived subscription has).
func (s *Service) PeriodsPage(ctx context.Context, account, sub string, limit int32, cursor string) (Page[Period], error) {
	return s.store.ListPeriodsPage(ctx, account, sub, limit, cursor)
}

// OpenPeriods reads at most limit periods of a subscription that an
// operator can still act on or must know about: SCHEDULED or ERROR (waive,
// pay now), or with an attempt in flight. Oldest first.
func (s *Service) OpenPeriods(ctx context.Context, account, sub string, limit int32) ([]Period, error) {
	return s.store.ListOpenPeriods(ctx, account, sub, limit)
}

// PeriodsToWatch reads the periods of an account that an operator must
// see: those whose collection attempt has no recorded outcome
// (docs/design.md §8 "Failures": every change of their subscription is
// refused until the next collection asks Stripe), and those left unpaid
// (ERROR, STALE).
func (s *Service) PeriodsToWatch(ctx context.Context, account string) (PeriodsToWatch, error) {
	all, err := s.store.ListPeriodsToWatch(ctx, account)
	if err != nil {
		return PeriodsToWatch{}, err
	}
	var w PeriodsToWatch
	for _, p := range all {
		if p.InFlightKey != "" {
			w.InFlight = append(w.InFlight, p)
		}
		if p.Status == Error || p.Status == Stale {
			w.Unpaid = append(w.Unpaid, p)
		}
	}
	return w, nil
}

// PeriodsToWatch is what PeriodsToWatch finds, by reason (a period can be
// in both: a retry of an ERROR period whose outcome is unknown).
type PeriodsToWatch struct {
	InFlight []Period
	Unpaid   []Period
}

// FindSubscriptions finds subscriptions by id, Stripe customer or email, in
// any account (subscriptions created before lookups existed: by account).
func (s *Service) FindSubscriptions(ctx context.Context, by LookupBy, value string, limit int32) ([]Subscription, error) {
	return s.store.FindSubscriptions(ctx, by, value, limit)
}

// HistoryNewestFirst reads the whole history of a subscription, the most
// recent change first (the store keeps it by billing date, so every entry is
// read: a subscription has a few per period).
func (s *Service) HistoryNewestFirst(ctx context.Context, account, sub string) ([]HistoryEntry, error) {
	var all []HistoryEntry
	cursor := ""
	for {
		page, err := s.ListHistory(ctx, account, sub, 1000, cursor)
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
func sortNewestFirst(h []HistoryEntry) {
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
