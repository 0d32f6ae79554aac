package stripecharge

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v76"

	"github.com/stripe-payments/stripe-payments/internal/billing/model"
)

// FindAttempt asks Stripe for the PaymentIntent an attempt whose outcome is
// unknown created: first the Search API by the metadata the service set
// (query fields metadata['key']:'value'), then, because search lags writes
// (usually under a minute, up to an hour in an outage), the customer's
// PaymentIntents created since the attempt started (List, strongly
// consistent). A candidate counts only when it is on the account, of the
// customer, and for the amount and currency of the attempt, with all of its
// metadata: metadata alone is merchant-writable. Found is false when
// neither sees it: Stripe never created it. The error is non-nil when Stripe
// could not be asked (nothing can be concluded then).
func (c *Charger) FindAttempt(ctx context.Context, q model.AttemptQuery) (model.Lookup, error) {
	var found []*stripe.PaymentIntent
	clauses := make([]string, 0, len(q.Metadata))
	for _, k := range []string{model.MetaAccount, model.MetaSubscription, model.MetaDate, model.MetaAttempt} {
		if v, ok := q.Metadata[k]; ok {
			clauses = append(clauses, fmt.Sprintf("metadata['%s']:'%s'", k, searchEscape(v)))
		}
	}
	sp := &stripe.PaymentIntentSearchParams{SearchParams: stripe.SearchParams{Query: strings.Join(clauses, " AND "), Context: ctx}}
	sp.Limit = stripe.Int64(20)
	sp.AddExpand("data.latest_charge")
	if q.StripeAccount != "" {
		sp.SetStripeAccount(q.StripeAccount)
	}
	if err := c.limiter.Wait(ctx); err != nil {
		return model.Lookup{}, fmt.Errorf("rate limiter: %w", err)
	}
	c.requests.Add(1)
	it := c.api.PaymentIntents.Search(sp)
	for it.Next() {
		if matches(q, it.PaymentIntent()) {
			found = append(found, it.PaymentIntent())
		}
	}
	how := "search"
	if err := it.Err(); err != nil && !searchUnavailable(err) {
		return model.Lookup{}, fmt.Errorf("search payment intents: %w", err)
	}
	if len(found) == 0 {
		how = "list"
		lp := &stripe.PaymentIntentListParams{Customer: stripe.String(q.Customer),
			CreatedRange: &stripe.RangeQueryParams{GreaterThanOrEqual: q.Since.Add(-5 * time.Minute).Unix()}}
		lp.Context = ctx
		lp.Limit = stripe.Int64(100)
		lp.AddExpand("data.latest_charge")
		if q.StripeAccount != "" {
			lp.SetStripeAccount(q.StripeAccount)
		}
		if err := c.limiter.Wait(ctx); err != nil {
			return model.Lookup{}, fmt.Errorf("rate limiter: %w", err)
		}
		c.requests.Add(1)
		li := c.api.PaymentIntents.List(lp)
		for li.Next() {
			if matches(q, li.PaymentIntent()) {
				found = append(found, li.PaymentIntent())
			}
		}
		if err := li.Err(); err != nil {
			return model.Lookup{}, fmt.Errorf("list payment intents: %w", err)
		}
	}
	if len(found) == 0 {
		return model.Lookup{}, nil
	}
	// One attempt makes one PaymentIntent (one idempotency key); should
	// there be more, money that moved wins over a failure.
	best := found[0]
	for _, pi := range found[1:] {
		if rank(pi.Status) > rank(best.Status) {
			best = pi
		}
	}
	return model.Lookup{Found: true, Result: fromPaymentIntent(best), How: how}, nil
}

func rank(s stripe.PaymentIntentStatus) int {
	switch s {
	case stripe.PaymentIntentStatusSucceeded:
		return 3
	case stripe.PaymentIntentStatusProcessing:
		return 2
	}
	return 1
}

// matches: pi is the PaymentIntent q looks for.
func matches(q model.AttemptQuery, pi *stripe.PaymentIntent) bool {
	if pi == nil || q.Exclude[pi.ID] || pi.Amount != q.Amount || !strings.EqualFold(string(pi.Currency), q.Currency) {
		return false
	}
	if pi.Customer == nil || pi.Customer.ID != q.Customer {
		return false
	}
	if pi.Created < q.Since.Add(-5*time.Minute).Unix() {
		return false
	}
	for k, v := range q.Metadata {
		if k == model.MetaAttempt {
			// PaymentIntents made before the attempt number was set carry
			// none; one that carries another number is another attempt.
			if got, ok := pi.Metadata[k]; ok && got != v {
				return false
			}
			continue
		}
		if pi.Metadata[k] != v {
			return false
		}
	}
	return true
}

// searchEscape escapes a value for a single-quoted search string.
func searchEscape(v string) string {
	return strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v)
}

// searchUnavailable: Stripe refused the search itself (search is not
// available everywhere, e.g. to merchants in India); the list still answers.
func searchUnavailable(err error) bool {
	var se *stripe.Error
	return errors.As(err, &se) && se.HTTPStatusCode >= 400 && se.HTTPStatusCode < 500 &&
		se.HTTPStatusCode != http.StatusTooManyRequests && se.HTTPStatusCode != http.StatusUnauthorized
}

// Retrieve reads one PaymentIntent on an account ("" : the platform).
func (c *Charger) Retrieve(ctx context.Context, account, id string) (*stripe.PaymentIntent, error) {
	p := &stripe.PaymentIntentParams{}
	p.Context = ctx
	p.AddExpand("latest_charge") // how it was paid, for a receipt
	if account != "" {
		p.SetStripeAccount(account)
	}
	if err := c.limiter.Wait(ctx); err != nil {
		return nil, fmt.Errorf("rate limiter: %w", err)
	}
	c.requests.Add(1)
	pi, err := c.api.PaymentIntents.Get(id, p)
	if err != nil {
		return nil, fmt.Errorf("retrieve payment intent %s: %w", id, err)
	}
	return pi, nil
}
