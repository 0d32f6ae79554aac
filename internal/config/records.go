package config

import (
	"errors"
	"strconv"
)

// IngestRecords configures how `serve` writes event records to the events
// table (package recordq).
type IngestRecords struct {
	// WriteBehind: the webhook answers once the batch's Postgres commit
	// (which holds the record) is durable, and the record is copied to the
	// events table right after. Off by default (see README, Configuration:
	// TestDependencyBlackHoles runs out of its test data with it on): the
	// answer waits for the table write.
	WriteBehind bool
	// Writers is how many BatchWriteItem requests of the write-behind may be
	// in flight.
	Writers int
	// Backlog bounds the records acknowledged and not yet in the table;
	// deliveries wait (up to their deadline) while it is full.
	Backlog int
}

func loadIngestRecords(get func(key, def string) string) (IngestRecords, error) {
	var r IngestRecords
	var errs []error
	var err error
	if r.WriteBehind, err = strconv.ParseBool(get("INGEST_WRITE_BEHIND", "false")); err != nil {
		errs = append(errs, errors.New("INGEST_WRITE_BEHIND: true or false"))
	}
	if r.Writers, err = strconv.Atoi(get("INGEST_RECORD_WRITERS", "4")); err != nil || r.Writers < 1 || r.Writers > 64 {
		errs = append(errs, errors.New("INGEST_RECORD_WRITERS: an integer from 1 to 64"))
	}
	if r.Backlog, err = strconv.Atoi(get("INGEST_RECORD_BACKLOG", "2000")); err != nil || r.Backlog < 100 || r.Backlog > 1000000 {
		errs = append(errs, errors.New("INGEST_RECORD_BACKLOG: an integer from 100 to 1000000"))
	}
	return r, errors.Join(errs...)
}
