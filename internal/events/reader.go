package events

import (
	"context"
	"errors"
	"time"
)

// Reader is what the internal API and the operator console read of the
// events table (Store).
type Reader interface {
	Get(ctx context.Context, id string) (Record, error)
	ByDate(ctx context.Context, date string, r Range, limit int32, cursor string) (Page, error)
	ByAccount(ctx context.Context, account string, r Range, limit int32, cursor string) (Page, error)
	BySubscription(ctx context.Context, subscription string, r Range, limit int32, cursor string) (Page, error)
}

// ErrRangeReversed is a range whose start is after its end.
var ErrRangeReversed = errors.New("the start of the range is after its end")

// ClockRange is the inclusive window [from, to] of one day's clock times
// (ByDate). Each bound is HH:MM, HH:MM:SS or HH:MM:SS.mmm — which of them a
// caller accepts is the caller's check — and one given to the minute or the
// second covers all of it: from starts at its first millisecond, to ends at
// its last. An empty bound leaves that side open.
func ClockRange(from, to string) (Range, error) {
	r := Range{From: clockBound(from, ":00.000"), To: clockBound(to, ":59.999")}
	if r.From != "" && r.To != "" && r.From > r.To {
		return r, ErrRangeReversed
	}
	return r, nil
}

// clockBound completes v to HH:MM:SS.mmm with pad's seconds and
// milliseconds.
func clockBound(v, pad string) string {
	switch len(v) {
	case len("15:04"):
		return v + pad
	case len("15:04:05"):
		return v + pad[len(":00"):]
	}
	return v
}

// TimeRange is the inclusive range of instants [since, until] (ByAccount,
// BySubscription); a nil bound leaves that side open. until is moved on by
// untilPad, after the order check (the console reads a minute-precision
// end as the whole minute).
func TimeRange(since, until *time.Time, untilPad time.Duration) (Range, error) {
	var r Range
	if since != nil {
		r.From = since.UTC().Format(TimestampLayout)
	}
	if until != nil {
		r.To = until.Add(untilPad).UTC().Format(TimestampLayout)
	}
	if since != nil && until != nil && since.After(*until) {
		return r, ErrRangeReversed
	}
	return r, nil
}
