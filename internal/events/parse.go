package events

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"

	"github.com/stripe/stripe-go/v76"
)

// ErrMalformed is returned for a body that is not a Stripe event.
var ErrMalformed = errors.New("not a stripe event")

// ErrUnprocessable marks an event whose envelope is fine but whose object its
// type's handler cannot act on (it does not decode into Stripe's type, or it
// names ids Stripe never issues). Retrying cannot change that, so the handler
// records such an event as processed with no effect, and says so loudly,
// instead of failing it forever.
var ErrUnprocessable = errors.New("event object cannot be processed")

// MaxCreated is the latest `created` accepted: 9999-12-31T23:59:59Z. Later
// values do not fit Postgres' timestamptz or the table's date attributes.
const MaxCreated = 253402300799

var eventTypePattern = regexp.MustCompile(`^[A-Za-z0-9_.]{1,255}$`)

// ValidID reports whether id looks like a Stripe id with the given prefix
// ("evt_", "acct_", "pi_", "sub_", "in_", ...): the prefix, then 1 to 250
// letters, digits or underscores. The service stores ids as DynamoDB keys and
// Postgres text and puts them in Stripe API paths, so nothing else (NUL
// bytes, slashes, unbounded lengths) gets in.
func ValidID(id, prefix string) bool {
	if len(id) <= len(prefix) || len(id) > len(prefix)+250 || id[:len(prefix)] != prefix {
		return false
	}
	for i := len(prefix); i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// Parse decodes a Stripe event and checks the fields every record needs.
func Parse(payload []byte) (*stripe.Event, error) {
	var ev stripe.Event
	if err := json.Unmarshal(payload, &ev); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	switch {
	case ev.Object != "event":
		return nil, fmt.Errorf("%w: object is %q, want \"event\"", ErrMalformed, truncate(ev.Object, 64))
	case !ValidID(ev.ID, "evt_"):
		return nil, fmt.Errorf("%w: id %q is not an event id", ErrMalformed, truncate(ev.ID, 64))
	case !eventTypePattern.MatchString(string(ev.Type)):
		return nil, fmt.Errorf("%w: missing or invalid type", ErrMalformed)
	case ev.Created <= 0 || ev.Created > MaxCreated:
		return nil, fmt.Errorf("%w: missing or invalid created", ErrMalformed)
	case ev.Data == nil || ev.Data.Object == nil:
		return nil, fmt.Errorf("%w: missing data.object", ErrMalformed)
	case ev.Account != "" && !ValidID(ev.Account, "acct_"):
		return nil, fmt.Errorf("%w: account %q is not an account id", ErrMalformed, truncate(ev.Account, 64))
	}
	return &ev, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
