package stripetest

import (
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// What the reconciliation (docs/design.md §11) needs of the fake beyond the
// purchase API's calls: subscriptions retrieved and listed, and changes
// made as in Stripe's Dashboard, which the service hears nothing about
// when their event is lost.

// subscriptionRoute answers GET /v1/subscriptions and
// GET /v1/subscriptions/{id}; f.mu is held.
func (f *Stripe) subscriptionRoute(req Request) (reply, bool) {
	parts := strings.Split(strings.Trim(req.Path, "/"), "/")
	if req.Method != "GET" || len(parts) < 2 || parts[0] != "v1" || parts[1] != "subscriptions" {
		return reply{}, false
	}
	switch len(parts) {
	case 2:
		var data []any
		for _, obj := range f.storedObjects(req.StripeAccount, "subscription", req.Form) {
			if st := req.Form.Get("status"); st != "all" && obj["status"] == "canceled" {
				continue // Stripe lists canceled subscriptions only with status=all
			}
			data = append(data, obj)
		}
		return f.json(page("/v1/subscriptions", data, req.Form)), true
	case 3:
		obj, ok := f.get(req.StripeAccount, parts[2])
		if !ok || obj["object"] != "subscription" {
			return notFound(parts[2]), true
		}
		return f.json(obj), true
	}
	return reply{}, false
}

// storedObjects are account's stored objects of objectType within the
// query's created[gte] and created[lte], newest first, as copies; f.mu is
// held.
func (f *Stripe) storedObjects(account, objectType string, q url.Values) []map[string]any {
	gte, lte := int64(0), int64(1<<62)
	if v, err := strconv.ParseInt(q.Get("created[gte]"), 10, 64); err == nil {
		gte = v
	}
	if v, err := strconv.ParseInt(q.Get("created[lte]"), 10, 64); err == nil {
		lte = v
	}
	var out []map[string]any
	for id, obj := range f.objects {
		if f.owner[id] != account || obj["object"] != objectType {
			continue
		}
		created := toInt64(obj["created"])
		if created < gte || created > lte {
			continue
		}
		out = append(out, deepCopy(obj))
	}
	sort.Slice(out, func(i, j int) bool {
		ci, cj := toInt64(out[i]["created"]), toInt64(out[j]["created"])
		if ci != cj {
			return ci > cj
		}
		return out[i]["id"].(string) > out[j]["id"].(string)
	})
	return out
}

// page cuts a list as Stripe does: limit (default 10, at most 100) after
// starting_after, with has_more.
func page(url string, data []any, q url.Values) map[string]any {
	limit := 10
	if n, err := strconv.Atoi(q.Get("limit")); err == nil && n >= 1 && n <= 100 {
		limit = n
	}
	if after := q.Get("starting_after"); after != "" {
		for i, d := range data {
			if m, ok := d.(map[string]any); ok && m["id"] == after {
				data = data[i+1:]
				break
			}
		}
	}
	more := len(data) > limit
	if more {
		data = data[:limit]
	}
	if data == nil {
		data = []any{}
	}
	return map[string]any{"object": "list", "url": url, "has_more": more, "data": data}
}

func toInt64(v any) int64 {
	switch n := v.(type) {
	case int64:
		return n
	case int:
		return int64(n)
	case float64:
		return int64(n)
	}
	return 0
}

// DashboardChange changes a stored PaymentIntent or subscription as an
// operator in Stripe's Dashboard would, and sends no event: the change the
// service can only learn of by reconciling. status is the new status:
// succeeded, or requires_payment_method (a failed attempt, with
// insufficient_funds) for a PaymentIntent; canceled, active, unpaid or
// past_due for a subscription; deauthorized for a connected account (it
// disconnects the platform: reading it answers 403 account_invalid). It
// returns the object as changed.
func (f *Stripe) DashboardChange(id, status string) (map[string]any, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	obj := f.objects[id]
	if obj == nil {
		return nil, fmt.Errorf("no such object: %s", id)
	}
	now := f.now().Unix()
	switch {
	case obj["object"] == "account" && status == "deauthorized":
		// The account disconnected the platform (OAuth deauthorization):
		// the platform may no longer read it.
		f.deauthorized[id] = true
	case obj["object"] == "payment_intent" && status == "succeeded":
		obj["status"], obj["last_payment_error"] = status, nil
		obj["latest_charge"] = "ch_" + strings.TrimPrefix(id, "pi_")
		obj["amount_received"] = obj["amount"]
		if invID, _ := obj["invoice"].(string); invID != "" {
			if inv := f.objects[invID]; inv != nil {
				inv["status"], inv["paid"] = "paid", true
			}
		}
	case obj["object"] == "payment_intent" && status == "requires_payment_method":
		obj["status"] = status
		obj["last_payment_error"] = lastPaymentError(insufficientFunds)
	case obj["object"] == "subscription" && status == "canceled":
		obj["status"], obj["canceled_at"], obj["ended_at"] = status, now, now
	case obj["object"] == "subscription" && (status == "active" || status == "unpaid" || status == "past_due"):
		obj["status"] = status
	default:
		return nil, fmt.Errorf("a Dashboard change of %s %s to %q is not simulated", obj["object"], id, status)
	}
	return deepCopy(obj), nil
}
