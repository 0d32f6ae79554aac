package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/dynamo"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
	"github.com/stripe-payments/stripe-payments/poller"
)

func TestParsePollFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
		check   func(t *testing.T, f pollFlags)
	}{
		{name: "defaults", args: nil, check: func(t *testing.T, f pollFlags) {
			assert.True(t, f.once)
			assert.Zero(t, f.every)
			assert.Equal(t, 20.0, f.rate)
			assert.Equal(t, 10*time.Minute, f.overlap)
		}},
		{name: "every", args: []string{"--every", "1m"}, check: func(t *testing.T, f pollFlags) { assert.Equal(t, time.Minute, f.every) }},
		{name: "repeatable account", args: []string{"--account", "acct_1", "--account", "acct_2,acct_3"}, check: func(t *testing.T, f pollFlags) {
			assert.Equal(t, accountFlags{"acct_1", "acct_2", "acct_3"}, f.accounts)
		}},
		{name: "backfill", args: []string{"--since", "2024-03-08T00:00:00Z", "--until", "2024-03-09T00:00:00Z"}},
		{name: "not an account", args: []string{"--account", "cus_1"}, wantErr: "not an account id"},
		{name: "once and every", args: []string{"--once", "--every", "1m"}, wantErr: "--once and --every exclude each other"},
		{name: "target and in-process", args: []string{"--target", "http://x/webhooks/stripe", "--in-process"}, wantErr: "exclude each other"},
		{name: "bad since", args: []string{"--since", "yesterday"}, wantErr: "--since"},
		{name: "until without since", args: []string{"--until", "2024-03-09T00:00:00Z"}, wantErr: "--until needs --since"},
		{name: "since after until", args: []string{"--since", "2024-03-09T00:00:00Z", "--until", "2024-03-08T00:00:00Z"}, wantErr: "--since must be before --until"},
		{name: "every with a backfill", args: []string{"--every", "1m", "--since", "2024-03-08T00:00:00Z"}, wantErr: "a backfill (--since) runs once"},
		{name: "stray argument", args: []string{"now"}, wantErr: "unexpected argument"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, _, err := parsePollFlags(tc.args, &bytes.Buffer{})
			if tc.wantErr != "" {
				assert.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			if tc.check != nil {
				tc.check(t, f)
			}
		})
	}
}

// TestPollCommand runs `stripe-payments poll` as an operator would, against
// a fake Stripe Events API and the local stack.
func TestPollCommand(t *testing.T) {
	api := stripetest.New(t, stripetest.Options{Key: "sk_test_poller_fake"})
	table, billingTable := testenv.TableName("events"), testenv.TableName("billing")
	client := testenv.Dynamo(t)
	// The poller also lists the connected accounts billing has charged, so
	// the command needs its own billing table as much as its events table.
	testenv.CreateTables(t, client, dynamo.EventsTable(table), dynamo.BillingTable(billingTable))
	for k, v := range map[string]string{
		"STRIPE_WEBHOOK_SECRET":   "whsec_fake_cli_test",
		"STRIPE_API_KEY":          api.Key,
		"STRIPE_API_BASE":         api.URL,
		"STRIPE_PLATFORM_ACCOUNT": "acct_1PlatformCli",
		"DATABASE_URL":            testenv.DatabaseURL(t),
		"EVENTS_TABLE":            table,
		"BILLING_TABLE":           billingTable,
		"LOG_LEVEL":               "warn",
	} {
		t.Setenv(k, v)
	}
	id := stripetest.NewID()
	api.Add("", stripetest.Event{Fixture: "customer.created", ID: id, Account: stripetest.Ptr(""), Created: time.Now().Add(-time.Hour)}.Build(t))
	ctx := context.Background()
	poll := func(args ...string) (string, error) {
		var stdout, stderr bytes.Buffer
		err := run(ctx, append([]string{"poll"}, args...), strings.NewReader(""), &stdout, &stderr)
		return stdout.String(), err
	}

	out, err := poll("--dry-run")
	require.NoError(t, err)
	assert.Contains(t, out, "would replay "+id+" customer.created acct_1PlatformCli")
	assert.Contains(t, out, "acct_1PlatformCli (platform)")
	assert.Contains(t, out, "poll (dry run): 1 account(s): listed 1, already processed 0, replayed 0, failed 0 (webhook gap 1")

	out, err = poll("--in-process")
	require.NoError(t, err)
	assert.Contains(t, out, "listed 1, already processed 0, replayed 1, failed 0")

	out, err = poll("--in-process", "--since", time.Now().Add(-2*time.Hour).Format(time.RFC3339))
	require.NoError(t, err)
	assert.Contains(t, out, "poll (backfill): 1 account(s): listed 1, already processed 1, replayed 0")

	out, err = poll("--stuck", "--in-process")
	require.NoError(t, err)
	assert.Contains(t, out, "stuck sweep")
	assert.Contains(t, out, "scanned 1, already processed 1, stuck 0, replayed 0, failed 0")
}

func TestProgressLineStaysUnderTheLogs(t *testing.T) {
	var term bytes.Buffer
	p := &progressLine{w: &term}
	p.update(poller.Progress{Account: "acct_1", Counts: poller.Counts{Listed: 200, AlreadyProcessed: 180, Replayed: 5}, ToReplay: 20})
	assert.Equal(t, "\r\033[Kacct_1: listed 200, already processed 180, to replay 20, replayed 5, failed 0", term.String())
	term.Reset()
	_, err := p.Write([]byte("{\"msg\":\"event replayed\"}\n"))
	require.NoError(t, err)
	assert.Equal(t, "\r\033[K{\"msg\":\"event replayed\"}\nacct_1: listed 200, already processed 180, to replay 20, replayed 5, failed 0", term.String(),
		"a log line clears the progress line and draws it again below")
	term.Reset()
	p.clear()
	assert.Equal(t, "\r\033[K", term.String())
	var none *progressLine
	none.clear() // no terminal: a nil line is a no-op
}
