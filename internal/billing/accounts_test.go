package billing_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing/store"
	"github.com/stripe-payments/stripe-payments/internal/billingtest"
)

// The registry of the accounts the billing table charges on (the poller's
// account list): written on create, and by each collection run for the
// accounts it charged on, so subscriptions created before the registry
// existed are listed after their next charge. The platform needs no entry.
func TestChargedAccountsRegistry(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{})
	_, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 10))
	require.NoError(t, err)
	platform := billingtest.Input("silver", 10)
	platform.StripeAccount = ""
	_, err = e.Service.CreateSubscription(ctx, "acc-2", platform)
	require.NoError(t, err)
	src := store.ChargedAccounts{Store: e.Store}
	got, err := src.Accounts(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"acct_test"}, got)

	// As if acc-1 had been created before the registry.
	_, err = e.DB.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(e.Billing), Key: map[string]types.AttributeValue{
		"PK": &types.AttributeValueMemberS{Value: "STRIPEACCOUNTS"}, "SK": &types.AttributeValueMemberS{Value: "acct_test"}}})
	require.NoError(t, err)
	got, err = src.Accounts(ctx)
	require.NoError(t, err)
	assert.Empty(t, got)
	collect(t, e, "2024-01-10")
	got, err = src.Accounts(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"acct_test"}, got, "registered by the run that charged on it")
}
