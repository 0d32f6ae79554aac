// Package stripetest is Stripe for the tests: the one fake Stripe at the
// HTTP level (Stripe, stripe.go), real-shaped event fixtures (stripe-go v76,
// API version 2023-10-16) with helpers to vary and sign them, and
// stripe-mock for request shapes checked against Stripe's OpenAPI spec.
package stripetest

import (
	"embed"
	"encoding/json"
	"fmt"
	"path"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stripe/stripe-go/v76/webhook"
)

//go:embed testdata/events/*.json
var fixtures embed.FS

// Fixture returns the raw JSON of testdata/events/<name>.json.
func Fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := fixtures.ReadFile(path.Join("testdata/events", name+".json"))
	if err != nil {
		t.Fatalf("fixture %s: %v", name, err)
	}
	return b
}

// FixtureNames lists every fixture (seed corpora, table tests).
func FixtureNames() []string {
	entries, _ := fixtures.ReadDir("testdata/events")
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name()[:len(e.Name())-len(".json")])
	}
	return names
}

// Event is a fixture with fields overridden: zero values keep the fixture's.
type Event struct {
	Fixture string
	ID      string // default: a fresh unique evt_ id
	Type    string
	Account *string   // nil keeps the fixture's; "" removes it (platform event)
	Created time.Time // default: now, so that the record is not expired
	// Object fields to set on data.object (id, status, metadata, ...).
	Object map[string]any
	// Livemode overrides livemode when non-nil.
	Livemode *bool
}

// NewID returns a unique, Stripe-looking event id.
func NewID() string { return "evt_test" + uuid.NewString()[:8] + uuid.NewString()[24:] }

// Build renders the event as JSON.
func (e Event) Build(t testing.TB) []byte {
	t.Helper()
	b, err := e.build(Fixture(t, e.Fixture))
	if err != nil {
		t.Fatalf("build event from %s: %v", e.Fixture, err)
	}
	return b
}

func (e Event) build(raw []byte) ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	id := e.ID
	if id == "" {
		id = NewID()
	}
	doc["id"] = id
	if e.Type != "" {
		doc["type"] = e.Type
	}
	if e.Account != nil {
		if *e.Account == "" {
			delete(doc, "account")
		} else {
			doc["account"] = *e.Account
		}
	}
	created := e.Created
	if created.IsZero() {
		created = time.Now()
	}
	doc["created"] = created.Unix()
	if e.Livemode != nil {
		doc["livemode"] = *e.Livemode
	}
	if len(e.Object) > 0 {
		data, ok := doc["data"].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("fixture has no data")
		}
		obj, ok := data["object"].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("fixture has no data.object")
		}
		for k, v := range e.Object {
			if v == nil {
				delete(obj, k)
				continue
			}
			obj[k] = v
		}
	}
	return json.Marshal(doc)
}

// Sign returns the Stripe-Signature header for payload, as Stripe computes it.
func Sign(payload []byte, secret string, at time.Time) string {
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: secret, Timestamp: at}).Header
}

// Ptr returns a pointer to v.
func Ptr[T any](v T) *T { return &v }
