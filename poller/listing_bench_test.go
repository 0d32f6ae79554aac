package poller_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/poller"
)

// BenchmarkListingFullVsUndelivered measures what finding the webhook gap
// of one account's window costs with each listing the poller has: the
// full listing (GET /v1/events, every event, diffed against the events
// table) and the undelivered one (GET /v1/events?delivery_success=false,
// diffed the same way). POLLER_BENCH_EVENTS events (default 10,000) over
// the last 47 hours, every hundredth one never delivered (1 %) and absent
// from the table. Reported per listing: Stripe API calls, DynamoDB
// requests of the diff, events found missing, and the wall time with the
// fake Stripe unthrottled and at the poller's default 20 requests/s.
func BenchmarkListingFullVsUndelivered(b *testing.B) {
	n := benchEvents(b)
	for range b.N {
		b.StopTimer()
		e := newEnv(b)
		client, cc := counting(e.app.Dynamo)
		store := events.NewStore(client, e.app.Config.EventsTable, 720*time.Hour, nil)
		// Every hundredth event was never delivered (and is missing); the
		// others were delivered and are recorded processed.
		missing := seedMissing(b, e, store, acctA, n, 100)
		gone := map[string]bool{}
		for _, id := range missing {
			gone[id] = true
		}
		var delivered []string
		for _, id := range allIDs(b, e) {
			if !gone[id] {
				delivered = append(delivered, id)
			}
		}
		e.api.Delivered(acctA, true, delivered...)
		from, until := int64(0), e.clock().Unix()
		quiet := slog.New(slog.NewJSONHandler(io.Discard, nil))
		for _, rate := range []float64{-1, poller.DefaultRate} {
			for _, undelivered := range []bool{false, true} {
				api := poller.NewEventsAPI(poller.APIConfig{Key: e.api.Key, BaseURL: e.api.URL, Rate: rate}, quiet)
				list := api.ListPage
				name := "full"
				if undelivered {
					list, name = api.ListUndeliveredPage, "undelivered"
				}
				cc.reset()
				calls0 := e.api.Stats().Requests
				b.StartTimer()
				start := time.Now()
				listed, found := 0, 0
				after := ""
				for {
					page, err := list(context.Background(), acctA, true, from, until, after, 100)
					if err != nil {
						b.Fatal(err)
					}
					ids := make([]string, len(page.Events))
					for i, ev := range page.Events {
						ids[i] = ev.ID
					}
					if len(ids) > 0 {
						recs, err := store.BatchGet(context.Background(), ids)
						if err != nil {
							b.Fatal(err)
						}
						listed += len(ids)
						for _, id := range ids {
							if r, ok := recs[id]; !ok || r.Status != events.StatusProcessed {
								found++
							}
						}
					}
					if !page.HasMore {
						break
					}
					after = page.Events[len(page.Events)-1].ID
				}
				elapsed := time.Since(start)
				b.StopTimer()
				if found != len(gone) {
					b.Fatalf("%s: found %d missing, want %d", name, found, len(gone))
				}
				calls := e.api.Stats().Requests - calls0
				limit := "unthrottled"
				if rate > 0 {
					limit = "20 req/s"
				}
				b.Logf("%-11s %-11s %d events, %d undelivered: %4d Stripe calls, listed %5d, diff %3d DynamoDB requests, found %d missing, %s",
					name, limit, n, len(gone), calls, listed, total(cc.reset()), found, elapsed.Round(time.Millisecond))
			}
		}
	}
}

// allIDs is every event id the fake lists for acctA.
func allIDs(b *testing.B, e *env) []string {
	b.Helper()
	api := poller.NewEventsAPI(poller.APIConfig{Key: e.api.Key, BaseURL: e.api.URL, Rate: -1}, slog.New(slog.NewJSONHandler(io.Discard, nil)))
	var ids []string
	after := ""
	for {
		page, err := api.ListPage(context.Background(), acctA, true, 0, e.clock().Unix(), after, 100)
		if err != nil {
			b.Fatal(err)
		}
		for _, ev := range page.Events {
			ids = append(ids, ev.ID)
		}
		if !page.HasMore {
			return ids
		}
		after = page.Events[len(page.Events)-1].ID
	}
}
