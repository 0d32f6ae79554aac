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
}

func (c ceiling) String() string {
	return fmt.Sprintf("%.0f/s (p50 %s, p99 %s)", c.res.Rate()*float64(c.per), ms(c.res.Quantile(.5)), ms(c.res.Quantile(.99)))
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
	add := func(what string, per int, r loadtest.Result) {
		c := ceiling{what: what, res: r, per: per}
		fmt.Fprintf(out, "ceiling: %-52s %s, errors=%d\n", what, c, r.Errors)
		cs = append(cs, c)
	}
	loadtest.PostgresTx(ctx, pool, pgTable, 8, time.Second)
	add("durable Postgres commit (1 insert), 1 at a time", 1, loadtest.PostgresTx(ctx, pool, pgTable, 1, d))
	add("durable Postgres commit (1 insert), 32 concurrent", 1, loadtest.PostgresTx(ctx, pool, pgTable, 32, d))
	add("DynamoDB conditional put, 1 at a time", 1, loadtest.DynamoPut(ctx, client, ddbTable, 1, d))
	// Items shaped like a customer.updated record: no subscription, so two GSIs.
	loadtest.DynamoBatchWrite(ctx, client, ddbTable, 8, time.Second, false)
	add("DynamoDB BatchWriteItem×25, 8 writers (items, 2 GSIs)", 25, loadtest.DynamoBatchWrite(ctx, client, ddbTable, 8, d, false))
	// The write-behind's first records (issue 32): conditional, 100 a request.
	add("DynamoDB TransactWriteItems×100, 4 writers (items, 2 GSIs)", 100, loadtest.DynamoTransactWrite(ctx, client, ddbTable, 4, d, false))
	return cs, ctx.Err()
}
