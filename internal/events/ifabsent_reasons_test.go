package events_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/dynamo"
	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// How a cancelled transaction of first records is answered,
// against DynamoDB's wire answers at HTTP level: a conflict with another
// write (a failure being recorded) or throttling is tried again; an item
// the table refuses for good comes back as the API error a plain write
// gets (ValidationException), so the write-behind isolates and quarantines
// that record instead of refusing every delivery as if the table were down.
func TestACancelledTransactionOfFirstRecords(t *testing.T) {
	cancelled := func(codes ...string) string {
		var rs []string
		for _, c := range codes {
			rs = append(rs, `{"Code":"`+c+`","Message":"`+c+` here"}`)
		}
		return `{"__type":"com.amazonaws.dynamodb.v20120810#TransactionCanceledException","Message":"Transaction cancelled","CancellationReasons":[` + strings.Join(rs, ",") + `]}`
	}
	for _, tc := range []struct {
		name    string
		answers []string // one per TransactWriteItems call; "" is success
		calls   int
		code    string // the API error code the caller sees; "" for success
	}{
		{name: "conflict, then written", answers: []string{cancelled("None", "TransactionConflict")}, calls: 2},
		{name: "throttled, then written", answers: []string{cancelled("ThrottlingError", "None")}, calls: 2},
		{name: "one item refused for good", answers: []string{cancelled("None", "ValidationError")}, calls: 1, code: "ValidationException"},
		{name: "item collection too large", answers: []string{cancelled("ItemCollectionSizeLimitExceeded", "None")}, calls: 1, code: "ItemCollectionSizeLimitExceededException"},
		// A cancellation that names no cause is tried again after a
		// backoff, never in a tight loop (without one it made 1,380
		// calls in 500 ms), and is an error after nine tries.
		{name: "cancelled for no reason named, then written", answers: []string{cancelled("None", "None")}, calls: 2},
		{name: "cancelled for no reason named, every time", answers: slices.Repeat([]string{cancelled("None", "")}, 50), calls: 9, code: "TransactionCanceledException"},
		{name: "conflicting every time", answers: slices.Repeat([]string{cancelled("TransactionConflict", "None")}, 50), calls: 9, code: "TransactionCanceledException"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				require.True(t, strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".TransactWriteItems"), r.Header.Get("X-Amz-Target"))
				n := int(calls.Add(1)) - 1
				w.Header().Set("Content-Type", "application/x-amz-json-1.0")
				if n < len(tc.answers) && tc.answers[n] != "" {
					w.Header().Set("X-Amzn-Errortype", "TransactionCanceledException")
					w.WriteHeader(http.StatusBadRequest)
					_, _ = io.WriteString(w, tc.answers[n])
					return
				}
				_, _ = io.WriteString(w, `{}`)
			}))
			defer srv.Close()
			client, err := dynamo.NewClient(context.Background(), "us-east-1", srv.URL)
			require.NoError(t, err)
			store := events.NewStore(client, "events", 720*time.Hour, nil)
			var recs []events.Record
			for range 2 {
				payload := stripetest.Event{Fixture: "customer.subscription.updated"}.Build(t)
				ev, err := stripeevent.Parse(payload)
				require.NoError(t, err)
				r := events.NewRecord(ev, payload, platform, 720*time.Hour, stripeevent.SourceWebhook, time.Now())
				r.Status, r.ProcessedAt, r.IfAbsent = events.StatusProcessed, time.Now(), true
				recs = append(recs, r)
			}

			err = store.PutProcessed(context.Background(), recs)
			assert.Equal(t, tc.calls, int(calls.Load()), "TransactWriteItems calls")
			if tc.code == "" {
				require.NoError(t, err)
				return
			}
			var api smithy.APIError
			require.True(t, errors.As(err, &api), "an API error: %v", err)
			assert.Equal(t, tc.code, api.ErrorCode())
			var nw *events.NotWrittenError
			assert.False(t, errors.As(err, &nw), "not a refusal by condition")
		})
	}
}
