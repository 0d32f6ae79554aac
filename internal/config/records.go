package config

import (
	"errors"
	"strconv"
	"time"
)

// IngestRecords configures how `serve` writes event records to the events
// table (package recordq).
type IngestRecords struct {
	// WriteBehind: the webhook answers once the batch's Postgres commit
	// (which holds the record) is durable, and the record is copied to the
	// events table right after. On by default; off, the answer waits for
	// the table write.
	WriteBehind bool
	// Writers is how many write-behind table writes (up to 100 records
	// each) may be in flight at most; beyond the first, only while it falls
	// behind (recordq.Config.HelpAfter).
	Writers int
	// Backlog bounds the records acknowledged and not yet in the table;
	// deliveries wait (up to their deadline) while it is full.
	Backlog int
	// Linger is how long the oldest waiting record may wait for a batch of
	// 100 to fill: it delays only the table write, never an answer, and at
	// a low rate it trades that delay for fewer DynamoDB requests.
	Linger time.Duration
	// BacklogBytes bounds the payload bytes of that backlog too
	// (INGEST_RECORD_BACKLOG_BYTES); QuarantineAfter is how many writes the
	// table refuses for good before a record is quarantined
	// (INGEST_RECORD_QUARANTINE_AFTER). docs/retention.md.
	BacklogBytes    int64
	QuarantineAfter int
	// FreshWrite is how the write-behind writes the records of events its
	// claim inserted, each on the condition that the table holds none
	// (INGEST_RECORD_FRESH_WRITE): "transaction" (TransactWriteItems of up
	// to 100: the least DynamoDB Local CPU per record, twice the write
	// capacity on AWS) or "item" (one conditional PutItem each: plain write
	// capacity). Unset ("auto") picks by what pays: item on AWS, where write
	// capacity is the bill, transaction with DYNAMODB_ENDPOINT set, where
	// DynamoDB Local's CPU is (BENCHMARKS.md).
	FreshWrite string
}

// freshWriteAuto is INGEST_RECORD_FRESH_WRITE's default, resolved by
// resolveFreshWrite once the DynamoDB endpoint is known.
const freshWriteAuto = "auto"

// resolveFreshWrite turns "auto" into item on AWS (an empty endpoint) and
// transaction on an endpoint of its own (DynamoDB Local).
func (r *IngestRecords) resolveFreshWrite(dynamoEndpoint string) {
	if r.FreshWrite != freshWriteAuto {
		return
	}
	r.FreshWrite = "transaction"
	if dynamoEndpoint == "" {
		r.FreshWrite = "item"
	}
}

func loadIngestRecords(get func(key, def string) string) (IngestRecords, error) {
	var r IngestRecords
	var errs []error
	var err error
	if r.WriteBehind, err = strconv.ParseBool(get("INGEST_WRITE_BEHIND", "true")); err != nil {
		errs = append(errs, errors.New("INGEST_WRITE_BEHIND: true or false"))
	}
	if r.Writers, err = strconv.Atoi(get("INGEST_RECORD_WRITERS", "4")); err != nil || r.Writers < 1 || r.Writers > 64 {
		errs = append(errs, errors.New("INGEST_RECORD_WRITERS: an integer from 1 to 64"))
	}
	if r.Backlog, err = strconv.Atoi(get("INGEST_RECORD_BACKLOG", "2000")); err != nil || r.Backlog < 100 || r.Backlog > 1000000 {
		errs = append(errs, errors.New("INGEST_RECORD_BACKLOG: an integer from 100 to 1000000"))
	}
	if r.Linger, err = time.ParseDuration(get("INGEST_RECORD_LINGER", "50ms")); err != nil || r.Linger <= 0 || r.Linger > time.Second {
		errs = append(errs, errors.New("INGEST_RECORD_LINGER: a duration from 1ms to 1s, such as 10ms"))
	}
	if r.BacklogBytes, err = strconv.ParseInt(get("INGEST_RECORD_BACKLOG_BYTES", "67108864"), 10, 64); err != nil || r.BacklogBytes < 1<<20 || r.BacklogBytes > 16<<30 {
		errs = append(errs, errors.New("INGEST_RECORD_BACKLOG_BYTES: bytes from 1048576 (1 MiB) to 17179869184 (16 GiB)"))
	}
	if r.QuarantineAfter, err = strconv.Atoi(get("INGEST_RECORD_QUARANTINE_AFTER", "5")); err != nil || r.QuarantineAfter < 1 || r.QuarantineAfter > 1000 {
		errs = append(errs, errors.New("INGEST_RECORD_QUARANTINE_AFTER: an integer from 1 to 1000"))
	}
	switch r.FreshWrite = get("INGEST_RECORD_FRESH_WRITE", freshWriteAuto); r.FreshWrite {
	case freshWriteAuto, "transaction", "item":
	default:
		errs = append(errs, errors.New("INGEST_RECORD_FRESH_WRITE: auto, transaction or item"))
	}
	return r, errors.Join(errs...)
}
