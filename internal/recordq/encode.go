package recordq

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
)

// meta is a record without its payload, as stored in a pending row.
type meta struct {
	ID            string             `json:"id"`
	Type          string             `json:"type"`
	StripeAccount string             `json:"stripe_account"`
	Created       time.Time          `json:"created"`
	Expiration    time.Time          `json:"expiration"`
	Subscription  string             `json:"subscription,omitempty"`
	APIVersion    string             `json:"api_version,omitempty"`
	Livemode      bool               `json:"livemode"`
	Status        events.Status      `json:"status"`
	ReceivedAt    time.Time          `json:"received_at"`
	ProcessedAt   time.Time          `json:"processed_at"`
	Source        stripeevent.Source `json:"source"`
	Attempts      int                `json:"attempts"`
	LastError     string             `json:"last_error,omitempty"`
}

func encode(r events.Record) ([]byte, error) {
	b, err := json.Marshal(meta{
		ID: r.ID, Type: r.Type, StripeAccount: r.StripeAccount, Created: r.Created, Expiration: r.Expiration,
		Subscription: r.Subscription, APIVersion: r.APIVersion, Livemode: r.Livemode, Status: r.Status,
		ReceivedAt: r.ReceivedAt, ProcessedAt: r.ProcessedAt, Source: r.Source, Attempts: r.Attempts, LastError: r.LastError,
	})
	if err != nil {
		return nil, fmt.Errorf("encode pending record %s: %w", r.ID, err)
	}
	return b, nil
}

func decode(record, payload []byte) (events.Record, error) {
	var m meta
	if err := json.Unmarshal(record, &m); err != nil {
		return events.Record{}, fmt.Errorf("decode pending record: %w", err)
	}
	return events.Record{
		ID: m.ID, Type: m.Type, StripeAccount: m.StripeAccount, Created: m.Created, Expiration: m.Expiration,
		Subscription: m.Subscription, APIVersion: m.APIVersion, Livemode: m.Livemode, Status: m.Status,
		ReceivedAt: m.ReceivedAt, ProcessedAt: m.ProcessedAt, Source: m.Source, Attempts: m.Attempts, LastError: m.LastError,
		Payload: payload,
	}, nil
}
