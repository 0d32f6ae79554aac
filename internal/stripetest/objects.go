package stripetest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/google/uuid"
)

// objectRequest answers the purchase API's calls and the invoice lookups,
// replaying the first answer to an Idempotency-Key on the same account and
// path.
// seq is the request's place in f.requests.
func (f *Stripe) objectRequest(req Request, seq int) reply {
	f.mu.Lock()
	defer f.mu.Unlock()
	if req.IdempotencyKey != "" && req.Method == http.MethodPost {
		if rep, ok := f.replies[replyKey(req)]; ok {
			f.requests[seq].Replayed = true
			return rep
		}
	}
	if rep, ok := f.scriptedFailure(req); ok {
		return rep
	}
	rep := f.route(req)
	f.remember(req, rep)
	return rep
}

// Created counts the objects of a type ("payment_intent", "invoice",
// "invoiceitem", "subscription") the fake created.
func (f *Stripe) Created(objectType string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.created[objectType]
}

// Put stores obj (it must have "id") as owned by stripeAccount, for GETs.
func (f *Stripe) Put(stripeAccount string, obj map[string]any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := obj["id"].(string)
	f.objects[id] = obj
	f.owner[id] = stripeAccount
}

// Object returns a copy of a stored object, or nil.
func (f *Stripe) Object(id string) map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, _ := json.Marshal(f.objects[id])
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return out
}

func notFound(id string) reply {
	return reply{404, errBody("invalid_request_error", "resource_missing", "No such object: '"+id+"'", nil)}
}

func newID(prefix string) string {
	return prefix + strings.ReplaceAll(uuid.NewString(), "-", "")[:24]
}

func metadata(form url.Values) map[string]any {
	md := map[string]any{}
	for k, v := range form {
		if strings.HasPrefix(k, "metadata[") && strings.HasSuffix(k, "]") {
			md[k[len("metadata["):len(k)-1]] = v[0]
		}
	}
	return md
}

func (f *Stripe) store(objType, account string, obj map[string]any) reply {
	f.objects[obj["id"].(string)] = obj
	f.owner[obj["id"].(string)] = account
	f.created[objType]++
	return f.json(obj)
}

func (f *Stripe) json(obj map[string]any) reply {
	b, err := json.Marshal(obj)
	if err != nil {
		panic(err)
	}
	return reply{200, b}
}

// get returns a stored object visible to account.
func (f *Stripe) get(account, id string) (map[string]any, bool) {
	obj, ok := f.objects[id]
	if !ok || f.owner[id] != account {
		return nil, false
	}
	return obj, true
}

func (f *Stripe) route(req Request) reply {
	parts := strings.Split(strings.Trim(req.Path, "/"), "/") // v1, resource, id, action
	if len(parts) < 2 || parts[0] != "v1" {
		return notFound(req.Path)
	}
	if rep, ok := f.payableRoute(req); ok { // a billing charge's cancel, customer confirm, refund (payable.go)
		return rep
	}
	if rep, ok := f.subscriptionRoute(req); ok { // dashboard.go
		return rep
	}
	if rep, ok := f.localRoute(req); ok { // local.go
		return rep
	}
	now := f.now().Unix()
	acct, form := req.StripeAccount, req.Form
	switch {
	case req.Method == http.MethodPost && len(parts) == 2 && parts[1] == "payment_intents":
		amount, _ := strconv.ParseInt(form.Get("amount"), 10, 64)
		id := newID("pi_")
		return f.store("payment_intent", acct, map[string]any{
			"id": id, "object": "payment_intent", "amount": amount, "currency": form.Get("currency"),
			"client_secret": id + "_secret_" + uuid.NewString()[:12], "status": "requires_payment_method",
			"created": now, "livemode": false, "metadata": metadata(form), "invoice": nil,
			"customer": nil, "payment_method": nil, "latest_charge": nil,
		})
	case req.Method == http.MethodPost && len(parts) == 4 && parts[1] == "payment_methods" && parts[3] == "attach":
		pm := map[string]any{"id": parts[2], "object": "payment_method", "type": "card",
			"customer": form.Get("customer"), "created": now, "livemode": false, "metadata": map[string]any{},
			"billing_details": map[string]any{"address": nil, "email": nil, "name": nil, "phone": nil}}
		f.objects[parts[2]] = pm
		f.owner[parts[2]] = acct
		return f.json(pm)
	case req.Method == http.MethodPost && len(parts) == 2 && parts[1] == "invoices":
		return f.store("invoice", acct, map[string]any{
			"id": newID("in_"), "object": "invoice", "customer": form.Get("customer"), "status": "draft",
			"auto_advance": form.Get("auto_advance") == "true", "collection_method": form.Get("collection_method"),
			"default_payment_method": form.Get("default_payment_method"), "metadata": metadata(form),
			"subscription": nil, "payment_intent": nil, "paid": false, "amount_due": int64(0), "currency": "usd",
			"created": now, "livemode": false, "lines": map[string]any{"object": "list", "data": []any{}, "has_more": false},
		})
	case req.Method == http.MethodPost && len(parts) == 2 && parts[1] == "invoiceitems":
		inv, ok := f.get(acct, form.Get("invoice"))
		if !ok {
			return notFound(form.Get("invoice"))
		}
		qty, _ := strconv.ParseInt(form.Get("quantity"), 10, 64)
		item := map[string]any{"id": newID("ii_"), "object": "invoiceitem", "customer": form.Get("customer"),
			"invoice": inv["id"], "price": map[string]any{"id": form.Get("price"), "object": "price"}, "quantity": qty,
			"amount": 1000 * qty, "currency": "usd", "metadata": metadata(form), "date": now, "livemode": false}
		inv["amount_due"] = inv["amount_due"].(int64) + 1000*qty
		return f.store("invoiceitem", acct, item)
	case len(parts) == 3 && parts[1] == "invoices" && req.Method == http.MethodGet,
		len(parts) == 3 && parts[1] == "payment_intents" && req.Method == http.MethodGet:
		if pi, ok := f.charge(acct, parts[2], req.Form); ok {
			return f.json(pi)
		}
		obj, ok := f.get(acct, parts[2])
		if !ok {
			return notFound(parts[2])
		}
		return f.json(obj)
	case req.Method == http.MethodPost && len(parts) == 4 && parts[1] == "invoices" && parts[3] == "finalize":
		inv, ok := f.get(acct, parts[2])
		if !ok {
			return notFound(parts[2])
		}
		if inv["status"] != "draft" {
			return reply{400, errBody("invalid_request_error", "invoice_not_editable", "This invoice is already finalized.", nil)}
		}
		pi := map[string]any{"id": newID("pi_"), "object": "payment_intent", "amount": inv["amount_due"],
			"currency": "usd", "status": "requires_payment_method", "invoice": inv["id"], "metadata": map[string]any{},
			"customer": inv["customer"], "created": now, "livemode": false}
		f.objects[pi["id"].(string)] = pi
		f.owner[pi["id"].(string)] = acct
		f.created["payment_intent"]++
		inv["status"] = "open"
		inv["payment_intent"] = pi["id"]
		inv["number"] = fmt.Sprintf("FAKE-%04d", f.created["invoice"])
		return f.json(inv)
	case req.Method == http.MethodPost && len(parts) == 4 && parts[1] == "invoices" && parts[3] == "pay":
		inv, ok := f.get(acct, parts[2])
		if !ok {
			return notFound(parts[2])
		}
		if inv["status"] != "open" {
			return reply{400, errBody("invalid_request_error", "invoice_not_open", "Invoice is not open.", nil)}
		}
		inv["status"], inv["paid"] = "paid", true
		if pi, ok := f.objects[inv["payment_intent"].(string)]; ok {
			pi["status"] = "succeeded"
			pi["payment_method"] = form.Get("payment_method")
		}
		return f.json(inv)
	case req.Method == http.MethodPost && len(parts) == 2 && parts[1] == "subscriptions":
		id := newID("sub_")
		inv := newID("in_")
		return f.store("subscription", acct, map[string]any{
			"id": id, "object": "subscription", "customer": form.Get("customer"), "status": "active",
			"default_payment_method": form.Get("default_payment_method"), "metadata": metadata(form),
			"latest_invoice": inv, "created": now, "start_date": now, "livemode": false,
			"items": map[string]any{"object": "list", "has_more": false, "data": []any{map[string]any{
				"id": newID("si_"), "object": "subscription_item", "subscription": id,
				"price":    map[string]any{"id": form.Get("items[0][price]"), "object": "price"},
				"quantity": 1, "metadata": map[string]any{},
			}}},
		})
	}
	return notFound(req.Path)
}
