package config_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// INGEST_RECORD_FRESH_WRITE (issue 32): transactions by default, one
// PutItem each on request, anything else refused at start.
func TestFreshWriteSetting(t *testing.T) {
	for _, tc := range []struct {
		value, want, wantErr string
	}{
		{value: "", want: "transaction"},
		{value: "transaction", want: "transaction"},
		{value: "item", want: "item"},
		{value: "batch", wantErr: "INGEST_RECORD_FRESH_WRITE"},
	} {
		t.Run(tc.value, func(t *testing.T) {
			env := map[string]string{}
			if tc.value != "" {
				env["INGEST_RECORD_FRESH_WRITE"] = tc.value
			}
			c, err := load(dev(env))
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, c.IngestRecords.FreshWrite)
		})
	}
}
