package stripetest_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// TestEventsListDeliverySuccess: GET /v1/events?delivery_success=… filters
// before paging, as Stripe does: full pages of matching events, has_more
// and starting_after over the matching ones only, newest first, the
// Stripe-Account's events only; a pending delivery counts as not
// successful; a value that is not a boolean is a 400 naming the parameter.
func TestEventsListDeliverySuccess(t *testing.T) {
	f := stripetest.New(t, stripetest.Options{})
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	var all, undelivered []string // newest first
	for i := range 25 {
		id := fmt.Sprintf("evt_ds%03d", i)
		f.Add("acct_1", []byte(fmt.Sprintf(`{"id":%q,"object":"event","type":"customer.updated","created":%d}`, id, base.Add(time.Duration(i)*time.Second).Unix())))
		all = append([]string{id}, all...)
		if i%5 == 0 {
			undelivered = append([]string{id}, undelivered...)
		} else {
			f.Delivered("acct_1", true, id)
		}
	}
	f.Add("acct_2", []byte(fmt.Sprintf(`{"id":"evt_other","object":"event","type":"customer.updated","created":%d}`, base.Unix())))
	var delivered []string
	for _, id := range all {
		if !contains(undelivered, id) {
			delivered = append(delivered, id)
		}
	}
	list := func(t *testing.T, account, query string) (int, []string, bool, map[string]any) {
		req, err := http.NewRequest(http.MethodGet, f.URL+"/v1/events?"+query, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer sk_test_x")
		req.Header.Set("Stripe-Account", account)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var page struct {
			Object  string `json:"object"`
			HasMore bool   `json:"has_more"`
			Data    []struct {
				ID string `json:"id"`
			} `json:"data"`
			Error map[string]any `json:"error"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&page))
		var ids []string
		for _, d := range page.Data {
			ids = append(ids, d.ID)
		}
		if resp.StatusCode == http.StatusOK {
			assert.Equal(t, "list", page.Object)
		}
		return resp.StatusCode, ids, page.HasMore, page.Error
	}
	// pages walks every page of query with starting_after.
	pages := func(t *testing.T, query string, limit int) ([]string, int) {
		var got []string
		calls, after := 0, ""
		for {
			q := fmt.Sprintf("%s&limit=%d", query, limit)
			if after != "" {
				q += "&starting_after=" + after
			}
			code, ids, more, _ := list(t, "acct_1", q)
			require.Equal(t, http.StatusOK, code)
			calls++
			require.LessOrEqual(t, len(ids), limit)
			if more {
				require.Len(t, ids, limit, "a page before the last is full of matching events")
			}
			got = append(got, ids...)
			if !more {
				return got, calls
			}
			after = ids[len(ids)-1]
		}
	}
	for _, tc := range []struct {
		name      string
		query     string
		want      []string
		wantCalls int
	}{
		{"no filter", "", all, 9},
		{"undelivered", "delivery_success=false", undelivered, 2},
		{"delivered", "delivery_success=true", delivered, 7},
		{"undelivered in a created range", fmt.Sprintf("delivery_success=false&created[gte]=%d&created[lte]=%d", base.Add(5*time.Second).Unix(), base.Add(15*time.Second).Unix()),
			[]string{"evt_ds015", "evt_ds010", "evt_ds005"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, calls := pages(t, tc.query, 3)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.wantCalls, calls)
		})
	}
	t.Run("a failed delivery after a success is listed again", func(t *testing.T) {
		f.Delivered("acct_1", false, "evt_ds001")
		defer f.Delivered("acct_1", true, "evt_ds001")
		got, _ := pages(t, "delivery_success=false", 100)
		assert.Contains(t, got, "evt_ds001")
	})
	t.Run("another account's events", func(t *testing.T) {
		code, ids, _, _ := list(t, "acct_2", "delivery_success=false")
		require.Equal(t, http.StatusOK, code)
		assert.Equal(t, []string{"evt_other"}, ids, "never marked delivered: pending counts as not successful")
	})
	t.Run("not a boolean", func(t *testing.T) {
		code, ids, _, e := list(t, "acct_1", "delivery_success=maybe")
		assert.Equal(t, http.StatusBadRequest, code)
		assert.Empty(t, ids)
		assert.Equal(t, "delivery_success", e["param"])
		assert.Equal(t, "invalid_request_error", e["type"])
	})
}

func contains(ids []string, id string) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}
