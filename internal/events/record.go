// Package events holds the event record of docs/design.md §5 and its DynamoDB store.
// What an event is and how handling it ends (parsing, sources, outcomes) is
// the vocabulary of package stripeevent, shared with code that stores nothing.
package events

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/stripe/stripe-go/v76"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
)

// Status is the processing state of a recorded event.
type Status string

const (
	StatusReceived  Status = "received"
	StatusProcessed Status = "processed"
	StatusFailed    Status = "failed"
)

// Layouts of the timestamp attributes (docs/design.md §5, Contract).
const (
	TimestampLayout = "2006-01-02 15:04:05.000"
	DateLayout      = "2006-01-02"
	TimeLayout      = "15:04:05.000"
)

// Errors are apperr's; callers never need the DynamoDB driver to understand
// one. A missing (or expired) record is apperr.ErrNotFound (notFound).

// ErrDuplicate: a thin record with this id exists already (PutReceived).
var ErrDuplicate = apperr.New(apperr.CodeConflict, "event already recorded")

// notFound is a record that is not there, or expired.
func notFound(id string) error { return apperr.New(apperr.CodeNotFound, "event %s not found", id) }

// Record is one stored event.
type Record struct {
	ID            string
	Type          string
	StripeAccount string
	Created       time.Time // from the event's created (second resolution)
	Expiration    time.Time
	Subscription  string
	APIVersion    string
	Livemode      bool
	Status        Status
	ReceivedAt    time.Time
	ProcessedAt   time.Time
	Source        stripeevent.Source
	Attempts      int
	LastError     string
	Payload       []byte // raw event JSON, uncompressed in memory

	// IfAbsent is not stored: it asks PutProcessed to write the record
	// only where the table holds no record of its event (see PutProcessed).
	IfAbsent bool
	// IfUnchanged is not stored: it asks PutProcessed to write the record
	// only where the table still holds this earlier record of its event,
	// as read (its status, attempts and last_error): a failure recorded
	// since the read must be superseded, not overwritten.
	IfUnchanged *Record

	// Thin events (docs/design.md §4): PayloadKind is "thin" for them ("" or
	// "snapshot" otherwise); SnapshotEvent is the snapshot event a v1 thin
	// event was hydrated into; Hydration is where its hydration is (see
	// thin.go); RelatedObject is the id of the object it is about (for a
	// health event, the object Stripe failed to generate an event for);
	// Severity is a health event's data.severity, once hydrated.
	PayloadKind   stripeevent.PayloadKind
	SnapshotEvent string
	Hydration     string
	RelatedObject string
	Severity      string
}

// Timestamp renders Created as the table's timestamp attribute.
func (r Record) Timestamp() string { return r.Created.UTC().Format(TimestampLayout) }

// Date renders the date part of Created.
func (r Record) Date() string { return r.Created.UTC().Format(DateLayout) }

// Time renders the time part of Created.
func (r Record) Time() string { return r.Created.UTC().Format(TimeLayout) }

// Expired reports whether the record is past its expiration; DynamoDB deletes
// expired items only eventually, so readers treat them as absent.
func (r Record) Expired(now time.Time) bool {
	return !r.Expiration.IsZero() && !now.Before(r.Expiration)
}

// MaxAPIVersion bounds the api_version kept on a record. Stripe's are a
// date and a name ("2024-09-30.acacia"); the envelope's field is otherwise
// unbounded, and a record over DynamoDB's item limit could never be written
// (with the write-behind, its retries would refuse every delivery).
const MaxAPIVersion = 100

// NewRecord builds the record of a verified event. platformAccount stands in
// for events that carry no Connect account.
func NewRecord(ev *stripe.Event, payload []byte, platformAccount string, ttl time.Duration, source stripeevent.Source, now time.Time) Record {
	created := time.Unix(ev.Created, 0).UTC()
	account := ev.Account
	if account == "" {
		account = platformAccount
	}
	return Record{
		ID:            ev.ID,
		Type:          string(ev.Type),
		StripeAccount: account,
		Created:       created,
		Expiration:    created.Add(ttl),
		Subscription:  stripeevent.SubscriptionID(ev),
		APIVersion:    truncate(ev.APIVersion, MaxAPIVersion),
		Livemode:      ev.Livemode,
		Status:        StatusReceived,
		ReceivedAt:    now.UTC(),
		Source:        source,
		Attempts:      1,
		Payload:       payload,
	}
}

// BestSpeed: event JSON compresses ~4x at level 1 too, at a fraction of
// the CPU of the default level, and ingest is CPU-bound on small machines.
var gzipWriters = sync.Pool{New: func() any {
	zw, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed)
	return zw
}}

// Compress gzips an event payload for storage.
func Compress(payload []byte) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(len(payload)/3 + 64)
	zw := gzipWriters.Get().(*gzip.Writer)
	defer gzipWriters.Put(zw)
	zw.Reset(&buf)
	if _, err := zw.Write(payload); err != nil {
		return nil, fmt.Errorf("gzip payload: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("gzip payload: %w", err)
	}
	return buf.Bytes(), nil
}

// MaxStoredPayload bounds the compressed payload kept on a record. DynamoDB
// refuses items over 400 KB; the webhook accepts events up to 1 MiB, and
// Stripe's JSON compresses about 4x, but an event that does not fit would
// fail on every delivery forever. Its record is written without the payload
// instead: the replay API and the poller read it from Stripe's Events API.
const MaxStoredPayload = 300 << 10

// storedPayload is the payload attribute of a record: compressed, or nil
// when it is over MaxStoredPayload.
func storedPayload(raw []byte) ([]byte, error) {
	payload, err := Compress(raw)
	if err != nil || len(payload) > MaxStoredPayload {
		return nil, err
	}
	return payload, nil
}

// Decompress reverses Compress.
func Decompress(data []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("gunzip payload: %w", err)
	}
	defer zr.Close()
	out, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("gunzip payload: %w", err)
	}
	return out, nil
}
