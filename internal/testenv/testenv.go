// Package testenv gives integration tests their own namespace on the real
// local components: a fresh, migrated Postgres database and uniquely named
// DynamoDB tables per test, dropped in t.Cleanup. A missing component fails
// the test loudly; it never skips.
package testenv

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stripe-payments/stripe-payments/internal/dynamo"
	"github.com/stripe-payments/stripe-payments/internal/postgres"
)

func require(t testing.TB, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s is not set: integration tests need the local stack; run them with `make test`", name)
	}
	return v
}

// DatabaseURL creates a fresh database, applies the migrations, and returns
// its URL. The database is dropped when the test ends.
func DatabaseURL(t testing.TB) string {
	t.Helper()
	base := require(t, "DATABASE_URL")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect to postgres at DATABASE_URL: %v", err)
	}
	defer admin.Close(ctx)
	name := "t_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("drop database %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("parse DATABASE_URL: %v", err)
	}
	u.Path = "/" + name
	pool, err := postgres.Connect(ctx, u.String())
	if err != nil {
		t.Fatalf("connect to test database: %v", err)
	}
	defer pool.Close()
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatalf("migrate test database: %v", err)
	}
	return u.String()
}

// Postgres returns a pool on a fresh, migrated database.
func Postgres(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := postgres.Connect(context.Background(), DatabaseURL(t))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// DynamoEndpoint is the DynamoDB Local endpoint of the stack.
func DynamoEndpoint(t testing.TB) string {
	t.Helper()
	return require(t, "DYNAMODB_ENDPOINT")
}

// Dynamo returns a client for DynamoDB Local.
func Dynamo(t testing.TB) *dynamodb.Client {
	t.Helper()
	region := os.Getenv("AWS_REGION")
	if region == "" {
		region = "us-east-1"
	}
	client, err := dynamo.NewClient(context.Background(), region, DynamoEndpoint(t))
	if err != nil {
		t.Fatalf("dynamodb client: %v", err)
	}
	return client
}

// TableName returns a table name unique to this test.
func TableName(base string) string {
	return fmt.Sprintf("t-%s-%s", base, uuid.NewString()[:13])
}

// CreateTables creates the tables of specs and deletes them when the test ends.
func CreateTables(t testing.TB, client *dynamodb.Client, specs ...dynamo.TableSpec) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := dynamo.EnsureTables(ctx, client, specs...); err != nil {
		t.Fatalf("create tables: %v", err)
	}
	t.Cleanup(func() {
		for _, s := range specs {
			_, _ = client.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(s.Name)})
		}
	})
}
