package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/api"
	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billingtest"
	"github.com/stripe-payments/stripe-payments/internal/httpserver"
	"github.com/stripe-payments/stripe-payments/internal/lock"
	"github.com/stripe-payments/stripe-payments/internal/metrics"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

const token = "billing-test-token"

type client struct {
	t    *testing.T
	base string
}

func (c client) do(method, path string, body any) (int, map[string]any) {
	c.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		require.NoError(c.t, err)
		r = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, c.base+path, r)
	require.NoError(c.t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	var out map[string]any
	raw, _ := io.ReadAll(resp.Body)
	if len(raw) > 0 {
		require.NoError(c.t, json.Unmarshal(raw, &out), string(raw))
	}
	return resp.StatusCode, out
}

func newAPI(t *testing.T) (client, *billingtest.Env) {
	t.Helper()
	e := billingtest.NewEnv(t, billingtest.Options{})
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := httpserver.New(log, metrics.New(), nil)
	api.Register(srv.Echo, token, api.Deps{Billing: e.Service})
	ts := httptest.NewServer(srv.Echo)
	t.Cleanup(ts.Close)
	return client{t: t, base: ts.URL + api.Prefix}, e
}

func validCreate() map[string]any {
	return map[string]any{"sku": "gold", "email": "a@example.com", "payment_day": 31, "amount": 1999,
		"currency": "usd", "term": "MONTHLY", "customer": "cus_1", "payment_method": "pm_1"}
}

func errCode(body map[string]any) string {
	e, _ := body["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

func TestBillingRoutes(t *testing.T) {
	t.Parallel()
	c, e := newAPI(t)

	status, sub := c.do(http.MethodPost, "/accounts/acct_1/subscriptions", validCreate())
	require.Equal(t, http.StatusCreated, status, sub)
	id := sub["subscription_id"].(string)
	for _, k := range []string{"account_id", "subscription_id", "sku", "email", "payment_day", "amount", "currency",
		"term", "status", "next_payment_date", "next_reminder_date", "last_payment_date", "last_reminder_date"} {
		assert.Contains(t, sub, k)
	}
	assert.Equal(t, "ACTIVE", sub["status"])
	assert.Equal(t, "usd", sub["currency"])
	assert.Equal(t, "", sub["stripe_account"], "no stripe_account: charged on the platform's own account, even for an acct_ account id")
	assert.Equal(t, "2024-01-31", sub["next_payment_date"])
	assert.Nil(t, sub["last_payment_date"])

	t.Run("collect, then list receipts and history", func(t *testing.T) {
		e.Clock.SetDate(dates.MustParse("2024-01-31"))
		_, err := e.Service.Collect(t.Context(), dates.MustParse("2024-01-31"))
		require.NoError(t, err)
		status, list := c.do(http.MethodGet, "/accounts/acct_1/receipts", nil)
		require.Equal(t, http.StatusOK, status, list)
		data := list["data"].([]any)
		require.Len(t, data, 1)
		rec := data[0].(map[string]any)
		for _, k := range []string{"account_id", "subscription_id", "sku", "processed_date", "processed_amount", "currency", "payment_intent"} {
			assert.Contains(t, rec, k)
		}
		assert.Equal(t, float64(1999), rec["processed_amount"])
		assert.Equal(t, "", list["next_cursor"], "empty on the last page, as every list")

		status, list = c.do(http.MethodGet, "/accounts/acct_1/subscriptions/"+id+"/history?limit=1", nil)
		require.Equal(t, http.StatusOK, status, list)
		require.Len(t, list["data"].([]any), 1)
		entry := list["data"].([]any)[0].(map[string]any)
		for _, k := range []string{"subscription_id", "billing_date", "billing_status", "process", "last_run_date", "transaction_id", "error"} {
			assert.Contains(t, entry, k)
		}
		assert.Equal(t, "SCHEDULED", entry["billing_status"])
		cursor, _ := list["next_cursor"].(string)
		require.NotEmpty(t, cursor)
		status, list = c.do(http.MethodGet, "/accounts/acct_1/subscriptions/"+id+"/history?limit=1&cursor="+url.QueryEscape(cursor), nil)
		require.Equal(t, http.StatusOK, status, list)
		assert.Equal(t, "COMPLETED", list["data"].([]any)[0].(map[string]any)["billing_status"])
	})

	t.Run("pause, resume, change, cancel", func(t *testing.T) {
		status, got := c.do(http.MethodPatch, "/accounts/acct_1/subscriptions/"+id, map[string]any{"action": "pause", "months": 1})
		require.Equal(t, http.StatusOK, status, got)
		assert.Equal(t, "PAUSED", got["status"])
		assert.Equal(t, "2024-02-29", got["paused_until"], "the last paused period")
		assert.Equal(t, "2024-03-31", got["next_payment_date"], "the first charge after the pause")
		status, got = c.do(http.MethodPatch, "/accounts/acct_1/subscriptions/"+id, map[string]any{"action": "resume"})
		require.Equal(t, http.StatusOK, status, got)
		assert.Equal(t, "ACTIVE", got["status"])
		status, got = c.do(http.MethodPatch, "/accounts/acct_1/subscriptions/"+id, map[string]any{"amount": 2500, "payment_day": 15})
		require.Equal(t, http.StatusOK, status, got)
		assert.Equal(t, float64(2500), got["amount"])
		// docs/design.md §8: at least one term after the last charged period (Jan 31).
		assert.Equal(t, "2024-03-15", got["next_payment_date"])
		status, got = c.do(http.MethodPatch, "/accounts/acct_1/subscriptions/"+id, map[string]any{"action": "cancel"})
		require.Equal(t, http.StatusOK, status, got)
		assert.Equal(t, "CANCELLED", got["status"])
		assert.Nil(t, got["next_payment_date"])
		status, got = c.do(http.MethodGet, "/accounts/acct_1/subscriptions/"+id, nil)
		require.Equal(t, http.StatusOK, status, got)
		assert.Equal(t, "CANCELLED", got["status"])
	})

	t.Run("pagination of subscriptions", func(t *testing.T) {
		for i := range 3 {
			body := validCreate()
			body["sku"] = "sku-" + string(rune('a'+i))
			body["stripe_account"] = "acct_page"
			status, _ := c.do(http.MethodPost, "/accounts/acc-page/subscriptions", body)
			require.Equal(t, http.StatusCreated, status)
		}
		seen := map[string]bool{}
		cursor := ""
		for pages := 0; ; pages++ {
			q := "?limit=2"
			if cursor != "" {
				q += "&cursor=" + url.QueryEscape(cursor)
			}
			status, list := c.do(http.MethodGet, "/accounts/acc-page/subscriptions"+q, nil)
			require.Equal(t, http.StatusOK, status, list)
			for _, s := range list["data"].([]any) {
				seen[s.(map[string]any)["subscription_id"].(string)] = true
			}
			next, _ := list["next_cursor"].(string)
			if next == "" {
				break
			}
			require.Less(t, pages, 3)
			cursor = next
		}
		assert.Len(t, seen, 3)
	})

	t.Run("a collection holding the lock makes changes 409", func(t *testing.T) {
		status, sub := c.do(http.MethodPost, "/accounts/acc-locked/subscriptions", func() map[string]any {
			b := validCreate()
			b["stripe_account"] = "acct_x"
			return b
		}())
		require.Equal(t, http.StatusCreated, status)
		other := lock.New(e.DB, e.Locks, lock.Options{Owner: "job", Lease: 2 * time.Second, Heartbeat: 100 * time.Millisecond})
		l, err := other.Acquire(t.Context(), billing.LockKey("acc-locked"), true)
		require.NoError(t, err)
		defer l.Release(t.Context())
		status, body := c.do(http.MethodPatch, "/accounts/acc-locked/subscriptions/"+sub["subscription_id"].(string), map[string]any{"action": "cancel"})
		assert.Equal(t, http.StatusConflict, status)
		assert.Equal(t, "conflict", errCode(body))
	})
}

func TestBillingRoutesRefuseInvalidParameters(t *testing.T) {
	t.Parallel()
	c, _ := newAPI(t)
	status, sub := c.do(http.MethodPost, "/accounts/acc-1/subscriptions", func() map[string]any {
		b := validCreate()
		b["stripe_account"] = "acct_1"
		b["subscription_id"] = "taken"
		return b
	}())
	require.Equal(t, http.StatusCreated, status, sub)
	id := sub["subscription_id"].(string)

	with := func(k string, v any) map[string]any {
		b := validCreate()
		b["stripe_account"] = "acct_1"
		if v == nil {
			delete(b, k)
		} else {
			b[k] = v
		}
		return b
	}
	tests := []struct {
		name, method, path string
		body               any
		status             int
	}{
		{"payment day 0", "POST", "/accounts/acc-1/subscriptions", with("payment_day", 0), 400},
		{"payment day 32", "POST", "/accounts/acc-1/subscriptions", with("payment_day", 32), 400},
		{"fractional amount", "POST", "/accounts/acc-1/subscriptions", with("amount", 19.99), 400},
		{"negative amount", "POST", "/accounts/acc-1/subscriptions", with("amount", -1), 400},
		{"amount as a string", "POST", "/accounts/acc-1/subscriptions", with("amount", "1999"), 400},
		{"bad currency", "POST", "/accounts/acc-1/subscriptions", with("currency", "dollars"), 400},
		{"bad term", "POST", "/accounts/acc-1/subscriptions", with("term", "WEEKLY"), 400},
		{"bad email", "POST", "/accounts/acc-1/subscriptions", with("email", "nope"), 400},
		{"missing sku", "POST", "/accounts/acc-1/subscriptions", with("sku", nil), 400},
		{"sku with #", "POST", "/accounts/acc-1/subscriptions", with("sku", "a#b"), 400},
		{"bad customer", "POST", "/accounts/acc-1/subscriptions", with("customer", "x"), 400},
		{"bad payment method", "POST", "/accounts/acc-1/subscriptions", with("payment_method", "x"), 400},
		{"payment method with a slash", "POST", "/accounts/acc-1/subscriptions", with("payment_method", "pm_a/b"), 400},
		{"payment method with a space", "POST", "/accounts/acc-1/subscriptions", with("payment_method", "pm_a b"), 400},
		{"customer with a query", "POST", "/accounts/acc-1/subscriptions", with("customer", "cus_1?x=1"), 400},
		{"stripe account with #", "POST", "/accounts/acc-1/subscriptions", with("stripe_account", "acct_1#2"), 400},
		{"test clock with %", "POST", "/accounts/acc-1/subscriptions", with("test_clock", "clock_1%2F"), 400},
		{"change to a payment method with a slash", "PATCH", "/accounts/acc-1/subscriptions/" + id, map[string]any{"payment_method": "pm_x/../y"}, 400},
		{"stripe account not an acct_ id", "POST", "/accounts/acc-1/subscriptions", with("stripe_account", "merchant-1"), 400},
		{"bad start date", "POST", "/accounts/acc-1/subscriptions", with("start_date", "2024-02-30"), 400},
		// docs/design.md "Choices made where the contract is silent": at most 24 months after today (2024-01-01 here).
		{"start date 9999-12-31", "POST", "/accounts/acc-1/subscriptions", with("start_date", "9999-12-31"), 400},
		{"start date past 24 months", "POST", "/accounts/acc-1/subscriptions", with("start_date", "2026-01-02"), 400},
		// docs/design.md §8: Friday billing is monthly.
		{"YEARLY with billing week", "POST", "/accounts/acc-1/subscriptions", func() map[string]any {
			b := with("payment_day", nil)
			b["billing_week"], b["term"] = 2, "YEARLY"
			return b
		}(), 400},
		{"the id of another subscription, another SKU", "POST", "/accounts/acc-1/subscriptions", func() map[string]any {
			b := with("sku", "silver")
			b["subscription_id"] = "taken"
			return b
		}(), 409},
		{"bad timezone", "POST", "/accounts/acc-1/subscriptions", with("timezone", "Mars/Olympus"), 400},
		{"billing week 6", "POST", "/accounts/acc-1/subscriptions", func() map[string]any { b := with("payment_day", nil); b["billing_week"] = 6; return b }(), 400},
		{"unknown field", "POST", "/accounts/acc-1/subscriptions", with("colour", "red"), 400},
		{"not JSON", "POST", "/accounts/acc-1/subscriptions", "{", 400},
		{"trailing data", "POST", "/accounts/acc-1/subscriptions", `{"sku":"a"} {}`, 400},
		{"query on create", "POST", "/accounts/acc-1/subscriptions?x=1", validCreate(), 400},
		{"bad account id", "GET", "/accounts/a%23b/subscriptions", nil, 400},
		{"limit 0", "GET", "/accounts/acc-1/subscriptions?limit=0", nil, 400},
		{"limit 1001", "GET", "/accounts/acc-1/subscriptions?limit=1001", nil, 400},
		{"limit abc", "GET", "/accounts/acc-1/receipts?limit=abc", nil, 400},
		{"limit twice", "GET", "/accounts/acc-1/receipts?limit=1&limit=2", nil, 400},
		{"unknown parameter", "GET", "/accounts/acc-1/receipts?since=2024-01-01", nil, 400},
		{"garbage cursor", "GET", "/accounts/acc-1/receipts?cursor=!!!", nil, 400},
		{"empty cursor", "GET", "/accounts/acc-1/subscriptions?cursor=", nil, 400},
		{"history of another account's subscription", "GET", "/accounts/acc-2/subscriptions/" + id + "/history", nil, 404},
		{"unknown subscription", "PATCH", "/accounts/acc-1/subscriptions/nope", map[string]any{"action": "cancel"}, 404},
		{"empty patch", "PATCH", "/accounts/acc-1/subscriptions/" + id, map[string]any{}, 400},
		{"unknown action", "PATCH", "/accounts/acc-1/subscriptions/" + id, map[string]any{"action": "freeze"}, 400},
		{"pause without months", "PATCH", "/accounts/acc-1/subscriptions/" + id, map[string]any{"action": "pause"}, 400},
		{"pause 0 months", "PATCH", "/accounts/acc-1/subscriptions/" + id, map[string]any{"action": "pause", "months": 0}, 400},
		{"pause 25 months", "PATCH", "/accounts/acc-1/subscriptions/" + id, map[string]any{"action": "pause", "months": 25}, 400},
		{"action with fields", "PATCH", "/accounts/acc-1/subscriptions/" + id, map[string]any{"action": "cancel", "amount": 5}, 400},
		{"months without pause", "PATCH", "/accounts/acc-1/subscriptions/" + id, map[string]any{"action": "cancel", "months": 1}, 400},
		{"waive without date", "PATCH", "/accounts/acc-1/subscriptions/" + id, map[string]any{"action": "waive"}, 400},
		{"waive of no period", "PATCH", "/accounts/acc-1/subscriptions/" + id, map[string]any{"action": "waive", "billing_date": "2020-01-01"}, 404},
		{"resume an active one", "PATCH", "/accounts/acc-1/subscriptions/" + id, map[string]any{"action": "resume"}, 400},
		{"day and week", "PATCH", "/accounts/acc-1/subscriptions/" + id, map[string]any{"payment_day": 3, "billing_week": 2}, 400},
		{"amount 0", "PATCH", "/accounts/acc-1/subscriptions/" + id, map[string]any{"amount": 0}, 400},
		{"past next payment date", "PATCH", "/accounts/acc-1/subscriptions/" + id, map[string]any{"next_payment_date": "2023-12-01"}, 400},
		{"malformed next payment date", "PATCH", "/accounts/acc-1/subscriptions/" + id, map[string]any{"next_payment_date": "soon"}, 400},
		{"unknown term", "PATCH", "/accounts/acc-1/subscriptions/" + id, map[string]any{"term": "WEEKLY"}, 400},
		{"term with an action", "PATCH", "/accounts/acc-1/subscriptions/" + id, map[string]any{"action": "cancel", "term": "YEARLY"}, 400},
		{"term and a move", "PATCH", "/accounts/acc-1/subscriptions/" + id, map[string]any{"term": "YEARLY", "next_payment_date": "2024-01-20"}, 400},
		{"YEARLY on Friday billing", "PATCH", "/accounts/acc-1/subscriptions/" + id, map[string]any{"term": "YEARLY", "billing_week": 2}, 400},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, body := c.do(tc.method, tc.path, tc.body)
			assert.Equal(t, tc.status, status, body)
			assert.NotEmpty(t, errCode(body), body)
		})
	}

	t.Run("refused requests wrote nothing", func(t *testing.T) {
		status, list := c.do(http.MethodGet, "/accounts/acc-1/subscriptions", nil)
		require.Equal(t, http.StatusOK, status, list)
		data := list["data"].([]any)
		require.Len(t, data, 1, "only the subscription created first")
		got := data[0].(map[string]any)
		assert.Equal(t, "gold", got["sku"])
		assert.Equal(t, sub["next_payment_date"], got["next_payment_date"])
	})

	t.Run("no token", func(t *testing.T) {
		resp, err := http.Get(c.base + "/accounts/acc-1/subscriptions")
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	})
}

// PATCH takes a term (docs/design.md §8 "Rule change (new payment day or term)"),
// beside the fields it had: the next period is the new rule's first date
// at least one term of the last charged period after it.
func TestPatchTerm(t *testing.T) {
	t.Parallel()
	c, e := newAPI(t)
	status, sub := c.do(http.MethodPost, "/accounts/acc-t/subscriptions", validCreate())
	require.Equal(t, http.StatusCreated, status, sub)
	path := "/accounts/acc-t/subscriptions/" + sub["subscription_id"].(string)
	e.Clock.SetDate(dates.MustParse("2024-01-31"))
	_, err := e.Service.Collect(t.Context(), dates.MustParse("2024-01-31"))
	require.NoError(t, err)
	e.Clock.SetDate(dates.MustParse("2024-02-05"))

	// Exactly YEARLY: "yearly" is a 400 (TestBillingAPIInputIsStrict).
	status, got := c.do(http.MethodPatch, path, map[string]any{"term": "yearly"})
	require.Equal(t, http.StatusBadRequest, status, got)
	status, got = c.do(http.MethodPatch, path, map[string]any{"term": "YEARLY"})
	require.Equal(t, http.StatusOK, status, got)
	assert.Equal(t, "YEARLY", got["term"])
	assert.Equal(t, float64(31), got["payment_day"])
	// One month after Jan 31 is Feb 29: the first day-31 date on or after it.
	assert.Equal(t, "2024-02-29", got["next_payment_date"])

	status, body := c.do(http.MethodPatch, path, map[string]any{"term": "YEARLY", "billing_week": 2})
	assert.Equal(t, http.StatusBadRequest, status, body)
	assert.Contains(t, body["error"].(map[string]any)["message"], "Friday billing is monthly")
	status, again := c.do(http.MethodGet, path, nil)
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, got, again, "a refused change changes nothing")

	status, got = c.do(http.MethodPatch, path, map[string]any{"term": "MONTHLY", "payment_day": 10})
	require.Equal(t, http.StatusOK, status, got)
	assert.Equal(t, "MONTHLY", got["term"])
	// Feb 29 was never charged: still one month after Jan 31, so the first day 10 on or after Feb 29.
	assert.Equal(t, "2024-03-10", got["next_payment_date"])
}

// docs/design.md §4: stripe_account is optional for any account_id; absent, the
// platform charges its own customer on its own account, with no
// Stripe-Account header. Given, the charge is made on that account.
func TestCreateWithoutStripeAccountChargesOnThePlatform(t *testing.T) {
	t.Parallel()
	c, e := newAPI(t)
	status, platform := c.do(http.MethodPost, "/accounts/merchant-42/subscriptions", validCreate())
	require.Equal(t, http.StatusCreated, status, platform)
	assert.Equal(t, "", platform["stripe_account"])
	connected := validCreate()
	connected["stripe_account"] = "acct_connected"
	status, other := c.do(http.MethodPost, "/accounts/merchant-43/subscriptions", connected)
	require.Equal(t, http.StatusCreated, status, other)

	day := dates.MustParse(platform["next_payment_date"].(string))
	e.Clock.SetDate(day)
	rep, err := e.Service.Collect(t.Context(), day)
	require.NoError(t, err)
	require.True(t, rep.OK(), "%+v", rep)

	byAccount := map[string]stripetest.PI{}
	for _, pi := range e.Stripe.PIs() {
		byAccount[pi.Metadata["billing_account"]] = pi
	}
	require.Len(t, byAccount, 2)
	assert.False(t, byAccount["merchant-42"].AccountHeader, "a platform charge must not send Stripe-Account")
	assert.Equal(t, "succeeded", byAccount["merchant-42"].Status)
	assert.True(t, byAccount["merchant-43"].AccountHeader)
	assert.Equal(t, "acct_connected", byAccount["merchant-43"].Account)

	status, list := c.do(http.MethodGet, "/accounts/merchant-42/receipts", nil)
	require.Equal(t, http.StatusOK, status, list)
	assert.Len(t, list["data"].([]any), 1, "the platform charge has its receipt")
}

// TestErasePersonalDataRoute: DELETE .../personal-data
// answers what it erased; the subscription then has no email; a missing
// subscription is 404.
func TestErasePersonalDataRoute(t *testing.T) {
	c, _ := newAPI(t)
	status, sub := c.do(http.MethodPost, "/accounts/acct_1/subscriptions", validCreate())
	require.Equal(t, http.StatusCreated, status, sub)
	id := sub["subscription_id"].(string)
	status, body := c.do(http.MethodDelete, "/accounts/acct_1/subscriptions/"+id+"/personal-data", nil)
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, id, body["subscription_id"])
	assert.Equal(t, true, body["erased"].(map[string]any)["subscription"])
	status, got := c.do(http.MethodGet, "/accounts/acct_1/subscriptions/"+id, nil)
	require.Equal(t, http.StatusOK, status)
	assert.Empty(t, got["email"])
	status, h := c.do(http.MethodGet, "/accounts/acct_1/subscriptions/"+id+"/history", nil)
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, fmt.Sprint(h), "updated_event:personal_data_erased")
	status, body = c.do(http.MethodDelete, "/accounts/acct_1/subscriptions/sub-missing/personal-data", nil)
	assert.Equal(t, http.StatusNotFound, status, body)
	assert.Equal(t, "not_found", errCode(body))
}
