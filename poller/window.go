package poller

import (
	"time"

	"github.com/stripe-payments/stripe-payments/internal/events"
)

// Window bounds a run by event creation time, half-open: [Since, Until).
// The zero Window means a checkpointed run: each account's window starts at
// its checkpoint minus the overlap and ends at now minus the settle delay.
// A Window with Since set is a backfill: it is listed as given (clamped to
// Stripe's retention) and never moves a checkpoint.
type Window struct {
	Since, Until time.Time
}

// IsBackfill reports whether w is an explicit backfill window.
func (w Window) IsBackfill() bool { return !w.Since.IsZero() }

// span is a half-open interval [from, until) of creation times, whole seconds.
type span struct {
	from, until time.Time
}

func (s span) empty() bool { return !s.from.Before(s.until) }

// createdFilter renders s as Stripe's inclusive created[gte]/created[lte].
func (s span) createdFilter() (gte, lte int64) { return s.from.Unix(), s.until.Unix() - 1 }

// accountSpan computes an account's window.
//
//	until = now - settle: events become listable a little after `created`
//	        (and the webhook usually lands meanwhile), so the newest seconds
//	        are left for the next run.
//	from  = checkpoint - overlap: `created` has one-second resolution and an
//	        event can become listable after a later one was already listed,
//	        so each run re-lists the tail of the previous one. Without a
//	        checkpoint, now - lookback.
//
// from never goes past Stripe's retention; clamped reports that it had to.
func (c Config) accountSpan(now time.Time, checkpoint time.Time, hasCheckpoint bool) (s span, clamped bool) {
	until := now.Add(-c.Settle).Truncate(time.Second)
	from := now.Add(-c.Lookback)
	if hasCheckpoint {
		from = checkpoint.Add(-c.Overlap)
	}
	return c.clamp(now, span{from: from.Truncate(time.Second), until: until})
}

// backfillSpan computes the window of an explicit backfill.
func (c Config) backfillSpan(now time.Time, w Window) (s span, clamped bool) {
	until := w.Until
	if until.IsZero() {
		until = now.Add(-c.Settle)
	}
	return c.clamp(now, span{from: w.Since.Truncate(time.Second), until: until.Truncate(time.Second)})
}

func (c Config) clamp(now time.Time, s span) (span, bool) {
	// Round the horizon up to a whole second so that it stays inside.
	horizon := now.Add(-c.Retention).Add(time.Second - 1).Truncate(time.Second)
	if s.from.Before(horizon) {
		s.from = horizon
		return s, true
	}
	return s, false
}

// slices cuts s into consecutive pieces of at most size, oldest first. Each
// piece is listed, diffed and replayed before the next, so a long backfill
// advances the checkpoint as it goes and holds at most one piece's missing
// events in memory.
func (s span) slices(size time.Duration) []span {
	if s.empty() {
		return nil
	}
	var out []span
	for from := s.from; from.Before(s.until); from = from.Add(size) {
		out = append(out, span{from: from, until: minTime(from.Add(size), s.until)})
	}
	return out
}

// dayRange is the part of a span that falls on one UTC date, as a query of
// the events table's date-time-index (partition `date`, sort `time`).
type dayRange struct {
	Date  string
	Range events.Range
}

// days splits s at UTC midnights: the date/time index is partitioned by
// date, so a window across midnight is two queries, and the second starts
// at 00:00:00.000 of the next date.
func (s span) days() []dayRange {
	if s.empty() {
		return nil
	}
	from, until := s.from.UTC(), s.until.UTC()
	last := until.Add(-time.Millisecond) // inclusive end, millisecond resolution like the index
	var out []dayRange
	for day := from.Truncate(24 * time.Hour); !day.After(last); day = day.Add(24 * time.Hour) {
		r := events.Range{}
		if from.After(day) {
			r.From = from.Format(events.TimeLayout)
		}
		if last.Before(day.Add(24*time.Hour - time.Millisecond)) {
			r.To = last.Format(events.TimeLayout)
		}
		out = append(out, dayRange{Date: day.Format(events.DateLayout), Range: r})
	}
	return out
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
