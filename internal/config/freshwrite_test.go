package config_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// INGEST_RECORD_FRESH_WRITE: unset or auto, one conditional
// PutItem each on AWS (a transactional write costs twice the write
// capacity there) and transactions against an endpoint of its own
// (DynamoDB Local, where CPU per record is the cost); either on request
// anywhere; anything else refused at start.
func TestFreshWriteSetting(t *testing.T) {
	for _, tc := range []struct {
		name, value   string
		aws           bool // production with DYNAMODB_ENDPOINT unset
		want, wantErr string
	}{
		{name: "unset, DynamoDB Local", want: "transaction"},
		{name: "unset, AWS", aws: true, want: "item"},
		{name: "auto, AWS", value: "auto", aws: true, want: "item"},
		{name: "auto, DynamoDB Local", value: "auto", want: "transaction"},
		{name: "transaction on AWS", value: "transaction", aws: true, want: "transaction"},
		{name: "item, DynamoDB Local", value: "item", want: "item"},
		{name: "unknown", value: "batch", wantErr: "INGEST_RECORD_FRESH_WRITE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := dev(map[string]string{})
			if tc.aws {
				env = production()
				delete(env, "DYNAMODB_ENDPOINT")
			}
			if tc.value != "" {
				env["INGEST_RECORD_FRESH_WRITE"] = tc.value
			}
			c, err := load(env)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.aws, c.DynamoEndpoint == "", "the case's endpoint")
			assert.Equal(t, tc.want, c.IngestRecords.FreshWrite)
		})
	}
}
