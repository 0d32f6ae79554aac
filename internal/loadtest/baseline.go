package loadtest

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DynamoPut measures the raw conditional-put rate: the one write every
// ingest must make, with an event-sized item (every attribute of an event
// record, so the same three GSIs are maintained) into a scratch table built
// from the events table spec.
func DynamoPut(ctx context.Context, client *dynamodb.Client, table string, concurrency int, d time.Duration) Result {
	return Run(ctx, "raw DynamoDB conditional put", concurrency, d, 0, func(ctx context.Context, _ int, _ int64) error {
		_, err := client.PutItem(ctx, &dynamodb.PutItemInput{
			TableName:           aws.String(table),
			Item:                eventItem(time.Now().UTC(), true),
			ConditionExpression: aws.String("attribute_not_exists(id)"),
		})
		return err
	})
}

// DynamoBatchWrite measures the raw batch-write ceiling: writers each
// sending BatchWriteItem requests of 25 event-sized items (unprocessed items
// resent until none is left). A Result's Requests counts batches: items per
// second are 25 × Rate(). withSubscription puts the items in the sparse
// subscription index too (three GSIs instead of two).
func DynamoBatchWrite(ctx context.Context, client *dynamodb.Client, table string, writers int, d time.Duration, withSubscription bool) Result {
	return Run(ctx, "raw DynamoDB BatchWriteItem×25", writers, d, 0, func(ctx context.Context, _ int, _ int64) error {
		now := time.Now().UTC()
		reqs := make([]types.WriteRequest, 25)
		for i := range reqs {
			reqs[i] = types.WriteRequest{PutRequest: &types.PutRequest{Item: eventItem(now, withSubscription)}}
		}
		for len(reqs) > 0 {
			out, err := client.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{table: reqs}})
			if err != nil {
				return err
			}
			reqs = out.UnprocessedItems[table]
		}
		return nil
	})
}

// DynamoTransactWrite measures the raw rate of the write-behind's first
// records: TransactWriteItems of 100 puts, each on attribute_not_exists(id).
func DynamoTransactWrite(ctx context.Context, client *dynamodb.Client, table string, writers int, d time.Duration, withSubscription bool) Result {
	return Run(ctx, "raw DynamoDB TransactWriteItems×100", writers, d, 0, func(ctx context.Context, _ int, _ int64) error {
		now := time.Now().UTC()
		items := make([]types.TransactWriteItem, 100)
		for i := range items {
			items[i] = types.TransactWriteItem{Put: &types.Put{TableName: aws.String(table), Item: eventItem(now, withSubscription),
				ConditionExpression: aws.String("attribute_not_exists(id)")}}
		}
		_, err := client.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
		return err
	})
}

// eventItem is an event-sized item: every attribute of an event record
// (~0.7 KiB payload), so the same GSIs are maintained (the subscription
// index only when withSubscription).
func eventItem(now time.Time, withSubscription bool) map[string]types.AttributeValue {
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	item := map[string]types.AttributeValue{
		"id":             s("evt_base" + uuid.NewString()),
		"type":           s("payment_intent.succeeded"),
		"stripe_account": s("acct_1LoadAAAAAAAAAAA"),
		"timestamp":      s(now.Format("2006-01-02 15:04:05.000")),
		"date":           s(now.Format("2006-01-02")),
		"time":           s(now.Format("15:04:05.000")),
		"subscription":   s("sub_base" + uuid.NewString()[:8]),
		"expiration":     &types.AttributeValueMemberN{Value: "4102444800"},
		"status":         s("processed"),
		"source":         s("webhook"),
		"attempts":       &types.AttributeValueMemberN{Value: "1"},
		"payload":        &types.AttributeValueMemberB{Value: basePayload},
	}
	if !withSubscription {
		delete(item, "subscription")
	}
	return item
}

var basePayload = make([]byte, 700) // a gzipped event is ~0.5–1 KiB

// PostgresTx measures the raw single-transaction rate: BEGIN, one insert,
// COMMIT, into a scratch table.
func PostgresTx(ctx context.Context, pool *pgxpool.Pool, table string, concurrency int, d time.Duration) Result {
	return Run(ctx, "raw Postgres transaction", concurrency, d, 0, func(ctx context.Context, _ int, _ int64) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(context.WithoutCancel(ctx))
		if _, err := tx.Exec(ctx, "INSERT INTO "+table+" (id) VALUES ($1) ON CONFLICT DO NOTHING", uuid.NewString()); err != nil {
			return err
		}
		return tx.Commit(ctx)
	})
}

// ProcStats is a sample of a process's CPU time and memory from /proc.
type ProcStats struct {
	CPU     time.Duration // user + system
	RSS     int64         // bytes, now
	PeakRSS int64         // bytes, high-water mark
}

// ReadProc samples pid (Linux only).
func ReadProc(pid int) (ProcStats, error) {
	var s ProcStats
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, fmt.Errorf("read stat: %w", err)
	}
	_, _, ticks, err := parseProcStat(stat)
	if err != nil {
		return s, err
	}
	s.CPU = ticksToDuration(ticks)
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, fmt.Errorf("read status: %w", err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			s.RSS = kb << 10
		case "VmHWM":
			s.PeakRSS = kb << 10
		}
	}
	return s, nil
}
