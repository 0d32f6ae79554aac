package events

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/stripe/stripe-go/v76"
)

// ErrMalformed is returned for a body that is not a Stripe event.
var ErrMalformed = errors.New("not a stripe event")

// Parse decodes a Stripe event and checks the fields every record needs.
func Parse(payload []byte) (*stripe.Event, error) {
	var ev stripe.Event
	if err := json.Unmarshal(payload, &ev); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	switch {
	case ev.Object != "event":
		return nil, fmt.Errorf("%w: object is %q, want \"event\"", ErrMalformed, ev.Object)
	case !strings.HasPrefix(ev.ID, "evt_") || len(ev.ID) > 255:
		return nil, fmt.Errorf("%w: id %q is not an event id", ErrMalformed, truncate(ev.ID, 64))
	case ev.Type == "" || len(ev.Type) > 255:
		return nil, fmt.Errorf("%w: missing type", ErrMalformed)
	case ev.Created <= 0:
		return nil, fmt.Errorf("%w: missing created", ErrMalformed)
	case ev.Data == nil || ev.Data.Object == nil:
		return nil, fmt.Errorf("%w: missing data.object", ErrMalformed)
	case ev.Account != "" && !strings.HasPrefix(ev.Account, "acct_"):
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
