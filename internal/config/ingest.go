package config

import "time"

// The ingest path's defaults, in one place: `serve` takes them when the
// environment leaves a setting out, and the event handler takes them for
// any setting its Config leaves at zero (tests and tools that build it
// directly), so both run alike.
const (
	// DefaultIngestMaxBatch: DynamoDB's BatchWriteItem limit (INGEST_MAX_BATCH).
	DefaultIngestMaxBatch = 25
	// DefaultIngestFlushers: batches in flight at once (INGEST_FLUSHERS);
	// two let one batch's Postgres work overlap another's DynamoDB write.
	DefaultIngestFlushers = 2
	// DefaultIngestTimeout bounds one delivery (INGEST_TIMEOUT).
	DefaultIngestTimeout = 10 * time.Second
	// DefaultIngestBatchTimeout bounds one batch's work (INGEST_BATCH_TIMEOUT).
	DefaultIngestBatchTimeout = 5 * time.Second
	// DefaultIngestQueueMax and DefaultIngestQueueMaxBytes bound what waits
	// for a batch (INGEST_QUEUE_MAX, INGEST_QUEUE_MAX_BYTES).
	DefaultIngestQueueMax      = 1000
	DefaultIngestQueueMaxBytes = 64 << 20
)
