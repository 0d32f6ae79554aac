package events_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// A signed event the webhook accepts (up to 1 MiB) may not compress under
// DynamoDB's 400 KB item limit. Its record must still be writable, or the
// event would fail on every delivery forever: the payload is left out (the
// replay API and the poller read such an event from Stripe's Events API).
func TestRecordOfAnIncompressibleEventOmitsThePayload(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	noise := make([]byte, 450<<10)
	_, _ = rand.Read(noise)
	payload := stripetest.Event{Fixture: "customer.created", Object: map[string]any{"description": hex.EncodeToString(noise)}}.Build(t)
	require.Less(t, len(payload), 1<<20, "the webhook accepts it")
	ev, err := stripeevent.Parse(payload)
	require.NoError(t, err)
	got := writeFailedThenProcessed(t, f, events.NewRecord(ev, payload, platform, 720*time.Hour, stripeevent.SourceWebhook, f.now))
	assert.Empty(t, got.Payload, "too large to keep")

	small := f.record(t, stripetest.Event{Fixture: "customer.created"})
	got, err = f.store.Get(ctx, small.ID)
	require.NoError(t, err)
	assert.Equal(t, small.Payload, got.Payload, "an ordinary payload is kept")
}

// The same holds for the envelope's own fields: a signed event whose
// api_version alone is over DynamoDB's item limit (the body is within the
// webhook's 1 MiB) is either refused by Parse, recording nothing, or makes a
// record the table takes. Otherwise its record can never be written: with
// the write-behind, the writers retry it forever and refuse every delivery
// meanwhile, also after a restart.
func TestRecordOfAnEventWithAHugeAPIVersionIsWritable(t *testing.T) {
	f := newFixture(t)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(stripetest.Event{Fixture: "customer.created"}.Build(t), &doc))
	doc["api_version"] = strings.Repeat("2024-06-20.acacia;", 30000) // 540 KB, compresses to little
	payload, err := json.Marshal(doc)
	require.NoError(t, err)
	require.Less(t, len(payload), 1<<20, "the webhook accepts it")
	ev, err := stripeevent.Parse(payload)
	require.NoError(t, err, "the envelope's api_version is not checked at the door")
	got := writeFailedThenProcessed(t, f, events.NewRecord(ev, payload, platform, 720*time.Hour, stripeevent.SourceWebhook, f.now))
	assert.LessOrEqual(t, len(got.APIVersion), events.MaxAPIVersion+len("…"), "api_version is bounded")
	assert.True(t, strings.HasPrefix(got.APIVersion, "2024-06-20.acacia;"), "and starts as sent: %q", got.APIVersion)
}

// writeFailedThenProcessed writes rec as a failed record, then as processed,
// as an event that failed once and then went through, and reads it back.
func writeFailedThenProcessed(t *testing.T, f *fixture, rec events.Record) events.Record {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, f.store.RecordFailure(ctx, rec, errors.New("postgres down")), "a failure record")
	rec.Status, rec.ProcessedAt = events.StatusProcessed, f.now
	require.NoError(t, f.store.PutProcessed(ctx, []events.Record{rec}), "a processed record")
	got, err := f.store.Get(ctx, rec.ID)
	require.NoError(t, err)
	assert.Equal(t, events.StatusProcessed, got.Status)
	return got
}
