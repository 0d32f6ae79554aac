package stripebudget_test

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/dynamo"
	"github.com/stripe-payments/stripe-payments/internal/stripebudget"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// BenchmarkStoreChoice is the measurement behind keeping the schedule in
// Postgres (docs/stripe-budget.md "Why Postgres"): three replicas lease
// slots as fast as they can for two seconds, on the Postgres function and
// on the same GCRA in DynamoDB (a consistent GetItem, then a PutItem
// conditional on the tat it read; a failed condition is a conflict and
// reads again). Reported: leases per second, median and 99th percentile
// latency, and DynamoDB's conflicts per lease. Not run by make test.
func BenchmarkStoreChoice(b *testing.B) {
	const replicas, run = 3, 2 * time.Second
	interval := 10 * time.Millisecond // 100/s
	b.Run("postgres", func(b *testing.B) {
		pool := testenv.Postgres(b)
		store := stripebudget.PGStore{Pool: pool}
		measure(b, replicas, run, func(ctx context.Context) (int, error) {
			_, err := store.Lease(ctx, stripebudget.LeaseRequest{Class: stripebudget.Charges, Want: 1,
				Interval: interval, Ahead: time.Hour, DemandTTL: time.Second})
			return 0, err
		})
	})
	b.Run("dynamodb", func(b *testing.B) {
		db := testenv.Dynamo(b)
		table := testenv.TableName("budget")
		testenv.CreateTables(b, db, dynamo.LocksTable(table))
		measure(b, replicas, run, func(ctx context.Context) (int, error) {
			return dynamoLease(ctx, db, table, interval)
		})
	})
}

// dynamoLease is one GCRA lease in DynamoDB: read tat, write max(tat,
// now)+interval if tat is still what was read. The replicas' own clocks
// stand in for the database's (DynamoDB has none to offer).
func dynamoLease(ctx context.Context, db *dynamodb.Client, table string, interval time.Duration) (conflicts int, err error) {
	key := map[string]types.AttributeValue{"PartitionKey": &types.AttributeValueMemberS{Value: "stripe"}}
	for {
		out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: key, ConsistentRead: aws.Bool(true)})
		if err != nil {
			return conflicts, err
		}
		var tat int64
		cond := "attribute_not_exists(PartitionKey)"
		values := map[string]types.AttributeValue{}
		if v, ok := out.Item["tat"].(*types.AttributeValueMemberN); ok {
			tat, _ = strconv.ParseInt(v.Value, 10, 64)
			cond = "tat = :old"
			values[":old"] = v
		}
		next := max(tat, time.Now().UnixNano()) + int64(interval)
		put := &dynamodb.PutItemInput{TableName: aws.String(table), ConditionExpression: aws.String(cond),
			Item: map[string]types.AttributeValue{"PartitionKey": key["PartitionKey"], "tat": &types.AttributeValueMemberN{Value: strconv.FormatInt(next, 10)}}}
		if len(values) > 0 {
			put.ExpressionAttributeValues = values
		}
		_, err = db.PutItem(ctx, put)
		var cfe *types.ConditionalCheckFailedException
		if errors.As(err, &cfe) {
			conflicts++
			continue
		}
		return conflicts, err
	}
}

func measure(b *testing.B, replicas int, run time.Duration, lease func(context.Context) (int, error)) {
	ctx := context.Background()
	var mu sync.Mutex
	var lat []time.Duration
	conflicts := 0
	var wg sync.WaitGroup
	deadline := time.Now().Add(run)
	for range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				start := time.Now()
				c, err := lease(ctx)
				require.NoError(b, err)
				mu.Lock()
				lat = append(lat, time.Since(start))
				conflicts += c
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(len(lat))/run.Seconds(), "leases/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(conflicts)/float64(len(lat)), "conflicts/lease")
}
