// Package purchase is the backend side of a purchase (docs/design.md §4 and the
// reference's purchase flows): store the incomplete purchase, then talk to
// Stripe on the merchant's connected account — a PaymentIntent for a legacy
// purchase; attach the payment method, invoice, invoice items, finalize and
// pay for a one-off product purchase; a Subscription for a recurring one.
// Tracking (payment paid, subscription active, fulfilment) then follows from
// Stripe's events.
//
// Retries. Every Stripe call carries an idempotency key derived from the
// purchase ("<purchase id>:<step>"), so re-running a purchase's steps never
// creates a second Stripe object while Stripe remembers the key (24 h). A
// client retries POST /v1/purchases with the same Idempotency-Key header,
// which maps to the same purchase (unique per account): the steps re-run with
// the same keys, and Stripe answers each with its first answer. A purchase
// whose Stripe work is done is answered from the database; one left
// unfinished for more than ResumeWindow (23 h) is refused rather than
// resumed outside Stripe's idempotency window.
package purchase

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/stripeid"
	"github.com/stripe-payments/stripe-payments/internal/tracking"
)

// ResumeWindow is how long after its creation an unfinished purchase may be
// resumed by a retry: inside Stripe's 24 h idempotency-key retention.
const ResumeWindow = 23 * time.Hour

// Modes of a purchase request.
const (
	ModeLegacy  = "legacy"
	ModeProduct = "product"
)

// Store is the tracking storage a purchase needs (tracking.Store).
type Store interface {
	CreatePurchase(ctx context.Context, np tracking.NewPurchase) (tracking.Purchase, bool, error)
	GetPurchase(ctx context.Context, id uuid.UUID) (tracking.Purchase, error)
	RecordPayment(ctx context.Context, purchase uuid.UUID, paymentIntent, invoice string) error
	RecordInvoice(ctx context.Context, purchase uuid.UUID, invoice string) error
	MarkPaymentPaid(ctx context.Context, paymentIntent string) error
	RecordSubscription(ctx context.Context, purchase uuid.UUID, subscription string) error
}

// Request is the body of POST /v1/purchases.
type Request struct {
	Account        string `json:"account"`
	StripeAccount  string `json:"stripe_account"`
	Mode           string `json:"mode"`
	Amount         int64  `json:"amount,omitempty"`
	Currency       string `json:"currency,omitempty"`
	Customer       string `json:"customer,omitempty"`
	PaymentMethod  string `json:"payment_method,omitempty"`
	Items          []Item `json:"items,omitempty"`
	RecurringPrice string `json:"recurring_price,omitempty"`
}

// Item is one line of a one-off product purchase.
type Item struct {
	Price    string `json:"price"`
	Quantity int64  `json:"quantity"`
}

// Result is a purchase as the API answers it.
type Result struct {
	Purchase tracking.Purchase
	// ClientSecret of a legacy purchase's PaymentIntent (never stored).
	ClientSecret string
	// Replayed: the request's Idempotency-Key named an existing purchase.
	Replayed bool
	// StripeStatus is the status Stripe answered for the object it created
	// (PaymentIntent, invoice or subscription).
	StripeStatus string
}

// Service runs purchases.
type Service struct {
	store  Store
	stripe *client.API
	log    *slog.Logger
	now    func() time.Time
}

// NewService returns a service. stripe is the API client (STRIPE_API_BASE).
func NewService(store Store, stripe *client.API, log *slog.Logger) *Service {
	return &Service{store: store, stripe: stripe, log: log, now: time.Now}
}

var (
	reCurrency = regexp.MustCompile(`^[a-z]{3}$`)
	reKey      = regexp.MustCompile(`^[\x21-\x7e]{1,255}$`)
)

// Validate checks a request completely before anything is stored or sent.
func (r Request) Validate() error {
	if _, err := uuid.Parse(r.Account); err != nil {
		return apperr.Invalid("account must be a UUID")
	}
	if !stripeid.Valid(r.StripeAccount, "acct_") {
		return apperr.Invalid("stripe_account must be a Stripe account id (acct_...)")
	}
	switch r.Mode {
	case ModeLegacy:
		if r.Amount < 1 || r.Amount > 99_999_999 {
			return apperr.Invalid("amount must be an integer from 1 to 99999999 (minor units)")
		}
		if !reCurrency.MatchString(r.Currency) {
			return apperr.Invalid("currency must be a lowercase ISO 4217 code, e.g. usd")
		}
		if r.Customer != "" || r.PaymentMethod != "" || len(r.Items) > 0 || r.RecurringPrice != "" {
			return apperr.Invalid("a legacy purchase takes amount and currency only")
		}
	case ModeProduct:
		if !stripeid.Valid(r.Customer, "cus_") {
			return apperr.Invalid("customer must be a Stripe customer id (cus_...)")
		}
		if !stripeid.Valid(r.PaymentMethod, "pm_") {
			return apperr.Invalid("payment_method must be a Stripe payment method id (pm_...)")
		}
		if r.Amount != 0 || r.Currency != "" {
			return apperr.Invalid("a product purchase takes its amounts from its prices: no amount or currency")
		}
		if (len(r.Items) == 0) == (r.RecurringPrice == "") {
			return apperr.Invalid("a product purchase has either items or a recurring_price")
		}
		if r.RecurringPrice != "" && !stripeid.Valid(r.RecurringPrice, "price_") {
			return apperr.Invalid("recurring_price must be a Stripe price id (price_...)")
		}
		if len(r.Items) > 50 {
			return apperr.Invalid("at most 50 items")
		}
		for i, it := range r.Items {
			if !stripeid.Valid(it.Price, "price_") {
				return apperr.Invalid("items[%d].price must be a Stripe price id (price_...)", i)
			}
			if it.Quantity < 1 || it.Quantity > 10_000 {
				return apperr.Invalid("items[%d].quantity must be from 1 to 10000", i)
			}
		}
	default:
		return apperr.Invalid("mode must be legacy or product")
	}
	return nil
}

func (r Request) kind() tracking.Kind {
	switch {
	case r.Mode == ModeLegacy:
		return tracking.KindLegacy
	case r.RecurringPrice != "":
		return tracking.KindRecurring
	default:
		return tracking.KindOneOff
	}
}

func (r Request) hash() string {
	b, _ := json.Marshal(r)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// ValidateIdempotencyKey checks a client's Idempotency-Key ("" is allowed:
// then every request is a new purchase).
func ValidateIdempotencyKey(key string) error {
	if key != "" && !reKey.MatchString(key) {
		return apperr.Invalid("Idempotency-Key must be 1 to 255 printable ASCII characters")
	}
	return nil
}

// Create runs a purchase: validate, store the incomplete purchase, then the
// Stripe steps of its mode, recording what Stripe created before answering.
func (s *Service) Create(ctx context.Context, req Request, idempotencyKey string) (Result, error) {
	if err := req.Validate(); err != nil {
		return Result{}, err
	}
	if err := ValidateIdempotencyKey(idempotencyKey); err != nil {
		return Result{}, err
	}
	np := tracking.NewPurchase{Account: uuid.MustParse(req.Account), StripeAccount: req.StripeAccount, Kind: req.kind(),
		Customer: req.Customer, IdempotencyKey: idempotencyKey, RequestHash: req.hash()}
	p, created, err := s.store.CreatePurchase(ctx, np)
	if errors.Is(err, tracking.ErrIdempotencyMismatch) {
		return Result{}, err
	}
	if err != nil {
		return Result{}, apperr.Wrap(err, apperr.CodeUnavailable, "could not store the purchase")
	}
	log := s.log.With("purchase_id", p.ID, "stripe_account", p.StripeAccount, "kind", string(p.Kind))
	res := Result{Replayed: !created}
	if !created {
		log.Info("purchase request retried", "idempotency_key_used", true)
		if done, err := s.answerDone(ctx, p, &res); done || err != nil {
			return res, err
		}
		if s.now().Sub(p.Created) > ResumeWindow {
			return Result{}, apperr.New(apperr.CodeConflict,
				"purchase %s was left unfinished more than %s ago and cannot be resumed safely: start a new purchase", p.ID, ResumeWindow)
		}
	} else {
		log.Info("purchase stored")
	}
	st := steps{svc: s, p: p, req: req, log: log}
	switch p.Kind {
	case tracking.KindLegacy:
		err = st.legacy(ctx, &res)
	case tracking.KindOneOff:
		err = st.oneOff(ctx, &res)
	case tracking.KindRecurring:
		err = st.recurring(ctx, &res)
	}
	if err != nil {
		log.Warn("purchase failed at Stripe", "error", err)
		return Result{}, err
	}
	if res.Purchase, err = s.store.GetPurchase(ctx, p.ID); err != nil {
		return Result{}, apperr.Wrap(err, apperr.CodeUnavailable, "could not read the purchase")
	}
	return res, nil
}

// answerDone answers a retried request whose Stripe work is already done
// from the database (a legacy purchase reads its client secret back from
// Stripe; nothing is created).
func (s *Service) answerDone(ctx context.Context, p tracking.Purchase, res *Result) (bool, error) {
	res.Purchase = p
	switch {
	case p.Kind == tracking.KindLegacy && p.PaymentIntent != "":
		params := &stripe.PaymentIntentParams{}
		params.Context = ctx
		params.SetStripeAccount(p.StripeAccount)
		pi, err := s.stripe.PaymentIntents.Get(p.PaymentIntent, params)
		if err != nil {
			return true, stripeError(err, "read the payment intent")
		}
		res.ClientSecret = pi.ClientSecret
		return true, nil
	case p.Kind == tracking.KindOneOff && (p.PaymentStatus == tracking.PaymentPaid || p.Fulfilled):
		return true, nil
	case p.Kind == tracking.KindRecurring && p.Subscription != "":
		return true, nil
	}
	return false, nil
}

// steps are the Stripe calls of one purchase.
type steps struct {
	svc *Service
	p   tracking.Purchase
	req Request
	log *slog.Logger
}

// params returns Stripe request params on the connected account with the
// idempotency key of step, and the purchase's metadata when meta.
func (st steps) params(ctx context.Context, step string, meta bool) stripe.Params {
	var p stripe.Params
	p.Context = ctx
	p.SetStripeAccount(st.p.StripeAccount)
	p.SetIdempotencyKey(st.p.ID.String() + ":" + step)
	if meta {
		p.AddMetadata("purchase_id", st.p.ID.String())
		p.AddMetadata("account", st.p.Account.String())
	}
	return p
}

func (st steps) legacy(ctx context.Context, res *Result) error {
	params := &stripe.PaymentIntentParams{
		Params:   st.params(ctx, "payment_intent", true),
		Amount:   stripe.Int64(st.req.Amount),
		Currency: stripe.String(st.req.Currency),
	}
	pi, err := st.svc.stripe.PaymentIntents.New(params)
	if err != nil {
		return stripeError(err, "create the payment intent")
	}
	if err := st.svc.store.RecordPayment(ctx, st.p.ID, pi.ID, ""); err != nil {
		return apperr.Wrap(err, apperr.CodeUnavailable, "could not store the payment")
	}
	res.ClientSecret = pi.ClientSecret
	res.StripeStatus = string(pi.Status)
	return nil
}

func (st steps) attach(ctx context.Context) error {
	params := &stripe.PaymentMethodAttachParams{
		Params:   st.params(ctx, "attach_payment_method", false),
		Customer: stripe.String(st.req.Customer),
	}
	if _, err := st.svc.stripe.PaymentMethods.Attach(st.req.PaymentMethod, params); err != nil {
		return stripeError(err, "attach the payment method")
	}
	return nil
}

// oneOff: attach, then a draft invoice that excludes pending items, its
// items attached to it explicitly (a concurrent purchase of the same customer
// can never sweep them up), finalize (which creates the PaymentIntent: the
// payment is stored, new, before it is paid), pay.
func (st steps) oneOff(ctx context.Context, res *Result) error {
	if err := st.attach(ctx); err != nil {
		return err
	}
	inv, err := st.svc.stripe.Invoices.New(&stripe.InvoiceParams{
		Params:                      st.params(ctx, "invoice", true),
		Customer:                    stripe.String(st.req.Customer),
		AutoAdvance:                 stripe.Bool(false),
		CollectionMethod:            stripe.String(string(stripe.InvoiceCollectionMethodChargeAutomatically)),
		DefaultPaymentMethod:        stripe.String(st.req.PaymentMethod),
		PendingInvoiceItemsBehavior: stripe.String("exclude"),
	})
	if err != nil {
		return stripeError(err, "create the invoice")
	}
	if err := st.svc.store.RecordInvoice(ctx, st.p.ID, inv.ID); err != nil {
		return apperr.Wrap(err, apperr.CodeUnavailable, "could not store the invoice")
	}
	for i, it := range st.req.Items {
		_, err := st.svc.stripe.InvoiceItems.New(&stripe.InvoiceItemParams{
			Params:   st.params(ctx, "invoice_item:"+strconv.Itoa(i), true),
			Customer: stripe.String(st.req.Customer),
			Invoice:  stripe.String(inv.ID),
			Price:    stripe.String(it.Price),
			Quantity: stripe.Int64(it.Quantity),
		})
		if err != nil {
			return stripeError(err, fmt.Sprintf("create invoice item %d", i))
		}
	}
	inv, err = st.svc.stripe.Invoices.FinalizeInvoice(inv.ID, &stripe.InvoiceFinalizeInvoiceParams{
		Params:      st.params(ctx, "invoice_finalize", false),
		AutoAdvance: stripe.Bool(false),
	})
	if err != nil {
		return stripeError(err, "finalize the invoice")
	}
	pi := ""
	if inv.PaymentIntent != nil {
		pi = inv.PaymentIntent.ID
		if err := st.svc.store.RecordPayment(ctx, st.p.ID, pi, inv.ID); err != nil {
			return apperr.Wrap(err, apperr.CodeUnavailable, "could not store the payment")
		}
	}
	if inv.Status != stripe.InvoiceStatusPaid { // a zero total is paid on finalization
		inv, err = st.svc.stripe.Invoices.Pay(inv.ID, &stripe.InvoicePayParams{
			Params:        st.params(ctx, "invoice_pay", false),
			PaymentMethod: stripe.String(st.req.PaymentMethod),
		})
		if err != nil {
			return stripeError(err, "pay the invoice")
		}
	}
	res.StripeStatus = string(inv.Status)
	if inv.Status == stripe.InvoiceStatusPaid && pi != "" {
		// "Store completed payment"; the payment_intent.succeeded event
		// fulfils (or already did).
		if err := st.svc.store.MarkPaymentPaid(ctx, pi); err != nil {
			return apperr.Wrap(err, apperr.CodeUnavailable, "could not store the payment")
		}
	}
	return nil
}

// recurring: attach, then the subscription with error_if_incomplete, so a
// first payment that fails answers 402 and creates no subscription. The
// subscription is stored new: its activation event fulfils the purchase.
func (st steps) recurring(ctx context.Context, res *Result) error {
	if err := st.attach(ctx); err != nil {
		return err
	}
	sub, err := st.svc.stripe.Subscriptions.New(&stripe.SubscriptionParams{
		Params:               st.params(ctx, "subscription", true),
		Customer:             stripe.String(st.req.Customer),
		Items:                []*stripe.SubscriptionItemsParams{{Price: stripe.String(st.req.RecurringPrice), Quantity: stripe.Int64(1)}},
		DefaultPaymentMethod: stripe.String(st.req.PaymentMethod),
		PaymentBehavior:      stripe.String("error_if_incomplete"),
	})
	if err != nil {
		return stripeError(err, "create the subscription")
	}
	if err := st.svc.store.RecordSubscription(ctx, st.p.ID, sub.ID); err != nil {
		return apperr.Wrap(err, apperr.CodeUnavailable, "could not store the subscription")
	}
	res.StripeStatus = string(sub.Status)
	return nil
}

// Get reads a purchase.
func (s *Service) Get(ctx context.Context, id uuid.UUID) (tracking.Purchase, error) {
	p, err := s.store.GetPurchase(ctx, id)
	if err != nil {
		return tracking.Purchase{}, apperr.Ensure(err, apperr.CodeUnavailable, "could not read the purchase")
	}
	return p, nil
}

// stripeError maps a Stripe failure to the client's error: a declined
// payment is 402 payment_failed with Stripe's (client-safe) message; a
// request Stripe refuses (unknown price, customer, ...) is 400; a conflict on
// an idempotency key is 409; rate limiting is 503; anything else — 5xx,
// network, our credentials — is 502 upstream_error.
func stripeError(err error, what string) error {
	var se *stripe.Error
	if !errors.As(err, &se) {
		return apperr.Wrap(err, apperr.CodeUpstream, "Stripe could not be reached to %s", what)
	}
	switch {
	case se.Type == stripe.ErrorTypeCard || se.HTTPStatusCode == 402:
		return apperr.Wrap(err, apperr.CodePaymentFailed, "payment failed: %s", se.Msg)
	case se.HTTPStatusCode == 400 || se.HTTPStatusCode == 404:
		return apperr.Wrap(err, apperr.CodeInvalidParameter, "Stripe refused to %s: %s", what, se.Msg)
	case se.HTTPStatusCode == 409:
		return apperr.Wrap(err, apperr.CodeConflict, "Stripe reported a conflict trying to %s; retry later", what)
	case se.HTTPStatusCode == 429:
		return apperr.Wrap(err, apperr.CodeUnavailable, "Stripe is rate limiting; retry later")
	default:
		return apperr.Wrap(err, apperr.CodeUpstream, "Stripe failed to %s (status %d)", what, se.HTTPStatusCode)
	}
}
