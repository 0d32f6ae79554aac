package ops

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The overview's warning names the count of quarantined records (the count
// itself: recordq's TestQuarantinedRecordsAreCountedForTheOverview).
func TestQuarantineWarningNamesTheCount(t *testing.T) {
	assert.Contains(t, quarantineWarning(2), "2 event record(s) quarantined")
	assert.Contains(t, quarantineWarning(2), "docs/runbooks/StripePaymentsEventRecordsQuarantined.md")
}
