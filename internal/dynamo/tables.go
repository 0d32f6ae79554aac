package dynamo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Projection of a secondary index.
type Projection struct {
	Type   types.ProjectionType
	NonKey []string // only for INCLUDE
}

// Index is a global secondary index.
type Index struct {
	Name         string
	PartitionKey string
	SortKey      string
	Projection   Projection
}

// TableSpec describes one table: the single source for `migrate` and the
// Terraform parity test. Every key attribute is a string.
type TableSpec struct {
	Name         string
	PartitionKey string
	SortKey      string
	TTLAttribute string
	Indexes      []Index
}

// Names of the events table's indexes (docs/design.md §5, Contract).
const (
	EventsDateTimeIndex     = "date-time-index"
	EventsAccountIndex      = "stripe_account-timestamp-index"
	EventsSubscriptionIndex = "subscription-timestamp-index"
)

// EventsTable is the spec of the events table (docs/design.md §5).
func EventsTable(name string) TableSpec {
	return TableSpec{
		Name:         name,
		PartitionKey: "id",
		TTLAttribute: "expiration",
		Indexes: []Index{
			{Name: EventsDateTimeIndex, PartitionKey: "date", SortKey: "time",
				Projection: Projection{Type: types.ProjectionTypeKeysOnly}},
			{Name: EventsAccountIndex, PartitionKey: "stripe_account", SortKey: "timestamp",
				Projection: Projection{Type: types.ProjectionTypeInclude, NonKey: []string{"type", "subscription"}}},
			{Name: EventsSubscriptionIndex, PartitionKey: "subscription", SortKey: "timestamp",
				Projection: Projection{Type: types.ProjectionTypeInclude, NonKey: []string{"type", "stripe_account"}}},
		},
	}
}

// CreateTableInput renders the spec as an on-demand CreateTable request.
func (s TableSpec) CreateTableInput() *dynamodb.CreateTableInput {
	attrs := map[string]bool{}
	var defs []types.AttributeDefinition
	addAttr := func(name string) {
		if name == "" || attrs[name] {
			return
		}
		attrs[name] = true
		defs = append(defs, types.AttributeDefinition{AttributeName: aws.String(name), AttributeType: types.ScalarAttributeTypeS})
	}
	keySchema := func(pk, sk string) []types.KeySchemaElement {
		addAttr(pk)
		ks := []types.KeySchemaElement{{AttributeName: aws.String(pk), KeyType: types.KeyTypeHash}}
		if sk != "" {
			addAttr(sk)
			ks = append(ks, types.KeySchemaElement{AttributeName: aws.String(sk), KeyType: types.KeyTypeRange})
		}
		return ks
	}
	in := &dynamodb.CreateTableInput{
		TableName:   aws.String(s.Name),
		BillingMode: types.BillingModePayPerRequest,
		KeySchema:   keySchema(s.PartitionKey, s.SortKey),
	}
	for _, ix := range s.Indexes {
		p := &types.Projection{ProjectionType: ix.Projection.Type}
		if ix.Projection.Type == types.ProjectionTypeInclude {
			p.NonKeyAttributes = ix.Projection.NonKey
		}
		in.GlobalSecondaryIndexes = append(in.GlobalSecondaryIndexes, types.GlobalSecondaryIndex{
			IndexName:  aws.String(ix.Name),
			KeySchema:  keySchema(ix.PartitionKey, ix.SortKey),
			Projection: p,
		})
	}
	in.AttributeDefinitions = defs
	return in
}

// EnsureTables creates each missing table, waits for it to be active and
// enables TTL where the spec has one. Existing tables are left as they are.
func EnsureTables(ctx context.Context, client *dynamodb.Client, specs ...TableSpec) error {
	for _, spec := range specs {
		if err := ensureTable(ctx, client, spec); err != nil {
			return fmt.Errorf("ensure table %s: %w", spec.Name, err)
		}
	}
	return nil
}

func ensureTable(ctx context.Context, client *dynamodb.Client, spec TableSpec) error {
	_, err := client.CreateTable(ctx, spec.CreateTableInput())
	var inUse *types.ResourceInUseException
	switch {
	case errors.As(err, &inUse):
		// Already there (or being created by a concurrent migrate).
	case err != nil:
		return fmt.Errorf("create: %w", err)
	}
	waiter := dynamodb.NewTableExistsWaiter(client, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay = 100 * time.Millisecond
		o.MaxDelay = 2 * time.Second
	})
	if err := waiter.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(spec.Name)}, 2*time.Minute); err != nil {
		return fmt.Errorf("wait active: %w", err)
	}
	if spec.TTLAttribute == "" {
		return nil
	}
	ttl, err := client.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(spec.Name)})
	if err != nil {
		return fmt.Errorf("describe ttl: %w", err)
	}
	if d := ttl.TimeToLiveDescription; d != nil && aws.ToString(d.AttributeName) == spec.TTLAttribute &&
		(d.TimeToLiveStatus == types.TimeToLiveStatusEnabled || d.TimeToLiveStatus == types.TimeToLiveStatusEnabling) {
		return nil
	}
	_, err = client.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName: aws.String(spec.Name),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(spec.TTLAttribute),
			Enabled:       aws.Bool(true),
		},
	})
	if err != nil {
		return fmt.Errorf("enable ttl: %w", err)
	}
	return nil
}

// Ping checks that DynamoDB answers and the table exists.
func Ping(ctx context.Context, client *dynamodb.Client, table string) error {
	if _, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}); err != nil {
		return fmt.Errorf("describe %s: %w", table, err)
	}
	return nil
}
