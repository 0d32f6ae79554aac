package stripeevent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"

	"github.com/stripe/stripe-go/v76"

	"github.com/stripe-payments/stripe-payments/internal/stripeid"
)

// ErrMalformed is returned for a body that is not a Stripe event.
var ErrMalformed = errors.New("not a stripe event")

// MaxCreated is the latest `created` accepted: 9999-12-31T23:59:59Z. Later
// values do not fit Postgres' timestamptz or the table's date attributes.
const MaxCreated = 253402300799

var eventTypePattern = regexp.MustCompile(`^[A-Za-z0-9_.]{1,255}$`)

// envelope is what Parse decodes: the event's own fields, with its object
// kept raw. stripe.Event's decoder builds a generic map of the whole object
// (and scans it three times); nearly every consumer decodes the raw object
// into a typed struct instead, so Parse leaves the map to Object, on demand.
// That was the largest CPU item of an ingest (BENCHMARKS.md: 80 µs of a
// 1.8 KB customer.updated, now a quarter of it).
type envelope struct {
	ID              string               `json:"id"`
	Object          string               `json:"object"`
	Account         string               `json:"account"`
	APIVersion      string               `json:"api_version"`
	Created         int64                `json:"created"`
	Livemode        bool                 `json:"livemode"`
	PendingWebhooks int64                `json:"pending_webhooks"`
	Request         *stripe.EventRequest `json:"request"`
	Type            stripe.EventType     `json:"type"`
	Data            *struct {
		Object             json.RawMessage        `json:"object"`
		PreviousAttributes map[string]interface{} `json:"previous_attributes"`
	} `json:"data"`
}

// Parse decodes a Stripe event and checks the fields every record needs.
// The event's Data.Raw holds its object; Data.Object is nil until Object
// decodes it.
func Parse(payload []byte) (*stripe.Event, error) {
	var env envelope
	if err := json.Unmarshal(payload, &env); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	switch {
	case env.Object != "event":
		return nil, fmt.Errorf("%w: object is %q, want \"event\"", ErrMalformed, truncate(env.Object, 64))
	case !stripeid.Valid(env.ID, "evt_"):
		return nil, fmt.Errorf("%w: id %q is not an event id", ErrMalformed, truncate(env.ID, 64))
	case !eventTypePattern.MatchString(string(env.Type)):
		return nil, fmt.Errorf("%w: missing or invalid type", ErrMalformed)
	case env.Created <= 0 || env.Created > MaxCreated:
		return nil, fmt.Errorf("%w: missing or invalid created", ErrMalformed)
	case env.Data == nil || !isObject(env.Data.Object):
		return nil, fmt.Errorf("%w: missing data.object", ErrMalformed)
	case env.Account != "" && !stripeid.Valid(env.Account, "acct_"):
		return nil, fmt.Errorf("%w: account %q is not an account id", ErrMalformed, truncate(env.Account, 64))
	}
	return &stripe.Event{
		ID: env.ID, Object: env.Object, Account: env.Account, APIVersion: env.APIVersion, Created: env.Created,
		Livemode: env.Livemode, PendingWebhooks: env.PendingWebhooks, Request: env.Request, Type: env.Type,
		Data: &stripe.EventData{Raw: env.Data.Object, PreviousAttributes: env.Data.PreviousAttributes},
	}, nil
}

// isObject reports whether raw is a JSON object (json.Unmarshal has
// checked that it is valid JSON).
func isObject(raw json.RawMessage) bool {
	for _, c := range raw {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return c == '{'
	}
	return false
}

// Object is the event's object as a generic map, decoded from Data.Raw on
// first use and kept in Data.Object (events from stripe-go's API client
// have it already). A preparer that changes the map must re-encode Raw,
// which the appliers read.
func Object(ev *stripe.Event) (map[string]interface{}, error) {
	if ev.Data == nil {
		return nil, errors.New("event has no data")
	}
	if ev.Data.Object == nil {
		var obj map[string]interface{}
		if err := json.Unmarshal(ev.Data.Raw, &obj); err != nil {
			return nil, fmt.Errorf("decode event object: %w", err)
		}
		if obj == nil {
			return nil, errors.New("event object is not a JSON object")
		}
		ev.Data.Object = obj
	}
	return ev.Data.Object, nil
}

// SubscriptionID finds the Stripe subscription an event is about: the object
// itself when it is a subscription, else its `subscription` reference (invoices,
// invoice items, subscription schedules, subscription items), expanded or not.
// It reads the raw object one level at a time (keys match exactly, as in
// Stripe's JSON), without decoding the rest.
func SubscriptionID(ev *stripe.Event) string {
	if ev.Data == nil || !mayHoldSubscriptionID(ev.Data.Raw) {
		return ""
	}
	obj := fields(ev.Data.Raw)
	if obj == nil {
		return ""
	}
	// Only a well-formed id becomes the index key: DynamoDB refuses empty
	// or oversized key attributes, which would fail the event forever.
	valid := func(raw json.RawMessage) string {
		if id := str(raw); stripeid.Valid(id, "sub_") {
			return id
		}
		return ""
	}
	if str(obj["object"]) == "subscription" {
		return valid(obj["id"])
	}
	switch ref := obj["subscription"]; {
	case len(ref) > 0 && ref[0] == '"':
		return valid(ref)
	case fields(ref) != nil:
		return valid(fields(ref)["id"])
	}
	// Invoices of newer API versions nest it under parent.subscription_details.
	if details := fields(fields(obj["parent"])["subscription_details"]); details != nil {
		return valid(details["subscription"])
	}
	return ""
}

// mayHoldSubscriptionID reports whether raw can hold a subscription id: its
// "sub_" written out, or a \u escape that could spell it (JSON has no other
// escape for those letters). Most objects hold neither, and splitting them
// into fields was 5 % of an ingest's CPU (BENCHMARKS.md).
func mayHoldSubscriptionID(raw json.RawMessage) bool {
	return bytes.Contains(raw, []byte("sub_")) || bytes.Contains(raw, []byte(`\u`))
}

// str decodes a JSON string; "" for anything else.
func str(raw json.RawMessage) string {
	var s string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

// fields splits a JSON object into its members, undecoded; nil when raw is
// not an object.
func fields(raw json.RawMessage) map[string]json.RawMessage {
	var m map[string]json.RawMessage
	if len(raw) == 0 || json.Unmarshal(raw, &m) != nil {
		return nil
	}
	return m
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
