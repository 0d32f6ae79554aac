package failcause_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/stripe-payments/stripe-payments/internal/failcause"
)

func TestClassify(t *testing.T) {
	cases := []struct{ msg, want string }{
		{"", "unknown"},
		{`prepare event: look up invoice in_1Ops: get invoice in_1Ops: {"status":400,"message":"test Stripe is down","request_id":"req_1","type":"invalid_request_error"}`, "stripe_invalid_request_error"},
		{`{"status":429,"message":"Too many requests","type":"rate_limit_error"}`, "stripe_rate_limit_error"},
		{"put evt_1Abc: operation error DynamoDB: PutItem, https response error StatusCode: 500", "dynamodb_unavailable"},
		{"ledger: failed to connect to `host=127.0.0.1 user=x database=y`: dial tcp: connection refused", "postgres_unavailable"},
		{"Stripe unreachable: Get \"https://api.stripe.com/v1/events/evt_1\": dial tcp: i/o timeout", "stripe_unreachable"},
		{"stripe: Request rate limit exceeded (429)", "stripe_rate_limited"},
		{"No such customer: 'cus_9xYz12345'; code: resource_missing", "stripe_resource_missing"},
		{"Invalid API Key provided: sk_test_****1234", "stripe_auth"},
		{"context deadline exceeded", "timeout"},
		{"read tcp 127.0.0.1:1->127.0.0.1:2: connection reset by peer", "network"},
		{"invalid character 'x' looking for beginning of value", "invalid_payload"},
		{"unsupported currency \"xyz\" on sub_1AbcDEF", "other:unsupported currency <v> on <id>"},
		{"subscription sub_1AbcDEF has 3 periods", "other:subscription <id> has <n> periods"},
	}
	for _, tc := range cases {
		t.Run(tc.want, func(t *testing.T) {
			assert.Equal(t, tc.want, failcause.Classify(tc.msg))
		})
	}
	// Two messages that differ only in their ids and numbers share a cause.
	assert.Equal(t, failcause.Classify("amount 100 of pi_1AAAAAAA does not match sub_1BBBBBBB"),
		failcause.Classify("amount 2500 of pi_9ZZZZZZZ does not match sub_8YYYYYYY"))
}
