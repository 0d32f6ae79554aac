package events

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
)

// Hydration states of a thin event's record (its `hydration` attribute).
const (
	// HydrationPending: recorded, not tried yet.
	HydrationPending = "pending"
	// HydrationRetrying: a try failed (last_error says why); it is retried.
	HydrationRetrying = "retrying"
	// HydrationHydrated: its snapshot event (v1) or its own handler (v2)
	// processed it.
	HydrationHydrated = "hydrated"
	// HydrationUnhandled: a v2 type the service has no handler for;
	// recorded with no effect.
	HydrationUnhandled = "unhandled"
	// HydrationRefused: the notification disagreed with Stripe's copy of
	// the event (last_error names the difference); the record is failed
	// and nothing was applied.
	HydrationRefused = "refused"
)

// NewThinRecord builds the record of a verified thin notification: status
// received, hydration pending, payload_kind thin. Its account is the
// event's context (platformAccount when it has none).
func NewThinRecord(t stripeevent.Thin, payload []byte, platformAccount string, ttl time.Duration, source stripeevent.Source, now time.Time) Record {
	account := t.Context
	if account == "" {
		account = platformAccount
	}
	created := t.Created.UTC().Truncate(time.Millisecond)
	return Record{
		ID: t.ID, Type: t.Type, StripeAccount: account, Created: created, Expiration: created.Add(ttl),
		Livemode: t.Livemode, Status: StatusReceived, ReceivedAt: now.UTC(), Source: source, Attempts: 1,
		Payload: payload, PayloadKind: stripeevent.KindThin, Hydration: HydrationPending,
		RelatedObject: t.RelatedObject.ID,
	}
}

// thinAttributes adds a thin record's own attributes.
func thinAttributes(r Record, av map[string]types.AttributeValue) {
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	if r.PayloadKind != "" {
		av["payload_kind"] = s(string(r.PayloadKind))
	}
	if r.SnapshotEvent != "" {
		av["snapshot_event"] = s(r.SnapshotEvent)
	}
	if r.Hydration != "" {
		av["hydration"] = s(r.Hydration)
	}
	if r.RelatedObject != "" {
		av["related_object"] = s(r.RelatedObject)
	}
	if r.Severity != "" {
		av["severity"] = s(r.Severity)
	}
}

// PutReceived writes a new thin record unless one with its id exists
// (ErrDuplicate): a redelivered notification never resets a hydrated one.
func (s *Store) PutReceived(ctx context.Context, r Record) error {
	av, err := attributes(r)
	if err != nil {
		return err
	}
	_, err = s.client.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(s.table), Item: av,
		ConditionExpression: aws.String("attribute_not_exists(id)"),
	})
	if isConditionFailed(err) {
		return fmt.Errorf("put thin event %s: %w", r.ID, ErrDuplicate)
	}
	if err != nil {
		return fmt.Errorf("put thin event %s: %w", r.ID, err)
	}
	return nil
}

// ThinHydrated is what a hydration settles on a thin record. All of it
// comes from Stripe's copy of the event, which replaces what the
// notification claimed when the record was written (a notification that
// disagreed was refused: the record may hold its claims until Stripe's own
// notification of the event is hydrated).
type ThinHydrated struct {
	Type          string
	StripeAccount string // the copy's context, or the platform account ("" leaves the record's)
	Created       time.Time
	RelatedObject string // "" leaves the record's
	// Hydration is HydrationHydrated or HydrationUnhandled.
	Hydration string
	// SnapshotEvent is the snapshot event a v1 type was hydrated into.
	SnapshotEvent string
	// Severity is a health event's (stripeevent.Severity*); "" for others.
	Severity string
}

// ThinDone marks a thin record processed as h says. The record must exist
// (apperr.ErrNotFound otherwise).
func (s *Store) ThinDone(ctx context.Context, id string, h ThinHydrated, at time.Time) error {
	created := h.Created.UTC().Truncate(time.Millisecond)
	r := Record{Created: created}
	u := expression.Set(expression.Name("status"), expression.Value(string(StatusProcessed))).
		Set(expression.Name("processed_at"), expression.Value(at.UTC().Format(bookkeepingTimeLayout))).
		Set(expression.Name("hydration"), expression.Value(h.Hydration)).
		Set(expression.Name("type"), expression.Value(h.Type)).
		Set(expression.Name("timestamp"), expression.Value(r.Timestamp())).
		Set(expression.Name("date"), expression.Value(r.Date())).
		Set(expression.Name("time"), expression.Value(r.Time())).
		Set(expression.Name("expiration"), expression.Value(created.Add(s.ttl).Unix())).
		Remove(expression.Name("last_error"))
	// Index keys cannot be empty: "" leaves the record's.
	for name, v := range map[string]string{"stripe_account": h.StripeAccount, "snapshot_event": h.SnapshotEvent,
		"related_object": h.RelatedObject, "severity": h.Severity} {
		if v != "" {
			u = u.Set(expression.Name(name), expression.Value(v))
		}
	}
	return s.update(ctx, id, u, expression.AttributeExists(expression.Name("id")), false)
}

// ThinRefused records a notification that disagreed with Stripe's copy of
// its event: status failed, hydration refused, lastError naming the
// difference. A record already processed (Stripe's own notification of
// the event was hydrated) is left as it is.
func (s *Store) ThinRefused(ctx context.Context, id, lastError string, attempts int) error {
	u := expression.Set(expression.Name("status"), expression.Value(string(StatusFailed))).
		Set(expression.Name("last_error"), expression.Value(truncate(lastError, MaxLastError))).
		Set(expression.Name("hydration"), expression.Value(HydrationRefused)).
		Set(expression.Name("attempts"), expression.Value(attempts))
	cond := expression.AttributeExists(expression.Name("id")).
		And(expression.Name("status").NotEqual(expression.Value(string(StatusProcessed))))
	return s.update(ctx, id, u, cond, true)
}

// ThinRetry records a failed hydration try on a thin record not processed
// yet: its last_error, the tries so far, hydration retrying, status
// received (a refused notification's record, being hydrated again from
// another delivery, is received again). A record already processed
// (another replica finished it) is left as it is.
func (s *Store) ThinRetry(ctx context.Context, id, lastError string, attempts int) error {
	u := expression.Set(expression.Name("last_error"), expression.Value(truncate(lastError, MaxLastError))).
		Set(expression.Name("hydration"), expression.Value(HydrationRetrying)).
		Set(expression.Name("status"), expression.Value(string(StatusReceived))).
		Set(expression.Name("attempts"), expression.Value(attempts))
	cond := expression.AttributeExists(expression.Name("id")).
		And(expression.Name("status").NotEqual(expression.Value(string(StatusProcessed))))
	return s.update(ctx, id, u, cond, true)
}
