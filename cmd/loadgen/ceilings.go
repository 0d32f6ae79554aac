package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/google/uuid"

	"github.com/stripe-payments/stripe-payments/internal/dynamo"
	"github.com/stripe-payments/stripe-payments/internal/loadtest"
	"github.com/stripe-payments/stripe-payments/internal/postgres"
)

// ceiling is one storage limit measured in the same run.
type ceiling struct {
	what string
	res  loadtest.Result
	per  int // items per operation
	// kind names the DynamoDB writes the goal table uses ("" for others);
	// dynamoPerItem is DynamoDB Local's CPU per item written during the
	// measure (0: unknown, no -dynamodb-pid).
	kind          string
	dynamoPerItem time.Duration
}

// The DynamoDB writes whose CPU per item the goal table compares.
const (
	ceilingConditional   = "conditional"   // the write-behind's: TransactWriteItems×100, each put on a condition
	ceilingUnconditional = "unconditional" // the cheapest the table takes: BatchWriteItem×25, no condition
)

func (c ceiling) String() string {
	v := fmt.Sprintf("%.0f/s (p50 %s, p99 %s)", c.res.Rate()*float64(c.per), ms(c.res.Quantile(.5)), ms(c.res.Quantile(.99)))
	if c.dynamoPerItem > 0 {
		v += fmt.Sprintf(", DynamoDB Local %d µs of CPU per item", c.dynamoPerItem.Microseconds())
	}
	return v
}

// measureCeilings measures, on the benchmark's own Postgres and DynamoDB:
// a durable single-insert commit at concurrency 1 and 32 (the floor of
// acknowledging one event, which both services pay), and DynamoDB Local's
// batch-write rate (25 items per request, 8 writers) and conditional-put
// rate and latency.
func measureCeilings(ctx context.Context, o compareOptions, out io.Writer) ([]ceiling, error) {
	if o.databaseURL == "" || o.dynamoEndpoint == "" {
		return nil, errors.New("ceilings need -database-url and -dynamodb-endpoint (or turn them off with -ceilings=false)")
	}
	pool, err := postgres.Connect(ctx, o.databaseURL)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	pgTable := "loadgen_ceiling_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	if _, err := pool.Exec(ctx, "CREATE TABLE "+pgTable+" (id text PRIMARY KEY, at timestamptz NOT NULL DEFAULT now())"); err != nil {
		return nil, err
	}
	defer pool.Exec(context.WithoutCancel(ctx), "DROP TABLE "+pgTable)
	client, err := dynamo.NewClient(ctx, o.region, o.dynamoEndpoint)
	if err != nil {
		return nil, err
	}
	ddbTable := "loadgen-ceiling-" + uuid.NewString()[:8]
	if err := dynamo.EnsureTables(ctx, client, dynamo.EventsTable(ddbTable)); err != nil {
		return nil, err
	}
	defer client.DeleteTable(context.WithoutCancel(ctx), &dynamodb.DeleteTableInput{TableName: aws.String(ddbTable)})

	d := o.ceilingDuration
	var cs []ceiling
	add := func(c ceiling) {
		fmt.Fprintf(out, "ceiling: %-52s %s, errors=%d\n", c.what, c, c.res.Errors)
		cs = append(cs, c)
	}
	// withDynamoCPU measures a DynamoDB write with DynamoDB Local's CPU during it
	// (when its pid is known).
	withDynamoCPU := func(what, kind string, per int, measure func() loadtest.Result) error {
		if o.dynamoPID <= 0 {
			add(ceiling{what: what, res: measure(), per: per, kind: kind})
			return nil
		}
		roots := map[string]int{"DynamoDB Local": o.dynamoPID}
		before, err := loadtest.ReadBox(roots)
		if err != nil {
			return err
		}
		c := ceiling{what: what, res: measure(), per: per, kind: kind}
		after, err := loadtest.ReadBox(roots)
		if err != nil {
			return err
		}
		if items := (c.res.Requests - c.res.Errors) * int64(per); items > 0 {
			c.dynamoPerItem = before.Sub(after).Procs["DynamoDB Local"] / time.Duration(items)
		}
		add(c)
		return nil
	}
	loadtest.PostgresTx(ctx, pool, pgTable, 8, time.Second)
	add(ceiling{what: "durable Postgres commit (1 insert), 1 at a time", per: 1, res: loadtest.PostgresTx(ctx, pool, pgTable, 1, d)})
	add(ceiling{what: "durable Postgres commit (1 insert), 32 concurrent", per: 1, res: loadtest.PostgresTx(ctx, pool, pgTable, 32, d)})
	add(ceiling{what: "DynamoDB conditional put, 1 at a time", per: 1, res: loadtest.DynamoPut(ctx, client, ddbTable, 1, d)})
	// Items shaped like a customer.updated record: no subscription, so two GSIs.
	loadtest.DynamoBatchWrite(ctx, client, ddbTable, 8, time.Second, false)
	if err := withDynamoCPU("DynamoDB BatchWriteItem×25, 8 writers (items, 2 GSIs)", ceilingUnconditional, 25, func() loadtest.Result {
		return loadtest.DynamoBatchWrite(ctx, client, ddbTable, 8, d, false)
	}); err != nil {
		return nil, err
	}
	// The write-behind's first records: conditional (never over a failure
	// recorded meanwhile), 100 a request.
	if err := withDynamoCPU("DynamoDB TransactWriteItems×100, 4 writers (items, 2 GSIs)", ceilingConditional, 100, func() loadtest.Result {
		return loadtest.DynamoTransactWrite(ctx, client, ddbTable, 4, d, false)
	}); err != nil {
		return nil, err
	}
	return cs, ctx.Err()
}
