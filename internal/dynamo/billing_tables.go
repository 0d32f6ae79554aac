package dynamo

import "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

// Names and key attributes of the billing single table's indexes (docs/design.md §8).
//
// Both are sparse and write-sharded: an item is in an index only while it
// carries that index's key attributes, and the partition value is
// "<YYYY-MM-DD>#<shard>" so that one busy date spreads over
// BILLING_SHARDS partitions, which the jobs query in parallel.
const (
	// BillingRemindersIndex is GSI-1: subscriptions by the date their next
	// reminder is due, sorted by LastReminderDate.
	BillingRemindersIndex = "GSI-1"
	// BillingPaymentsIndex is GSI-2: what the collection job must act on,
	// by date: subscriptions whose next payment is due (sorted by
	// LastPaymentDate, or a sentinel when never paid) plus failed periods
	// awaiting a retry and paused subscriptions awaiting their resume.
	BillingPaymentsIndex = "GSI-2"

	BillingGSI1PK = "GSI1PK"
	BillingGSI1SK = "GSI1SK"
	BillingGSI2PK = "GSI2PK"
	BillingGSI2SK = "GSI2SK"
)

// BillingTable is the spec of BILLING_TABLE: subscriptions, billing periods,
// receipts (TTL attribute "TTL") and scheduling markers under PK/SK.
func BillingTable(name string) TableSpec {
	return TableSpec{
		Name:         name,
		PartitionKey: "PK",
		SortKey:      "SK",
		TTLAttribute: "TTL",
		Indexes: []Index{
			{Name: BillingRemindersIndex, PartitionKey: BillingGSI1PK, SortKey: BillingGSI1SK,
				Projection: Projection{Type: types.ProjectionTypeInclude,
					NonKey: []string{"SKU", "Email", "NextPaymentDate"}}},
			{Name: BillingPaymentsIndex, PartitionKey: BillingGSI2PK, SortKey: BillingGSI2SK,
				Projection: Projection{Type: types.ProjectionTypeInclude,
					NonKey: []string{"Email", "PaymentDay", "PaymentAmount", "SKU", "PaymentDetails"}}},
		},
	}
}

// BillingHistoryTable is the spec of BILLING_HISTORY_TABLE: an append-only
// log of every billing-period change, PK "ACC#<account>#SUB#<subscription>",
// SK "<billing date>#<period version>".
func BillingHistoryTable(name string) TableSpec {
	return TableSpec{Name: name, PartitionKey: "PK", SortKey: "SK"}
}

// LocksTable is the spec of LOCKS_TABLE: one item per lease lock, keyed by
// PartitionKey ("subscription-billing:user_id:<id>"); deleteOn is a TTL that
// only garbage-collects records abandoned by dead holders.
func LocksTable(name string) TableSpec {
	return TableSpec{Name: name, PartitionKey: "PartitionKey", TTLAttribute: "deleteOn"}
}
