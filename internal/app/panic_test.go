package app_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/stripe-payments/stripe-payments/internal/app"
	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/handler"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// TestPanicsInABatchAreContained injects a panic into the processing of two
// deliveries, one after the other, with INGEST_FLUSHERS=2: before the fix
// each panic leaked a flusher slot, and the third delivery waited forever
// while /readyz stayed green. Now each panicking delivery is answered 503,
// the panics are counted, a normal delivery is answered 200, and the two
// events, redelivered once the fault is gone, are processed.
func TestPanicsInABatchAreContained(t *testing.T) {
	var poisoned sync.Map // event ids whose processing panics
	a := startApp(t, nil, map[string]string{"INGEST_FLUSHERS": "2"}, app.WithRoutes(func(r handler.Routes) handler.Routes {
		return r.With("payment_intent.succeeded", func(_ context.Context, _ handler.Tx, ev *stripe.Event) error {
			if _, ok := poisoned.Load(ev.ID); ok {
				panic("injected fault in " + ev.ID)
			}
			return nil
		})
	}))
	url := a.Server.URL()
	client := &http.Client{Timeout: 30 * time.Second}
	deliver := func(payload []byte) int {
		req, err := http.NewRequest(http.MethodPost, url+"/webhooks/stripe", bytesReader(payload))
		require.NoError(t, err)
		req.Header.Set("Stripe-Signature", stripetest.Sign(payload, secret, time.Now()))
		resp, err := client.Do(req)
		require.NoError(t, err, "every delivery is answered")
		resp.Body.Close()
		return resp.StatusCode
	}

	var bad [][]byte
	var badIDs []string
	for range 2 {
		id := stripetest.NewID()
		poisoned.Store(id, true)
		payload := stripetest.Event{Fixture: "payment_intent.succeeded", ID: id}.Build(t)
		bad, badIDs = append(bad, payload), append(badIDs, id)
		assert.Equal(t, http.StatusServiceUnavailable, deliver(payload), "a panicking delivery is a 503: Stripe retries it")
	}

	good := stripetest.NewID()
	assert.Equal(t, http.StatusOK, deliver(stripetest.Event{Fixture: "payment_intent.succeeded", ID: good}.Build(t)),
		"a normal delivery after two panics")
	status, body := get(t, a.Admin.URL()+"/readyz", "")
	assert.Equal(t, http.StatusOK, status, "ready: %v", body)
	assert.Contains(t, metricsText(t, a.Admin.URL()), "stripe_payments_ingest_panics_total 2")

	// The fault is fixed; Stripe's retries now go through.
	for i, payload := range bad {
		poisoned.Delete(badIDs[i])
		assert.Equal(t, http.StatusOK, deliver(payload))
	}
	recs, err := a.Events.BatchGet(context.Background(), append(badIDs, good))
	require.NoError(t, err)
	for _, id := range append(badIDs, good) {
		assert.Equal(t, events.StatusProcessed, recs[id].Status, id)
	}
	assert.True(t, a.Handler.Stats() == handler.QueueStats{}, "nothing queued or in flight: %+v", a.Handler.Stats())
}

func metricsText(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return strings.TrimSpace(string(b))
}

func bytesReader(b []byte) io.Reader { return strings.NewReader(string(b)) }
