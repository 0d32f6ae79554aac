package trigger_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/trigger"
)

// Bad input gets a clear error naming the field.
func TestParseNamesTheBadField(t *testing.T) {
	ok := trigger.Request{AccountID: "acc-1", Kind: "income", OccurredAt: "2026-11-28T09:30:00Z", Reference: "inc_123"}
	tests := []struct {
		name  string
		edit  func(r *trigger.Request)
		field string // "" : valid
	}{
		{"valid", func(*trigger.Request) {}, ""},
		{"balance", func(r *trigger.Request) { r.Kind = "balance" }, ""},
		{"an offset time", func(r *trigger.Request) { r.OccurredAt = "2026-11-28T10:30:00+01:00" }, ""},
		{"no account", func(r *trigger.Request) { r.AccountID = "" }, "account_id"},
		{"an account with a #", func(r *trigger.Request) { r.AccountID = "acc#1" }, "account_id"},
		{"an account too long", func(r *trigger.Request) { r.AccountID = strings.Repeat("a", 129) }, "account_id"},
		{"no kind", func(r *trigger.Request) { r.Kind = "" }, "kind"},
		{"another kind", func(r *trigger.Request) { r.Kind = "refund" }, "kind"},
		{"a kind in capitals", func(r *trigger.Request) { r.Kind = "INCOME" }, "kind"},
		{"no time", func(r *trigger.Request) { r.OccurredAt = "" }, "occurred_at"},
		{"a date only", func(r *trigger.Request) { r.OccurredAt = "2026-11-28" }, "occurred_at"},
		{"year 1", func(r *trigger.Request) { r.OccurredAt = "0001-01-01T00:00:00Z" }, "occurred_at"},
		{"no reference", func(r *trigger.Request) { r.Reference = "" }, "reference"},
		{"a reference too long", func(r *trigger.Request) { r.Reference = strings.Repeat("r", trigger.MaxReference+1) }, "reference"},
		{"a reference with a newline", func(r *trigger.Request) { r.Reference = "inc\n1" }, "reference"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := ok
			tc.edit(&r)
			got, err := trigger.Parse(r)
			if tc.field == "" {
				require.NoError(t, err)
				assert.Equal(t, r.AccountID, got.AccountID)
				assert.Equal(t, time.UTC, got.OccurredAt.Location())
				return
			}
			require.ErrorIs(t, err, apperr.ErrInvalid)
			assert.True(t, strings.HasPrefix(apperr.From(err).Message, tc.field+":"), "%q names %s", err, tc.field)
		})
	}
}

func TestKindsProcess(t *testing.T) {
	assert.Equal(t, billing.ProcWebhook, trigger.KindIncome.Process())
	assert.Equal(t, billing.ProcWebhookBalance, trigger.KindBalance.Process())
}

// An EventBridge event of the platform's bus is a trigger; anything else
// is refused with a reason.
func TestParseEvent(t *testing.T) {
	event := func(detailType, detail string) string {
		return `{"version":"0","id":"ev-1","detail-type":"` + detailType + `","source":"platform.banking","account":"111122223333",` +
			`"time":"2026-11-28T09:30:00Z","region":"us-east-1","resources":[],"detail":` + detail + `}`
	}
	good := `{"account_id":"acc-1","occurred_at":"2026-11-28T09:30:00Z","reference":"inc_1"}`
	tests := []struct {
		name   string
		body   string
		kind   trigger.Kind
		reason string
	}{
		{"income", event("income.detected", good), trigger.KindIncome, ""},
		{"balance", event("account.balance_available", good), trigger.KindBalance, ""},
		{"an amount is information only", event("income.detected",
			`{"account_id":"acc-1","occurred_at":"2026-11-28T09:30:00Z","reference":"inc_1","amount":100000}`), trigger.KindIncome, ""},
		{"not JSON", "hello", "", trigger.ReasonEnvelope},
		{"no detail", `{"id":"ev-1","detail-type":"income.detected","source":"platform.banking"}`, "", trigger.ReasonEnvelope},
		{"a null detail", event("income.detected", "null"), "", trigger.ReasonEnvelope},
		{"another detail-type", event("payout.paid", good), "", trigger.ReasonDetailType},
		{"a detail that is a string", event("income.detected", `"acc-1"`), "", trigger.ReasonDetail},
		{"a detail without account", event("income.detected", `{"occurred_at":"2026-11-28T09:30:00Z","reference":"inc_1"}`), "", trigger.ReasonDetail},
		{"a detail without reference", event("income.detected", `{"account_id":"acc-1","occurred_at":"2026-11-28T09:30:00Z"}`), "", trigger.ReasonDetail},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, id, err := trigger.ParseEvent([]byte(tc.body))
			if tc.reason == "" {
				require.NoError(t, err)
				assert.Equal(t, tc.kind, got.Kind)
				assert.Equal(t, "acc-1", got.AccountID)
				assert.Equal(t, "inc_1", got.Reference)
				assert.Equal(t, "ev-1", id)
				return
			}
			var ref *trigger.Refusal
			require.True(t, errors.As(err, &ref), "%v", err)
			assert.Equal(t, tc.reason, ref.Reason)
		})
	}
}
