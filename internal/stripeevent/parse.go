package stripeevent

import (
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

// Parse decodes a Stripe event and checks the fields every record needs.
func Parse(payload []byte) (*stripe.Event, error) {
	var ev stripe.Event
	if err := json.Unmarshal(payload, &ev); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	switch {
	case ev.Object != "event":
		return nil, fmt.Errorf("%w: object is %q, want \"event\"", ErrMalformed, truncate(ev.Object, 64))
	case !stripeid.Valid(ev.ID, "evt_"):
		return nil, fmt.Errorf("%w: id %q is not an event id", ErrMalformed, truncate(ev.ID, 64))
	case !eventTypePattern.MatchString(string(ev.Type)):
		return nil, fmt.Errorf("%w: missing or invalid type", ErrMalformed)
	case ev.Created <= 0 || ev.Created > MaxCreated:
		return nil, fmt.Errorf("%w: missing or invalid created", ErrMalformed)
	case ev.Data == nil || ev.Data.Object == nil:
		return nil, fmt.Errorf("%w: missing data.object", ErrMalformed)
	case ev.Account != "" && !stripeid.Valid(ev.Account, "acct_"):
		return nil, fmt.Errorf("%w: account %q is not an account id", ErrMalformed, truncate(ev.Account, 64))
	}
	return &ev, nil
}

// SubscriptionID finds the Stripe subscription an event is about: the object
// itself when it is a subscription, else its `subscription` reference (invoices,
// invoice items, subscription schedules, subscription items), expanded or not.
func SubscriptionID(ev *stripe.Event) string {
	if ev.Data == nil || ev.Data.Object == nil {
		return ""
	}
	// Only a well-formed id becomes the index key: DynamoDB refuses empty
	// or oversized key attributes, which would fail the event forever.
	valid := func(id string) string {
		if stripeid.Valid(id, "sub_") {
			return id
		}
		return ""
	}
	obj := ev.Data.Object
	if obj["object"] == "subscription" {
		id, _ := obj["id"].(string)
		return valid(id)
	}
	switch ref := obj["subscription"].(type) {
	case string:
		return valid(ref)
	case map[string]interface{}:
		id, _ := ref["id"].(string)
		return valid(id)
	}
	// Invoices of newer API versions nest it under parent.subscription_details.
	if parent, ok := obj["parent"].(map[string]interface{}); ok {
		if details, ok := parent["subscription_details"].(map[string]interface{}); ok {
			if id, ok := details["subscription"].(string); ok {
				return valid(id)
			}
		}
	}
	return ""
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
