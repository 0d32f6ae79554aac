package ingest_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/stripe-payments/stripe-payments/internal/ingest"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

type snapshots struct{ got []string }

func (s *snapshots) Handle(_ context.Context, ev *stripe.Event, _ []byte, _ stripeevent.Source) (stripeevent.Outcome, error) {
	s.got = append(s.got, ev.ID)
	return stripeevent.Applied, nil
}

type thins struct {
	got    []string
	source stripeevent.Source
}

func (t *thins) Accept(_ context.Context, th stripeevent.Thin, _ []byte, source stripeevent.Source) (stripeevent.Outcome, error) {
	t.got, t.source = append(t.got, th.ID), source
	return stripeevent.Received, nil
}

func TestIngestDispatchesByObject(t *testing.T) {
	snap, thin := &snapshots{}, &thins{}
	in := ingest.New(snap, thin)
	ctx := context.Background()

	ev := stripetest.Event{Fixture: "payment_intent.succeeded"}.Build(t)
	res, err := in.Ingest(ctx, ev, "eventbridge")
	require.NoError(t, err)
	assert.Equal(t, stripeevent.KindSnapshot, res.Kind)
	assert.Equal(t, stripeevent.Applied, res.Outcome)
	assert.Len(t, snap.got, 1)
	assert.Empty(t, thin.got)

	th := stripetest.Thin{Fixture: "v1.payment_intent.succeeded"}.Build(t)
	res, err = in.Ingest(ctx, th, "eventbridge")
	require.NoError(t, err)
	assert.Equal(t, stripeevent.KindThin, res.Kind)
	assert.Equal(t, stripeevent.Received, res.Outcome)
	assert.Equal(t, []string{res.EventID}, thin.got)
	assert.Equal(t, stripeevent.Source("eventbridge"), thin.source)
	assert.Len(t, snap.got, 1)

	for name, body := range map[string]string{
		"not json":              `nope`,
		"another object":        `{"object":"payment_intent","id":"pi_1"}`,
		"thin with bad id":      `{"object":"v2.core.event","id":"x","type":"v1.a","created":"2026-11-25T15:03:10Z"}`,
		"snapshot without data": `{"object":"event","id":"evt_1","type":"a","created":1}`,
	} {
		_, err := in.Ingest(ctx, []byte(body), "webhook")
		assert.True(t, ingest.Malformed(err), "%s: %v", name, err)
	}
	assert.Len(t, snap.got, 1)
	assert.Len(t, thin.got, 1)

	// Without a thin intake a thin body is not an event this service takes.
	_, err = ingest.New(snap, nil).Ingest(ctx, th, "webhook")
	assert.True(t, ingest.Malformed(err))
}

// BenchmarkParse is the snapshot Parse alone; BenchmarkIngestSnapshot the
// entry point's snapshot path around it (with a handler that does
// nothing): the dispatch costs nothing on top of Parse, which is the code
// the webhook ran before (BENCHMARKS.md).
func BenchmarkParse(b *testing.B) {
	ev := stripetest.Event{Fixture: "payment_intent.succeeded"}.Build(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := stripeevent.Parse(ev); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkIngestSnapshot(b *testing.B) {
	ev := stripetest.Event{Fixture: "payment_intent.succeeded"}.Build(b)
	in := ingest.New(nopHandler{}, &thins{})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := in.Ingest(context.Background(), ev, "webhook"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkIngestThinParse(b *testing.B) {
	th := stripetest.Thin{Fixture: "v1.payment_intent.succeeded"}.Build(b)
	in := ingest.New(nopHandler{}, nopThin{})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := in.Ingest(context.Background(), th, "webhook"); err != nil {
			b.Fatal(err)
		}
	}
}

type nopHandler struct{}

func (nopHandler) Handle(context.Context, *stripe.Event, []byte, stripeevent.Source) (stripeevent.Outcome, error) {
	return stripeevent.Applied, nil
}

type nopThin struct{}

func (nopThin) Accept(context.Context, stripeevent.Thin, []byte, stripeevent.Source) (stripeevent.Outcome, error) {
	return stripeevent.Received, nil
}
