package thin

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/stripe-payments/stripe-payments/internal/stripebudget"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
)

// redrive handles v2.core.health.event_generation_failure.resolved: Stripe
// failed to generate events about an object for a while. The service
// fetches the object the health event names as it is now and hands it to
// the one handler as the snapshot event its state stands for, so the state
// machines reach it even though no event said so.
//
// Stripe names the object in data.impact.related_object, on the account in
// data.impact.context, and only its copy of the event carries data: all of
// it is read from the copy c. The event is keyed by the health event
// (evt_redrive_<its id>): a second hydration of the same health event
// applies nothing twice. The handlers move state forward only, so a state
// already reached is not undone.
func (h *Hydrator) redrive(ctx context.Context, c stripeevent.ThinCopy, source stripeevent.Source) (stripeevent.HealthResolved, error) {
	health, err := stripeevent.ParseHealthResolved(c.Data)
	if err != nil {
		return health, err
	}
	ro := health.RelatedObject
	account := health.Context
	if account == "" {
		// A health event on a connected account's context is about it.
		account = c.Context
	}
	if err := h.budget.Wait(ctx, stripebudget.Hydration); err != nil {
		return health, err
	}
	obj, err := h.api.V1Object(ctx, ro.URL, account)
	if err != nil {
		return health, fmt.Errorf("retrieve %s %s: %w", truncate(ro.Type, 64), ro.ID, err)
	}
	var head struct {
		ID     string `json:"id"`
		Object string `json:"object"`
		Status string `json:"status"`
		// A PaymentIntent that requires a payment method failed only when
		// it has a last_payment_error (a new one requires one too).
		LastPaymentError json.RawMessage `json:"last_payment_error"`
	}
	if err := json.Unmarshal(obj, &head); err != nil {
		return health, fmt.Errorf("retrieve %s: decode: %w", ro.ID, err)
	}
	if head.ID != ro.ID || (ro.Type != "" && head.Object != ro.Type) {
		return health, fmt.Errorf("retrieve %s %s: Stripe answered %s %q", truncate(ro.Type, 64), ro.ID,
			truncate(head.Object, 64), truncate(head.ID, 64))
	}
	status := head.Status
	if status == "requires_payment_method" && (len(head.LastPaymentError) == 0 || string(head.LastPaymentError) == "null") {
		status = ""
	}
	typ := stateEventType(head.Object, status)
	if typ == "" {
		h.cfg.Log.Info("health event: the object's state has no event the service acts on", "event_id", c.ID,
			"object", head.Object, "status", head.Status, "missed_event_type", health.EventType)
		return health, nil
	}
	doc := map[string]any{
		"id": "evt_redrive_" + strings.TrimPrefix(c.ID, "evt_"), "object": "event", "type": typ,
		"created": c.Created.Unix(), "livemode": h.cfg.Livemode, "api_version": "", "pending_webhooks": 0,
		"data": map[string]json.RawMessage{"object": obj},
	}
	if account != "" {
		doc["account"] = account
	}
	payload, err := json.Marshal(doc)
	if err != nil {
		return health, fmt.Errorf("build re-driven event: %w", err)
	}
	ev, err := stripeevent.Parse(payload)
	if err != nil {
		return health, fmt.Errorf("build re-driven event: %w", err)
	}
	outcome, err := h.handler.Handle(ctx, ev, payload, source)
	if err != nil {
		return health, fmt.Errorf("re-drive %s: %w", head.ID, err)
	}
	if outcome == stripeevent.Failed {
		return health, fmt.Errorf("re-drive %s: failed", head.ID)
	}
	return health, nil
}

// stateEventType is the snapshot event type an object's current state
// stands for, among those the handler acts on ("" for none).
func stateEventType(object, status string) string {
	switch object {
	case "payment_intent":
		switch status {
		case "succeeded":
			return "payment_intent.succeeded"
		case "processing":
			return "payment_intent.processing"
		case "requires_payment_method":
			return "payment_intent.payment_failed"
		}
	case "invoice":
		if status == "paid" {
			return "invoice.paid"
		}
	case "subscription":
		return "customer.subscription.updated"
	}
	return ""
}
