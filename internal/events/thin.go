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

// ThinDone marks a thin record processed: hydration is HydrationHydrated
// or HydrationUnhandled, snapshotEvent the snapshot event it was hydrated
// into ("" for a v2 type). The record must exist (apperr.ErrNotFound otherwise).
func (s *Store) ThinDone(ctx context.Context, id, snapshotEvent, hydration string, at time.Time) error {
	u := expression.Set(expression.Name("status"), expression.Value(string(StatusProcessed))).
		Set(expression.Name("processed_at"), expression.Value(at.UTC().Format(bookkeepingTimeLayout))).
		Set(expression.Name("hydration"), expression.Value(hydration)).
		Remove(expression.Name("last_error"))
	if snapshotEvent != "" {
		u = u.Set(expression.Name("snapshot_event"), expression.Value(snapshotEvent))
	}
	return s.update(ctx, id, u, expression.AttributeExists(expression.Name("id")), false)
}

// ThinRetry records a failed hydration try on a thin record still
// received: its last_error, the tries so far, hydration retrying. A record
// already processed (another replica finished it) is left as it is.
func (s *Store) ThinRetry(ctx context.Context, id, lastError string, attempts int) error {
	u := expression.Set(expression.Name("last_error"), expression.Value(truncate(lastError, MaxLastError))).
		Set(expression.Name("hydration"), expression.Value(HydrationRetrying)).
		Set(expression.Name("attempts"), expression.Value(attempts))
	cond := expression.AttributeExists(expression.Name("id")).
		And(expression.Name("status").Equal(expression.Value(string(StatusReceived))))
	return s.update(ctx, id, u, cond, true)
}
