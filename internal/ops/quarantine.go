package ops

import "fmt"

// quarantineWarning is the overview's line about n quarantined records.
func quarantineWarning(n int64) string {
	return fmt.Sprintf("%d event record(s) quarantined: the events table refused them for good. They stay readable; "+
		"see docs/runbooks/StripePaymentsEventRecordsQuarantined.md (table event_records_quarantined).", n)
}
