package billing

import (
	"context"
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

// ListHistory pages through a subscription's history; ErrNotFound when the
// account has no such subscription.
func (s *Service) ListHistory(ctx context.Context, account, sub string, limit int32, cursor string) (Page[HistoryEntry], error) {
	if _, err := s.store.GetSubscription(ctx, account, sub); err != nil {
		return Page[HistoryEntry]{}, err
	}
	return s.store.ListHistory(ctx, account, sub, limit, cursor)
}
