// Package trigger is the intake of the collections the platform triggers
// (docs/design.md §8 "Collections triggered by the platform"): the platform
// knows when a member has money (income detected on their bank account, a
// first balance on a new account) and says so, on BILLING_TRIGGERS_QUEUE_URL
// (an EventBridge rule on the platform's own bus) or at
// POST /internal/v1/billing/triggers. Either way the trigger is first
// recorded in Postgres (one row per `reference`: the same reference twice
// does nothing twice), and only then collected by the Processor, which
// leases recorded triggers on every replica and hands each to the billing
// core (the collector's CollectTriggered, billing.Service). A crash between the record and
// the collection loses nothing: the row waits for the next lease.
//
// A queue message is deleted only once its trigger is durably recorded;
// one that is not a trigger is never deleted: it is recorded as a refusal
// with its reason (billing_trigger_refusals, a log line, a metric) and left
// to the queue's redrive policy, which moves it to the dead-letter queue.
package trigger

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
)

// Kind is what the platform saw.
type Kind string

const (
	// KindIncome: income detected on the member's bank account (process
	// WEBHOOK).
	KindIncome Kind = "income"
	// KindBalance: the first balance on a new account (process
	// WEBHOOK_BALANCE).
	KindBalance Kind = "balance"
)

// Kinds lists every kind (the metrics' label set).
var Kinds = []Kind{KindIncome, KindBalance}

// Process is the billing process a trigger of kind k collects with.
func (k Kind) Process() model.Process {
	if k == KindBalance {
		return model.ProcWebhookBalance
	}
	return model.ProcWebhook
}

// The EventBridge detail-types of the platform's bus and their kinds.
const (
	DetailTypeIncome  = "income.detected"
	DetailTypeBalance = "account.balance_available"
)

var kindOfDetailType = map[string]Kind{DetailTypeIncome: KindIncome, DetailTypeBalance: KindBalance}

// Sources of a trigger.
const (
	SourceAPI   = "api"
	SourceQueue = "queue"
)

// MaxReference bounds a reference's length.
const MaxReference = 200

// Request is a trigger as the platform sends it: the API's body, and what
// an EventBridge event's detail and detail-type say.
type Request struct {
	AccountID  string `json:"account_id"`
	Kind       string `json:"kind"`
	OccurredAt string `json:"occurred_at"`
	Reference  string `json:"reference"`
}

// Trigger is a validated trigger.
type Trigger struct {
	AccountID  string
	Kind       Kind
	OccurredAt time.Time
	Reference  string
}

// Parse validates r; a bad field is apperr.ErrInvalid naming it.
func Parse(r Request) (Trigger, error) {
	t := Trigger{AccountID: r.AccountID, Kind: Kind(r.Kind), Reference: r.Reference}
	if !model.ValidID(r.AccountID) {
		return t, apperr.Invalid("account_id: required, 1-128 characters without '#', '/' or spaces")
	}
	if t.Kind != KindIncome && t.Kind != KindBalance {
		return t, apperr.Invalid("kind: income or balance")
	}
	at, err := time.Parse(time.RFC3339, r.OccurredAt)
	if err != nil || at.Year() < 2000 {
		return t, apperr.Invalid("occurred_at: required, an RFC 3339 time such as 2026-11-28T09:30:00Z")
	}
	t.OccurredAt = at.UTC()
	if r.Reference == "" || len(r.Reference) > MaxReference || strings.IndexFunc(r.Reference, unicode.IsControl) >= 0 {
		return t, apperr.Invalid("reference: required, 1-%d characters without control characters (the platform's id of the event)", MaxReference)
	}
	return t, nil
}

// Refusal reasons of a queue message (the refusals metric's label).
const (
	ReasonEnvelope   = "envelope"    // not an EventBridge event
	ReasonDetailType = "detail_type" // a detail-type that is not a trigger's
	ReasonDetail     = "detail"      // a detail that is not a valid trigger
	// ReasonConflict: its reference was recorded for another account or
	// kind.
	ReasonConflict = "reference_conflict"
)

// Reasons lists every refusal reason.
var Reasons = []string{ReasonEnvelope, ReasonDetailType, ReasonDetail, ReasonConflict}

// Refusal is why a queue message is not a trigger.
type Refusal struct {
	Reason string
	Err    error
}

func (r *Refusal) Error() string { return fmt.Sprintf("refused (%s): %v", r.Reason, r.Err) }
func (r *Refusal) Unwrap() error { return r.Err }

// envelope is the part of an EventBridge event the intake reads.
type envelope struct {
	ID         string          `json:"id"`
	DetailType string          `json:"detail-type"`
	Source     string          `json:"source"`
	Detail     json.RawMessage `json:"detail"`
}

// detail is an event's detail: the API's fields but kind (the
// detail-type says it).
type detail struct {
	AccountID  string `json:"account_id"`
	OccurredAt string `json:"occurred_at"`
	Reference  string `json:"reference"`
}

// ParseEvent reads an SQS message body as an EventBridge event of the
// platform's bus and returns its trigger and the event's id; a body that is
// not one is a *Refusal.
func ParseEvent(body []byte) (Trigger, string, error) {
	var env envelope
	if err := json.Unmarshal(body, &env); err != nil {
		return Trigger{}, "", &Refusal{ReasonEnvelope, fmt.Errorf("not an EventBridge event: %v", err)}
	}
	if env.DetailType == "" || len(env.Detail) == 0 || string(env.Detail) == "null" {
		return Trigger{}, env.ID, &Refusal{ReasonEnvelope, fmt.Errorf("not an EventBridge event: no detail-type or no detail")}
	}
	kind, ok := kindOfDetailType[env.DetailType]
	if !ok {
		return Trigger{}, env.ID, &Refusal{ReasonDetailType, fmt.Errorf("detail-type %q is not a trigger's (%s or %s)",
			truncate(env.DetailType, 100), DetailTypeIncome, DetailTypeBalance)}
	}
	var d detail
	if err := json.Unmarshal(env.Detail, &d); err != nil {
		return Trigger{}, env.ID, &Refusal{ReasonDetail, fmt.Errorf("detail is not a JSON object of account_id, occurred_at, reference: %v", err)}
	}
	t, err := Parse(Request{AccountID: d.AccountID, Kind: string(kind), OccurredAt: d.OccurredAt, Reference: d.Reference})
	if err != nil {
		return Trigger{}, env.ID, &Refusal{ReasonDetail, fmt.Errorf("detail.%s", apperr.From(err).Message)}
	}
	return t, env.ID, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
