package loadtest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTableStubAnswersOnlyTheEventsTablesBatches(t *testing.T) {
	var mu sync.Mutex
	var upstreamCalls []string
	calls := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), upstreamCalls...)
	}
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		upstreamCalls = append(upstreamCalls, r.Header.Get("X-Amz-Target")+" "+string(body))
		mu.Unlock()
		_, _ = io.WriteString(w, `{"upstream":true}`)
	}))
	defer upstream.Close()
	u, err := url.Parse(upstream.URL)
	require.NoError(t, err)
	stub := NewTableStub("events", u)
	srv := httptest.NewServer(stub)
	defer srv.Close()

	for _, tc := range []struct {
		name, op, body string
		stubbed        bool
		want           string
	}{
		{"batch write of the events table", "DynamoDB_20120810.BatchWriteItem", `{"RequestItems":{"events":[{"PutRequest":{"Item":{}}}]}}`, true, `{"UnprocessedItems":{}}`},
		{"batch get of the events table", "DynamoDB_20120810.BatchGetItem", `{"RequestItems":{"events":{"Keys":[{"id":{"S":"evt_1"}}]}}}`, true, `{"Responses":{"events":[]},"UnprocessedKeys":{}}`},
		{"batch write of another table", "DynamoDB_20120810.BatchWriteItem", `{"RequestItems":{"billing":[]}}`, false, `{"upstream":true}`},
		{"batch write of two tables", "DynamoDB_20120810.BatchWriteItem", `{"RequestItems":{"events":[],"billing":[]}}`, false, `{"upstream":true}`},
		{"transaction of puts into the events table", "DynamoDB_20120810.TransactWriteItems",
			`{"TransactItems":[{"Put":{"TableName":"events","Item":{}}},{"Put":{"TableName":"events","Item":{}}}]}`, true, `{}`},
		{"transaction with an update", "DynamoDB_20120810.TransactWriteItems",
			`{"TransactItems":[{"Put":{"TableName":"events","Item":{}}},{"Update":{"TableName":"events"}}]}`, false, `{"upstream":true}`},
		{"transaction into another table", "DynamoDB_20120810.TransactWriteItems",
			`{"TransactItems":[{"Put":{"TableName":"events","Item":{}}},{"Put":{"TableName":"billing","Item":{}}}]}`, false, `{"upstream":true}`},
		{"single put of the events table", "DynamoDB_20120810.PutItem", `{"TableName":"events","Item":{}}`, false, `{"upstream":true}`},
		{"a body that is not JSON", "DynamoDB_20120810.BatchGetItem", `not json`, false, `{"upstream":true}`},
		{"a batch larger than the stub reads", "DynamoDB_20120810.BatchWriteItem",
			`{"RequestItems":{"events":[]},"pad":"` + strings.Repeat("x", maxStubbedBody) + `"}`, false, `{"upstream":true}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, seen := stub.Stubbed(), len(calls())
			req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(tc.body))
			require.NoError(t, err)
			req.Header.Set("X-Amz-Target", tc.op)
			res, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			got, err := io.ReadAll(res.Body)
			require.NoError(t, err)
			res.Body.Close()
			assert.JSONEq(t, tc.want, string(got))
			if tc.stubbed {
				assert.Equal(t, before+1, stub.Stubbed())
				assert.Len(t, calls(), seen, "a stubbed request never reaches DynamoDB")
				return
			}
			passed := calls()
			require.Len(t, passed, seen+1)
			assert.Equal(t, tc.op+" "+tc.body, passed[seen], "passed on unchanged, body included")
		})
	}
}
