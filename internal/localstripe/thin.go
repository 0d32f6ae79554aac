package localstripe

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// Thin events (docs/thin-events.md): an event destination with the thin
// payload receives, for each type it asks for, a v2.core.event naming the
// object that changed; the receiver retrieves it (GET /v2/core/events/{id},
// with Stripe-Context for a connected account) and, for a v1 type, the
// snapshot event it names (snapshot_event, GET /v1/events/{id}).

// wantsThin: a thin destination asks for the v1 event type typ (ThinTypes
// as NormalizeThinTypes writes them: "*" is "v1.*").
func (s *Server) wantsThin(typ string) bool {
	for _, t := range s.cfg.ThinTypes {
		if t == "v1."+typ || t == "v1.*" {
			return true
		}
	}
	return false
}

// resources are the API paths of the objects events are about.
var resources = map[string]string{
	"payment_intent": "payment_intents", "invoice": "invoices", "customer": "customers",
	"subscription": "subscriptions", "account": "accounts", "charge": "charges",
}

// thinEvent is the notification of a v1 event about obj, as Stripe sends it
// to a thin destination.
func thinEvent(account, typ string, obj map[string]any, at time.Time) []byte {
	id, kind := str(obj["id"]), str(obj["object"])
	path := resources[kind]
	if path == "" {
		path = kind + "s"
	}
	ev := map[string]any{
		"id": stripetest.NewThinID(), "object": "v2.core.event", "type": "v1." + typ, "livemode": false,
		"created":        at.UTC().Format("2006-01-02T15:04:05.000Z07:00"),
		"reason":         map[string]any{"type": "request", "request": map[string]any{"id": "req_local" + strings.TrimPrefix(newEventID(), "evt_")[:14], "idempotency_key": nil}},
		"related_object": map[string]any{"id": id, "type": kind, "url": "/v1/" + path + "/" + id},
	}
	if account != "" {
		ev["context"] = account
	}
	b, _ := json.Marshal(ev) // maps of strings: cannot fail
	return b
}

// NormalizeThinTypes reads a destination's event types as Stripe names
// them (v1.payment_intent.succeeded, v1.*); a bare v1 name
// (payment_intent.succeeded) means its v1 type, "*" is "v1.*". bad is the
// first name that is neither (out is then nil), "" when all are good.
func NormalizeThinTypes(list []string) (out []string, bad string) {
	for _, t := range list {
		t = strings.TrimSpace(t)
		switch {
		case t == "":
			continue
		case t == "*" || t == "v1.*":
			out = append(out, "v1.*")
		case strings.HasPrefix(t, "v1.") && len(t) > 3:
			out = append(out, t)
		case strings.HasPrefix(t, "v2."):
			return nil, t // the local Stripe makes no v2 objects
		case strings.Contains(t, ".") && !strings.ContainsAny(t, " /"):
			out = append(out, "v1."+t)
		default:
			return nil, t
		}
	}
	return out, ""
}
