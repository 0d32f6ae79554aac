package thin

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/stripebudget"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
)

// V2Page is one page of GET /v2/core/events.
type V2Page struct {
	Data        []json.RawMessage `json:"data"`
	NextPageURL *string           `json:"next_page_url"`
}

// V2Events lists thin events created since `since` for stripeContext ("" the
// platform), one page; next is the next_page_url of the previous page ("" the
// first).
func (a StripeAPI) V2Events(ctx context.Context, stripeContext string, since time.Time, next string) (V2Page, error) {
	path := next
	if path == "" {
		path = "/v2/core/events?" + url.Values{"created[gte]": {since.UTC().Format(time.RFC3339Nano)}, "limit": {"100"}}.Encode()
	}
	if !strings.HasPrefix(path, "/v2/core/events?") {
		return V2Page{}, fmt.Errorf("refusing next_page_url %q", truncate(path, 100))
	}
	h := map[string][]string{"Stripe-Version": {APIVersionV2}}
	if stripeContext != "" {
		h["Stripe-Context"] = []string{stripeContext}
	}
	raw, err := a.get(ctx, path, h)
	if err != nil {
		return V2Page{}, err
	}
	var p V2Page
	if err := json.Unmarshal(raw, &p); err != nil {
		return V2Page{}, fmt.Errorf("list thin events: decode: %w", err)
	}
	return p, nil
}

// Sweeper finds thin events Stripe never delivered (a destination down or
// disabled): for the platform and every account of the registry (Accounts v2
// accounts send only thin events), it lists the Events API v2 over Window
// and takes in every event the events table lacks, or holds unprocessed,
// through the intake (source poller), as if it had been delivered. Snapshot
// events of the other accounts are the poller's (GET /v1/events).
type Sweeper struct {
	API      StripeAPI
	Budget   stripebudget.Budget
	Registry *Registry
	Records  interface {
		BatchGet(ctx context.Context, ids []string) (map[string]events.Record, error)
	}
	Intake *Intake
	// Window is how far back each sweep lists (default 24 h; Stripe keeps
	// 30 days).
	Window time.Duration
	Log    *slog.Logger
	Now    func() time.Time
}

// SweepReport says what a sweep did.
type SweepReport struct {
	Accounts, Listed, Taken int
}

// Run sweeps once.
func (s *Sweeper) Run(ctx context.Context) (SweepReport, error) {
	var rep SweepReport
	window, now := s.Window, s.Now
	if window <= 0 {
		window = 24 * time.Hour
	}
	if now == nil {
		now = time.Now
	}
	accounts, err := s.Registry.Accounts(ctx)
	if err != nil {
		return rep, err
	}
	since := now().Add(-window)
	for _, acct := range append([]string{""}, accounts...) {
		rep.Accounts++
		listed, taken, err := s.sweep(ctx, acct, since)
		rep.Listed += listed
		rep.Taken += taken
		if err != nil {
			return rep, fmt.Errorf("sweep thin events of %q: %w", acct, err)
		}
	}
	return rep, nil
}

func (s *Sweeper) sweep(ctx context.Context, stripeContext string, since time.Time) (listed, taken int, err error) {
	next := ""
	for {
		if err := s.Budget.Wait(ctx, stripebudget.Background); err != nil {
			return listed, taken, err
		}
		page, err := s.API.V2Events(ctx, stripeContext, since, next)
		if err != nil {
			return listed, taken, err
		}
		byID := map[string]stripeevent.Thin{}
		raws := map[string][]byte{}
		var ids []string
		for _, raw := range page.Data {
			t, err := stripeevent.ParseThin(raw)
			if err != nil {
				s.Log.Warn("thin sweep: skipping an event Stripe listed", "error", err)
				continue
			}
			byID[t.ID], raws[t.ID] = t, raw
			ids = append(ids, t.ID)
		}
		listed += len(ids)
		have, err := s.Records.BatchGet(ctx, ids)
		if err != nil {
			return listed, taken, err
		}
		for _, id := range ids {
			if r, ok := have[id]; ok && r.Status == events.StatusProcessed {
				continue
			}
			if _, err := s.Intake.Accept(ctx, byID[id], raws[id], stripeevent.SourcePoller); err != nil {
				return listed, taken, err
			}
			taken++
		}
		if page.NextPageURL == nil || *page.NextPageURL == "" {
			return listed, taken, nil
		}
		next = *page.NextPageURL
	}
}
