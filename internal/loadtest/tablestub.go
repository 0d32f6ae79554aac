package loadtest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
)

// TableStub is a diagnostic of `make bench-peer` (its stubbed instance,
// BENCH_STUBBED), never a test double: a reverse proxy in front of DynamoDB
// Local that answers the batch reads and writes of one table (the events
// table), and its transactions of puts only (the write-behind's first
// records), at once, as DynamoDB would when all went through, and passes
// every other request on. With it the service does all of its own work for
// a record (encoding, compression, signing, the HTTP round trip) while
// DynamoDB Local's JVM does none, which measures, in one run, what sharing
// the machine's cores with the stand-in for a remote DynamoDB costs the
// answer path. Records "written" through it are not in the table.
type TableStub struct {
	table   string
	proxy   *httputil.ReverseProxy
	stubbed atomic.Int64
}

// NewTableStub returns a stub of table in front of upstream.
func NewTableStub(table string, upstream *url.URL) *TableStub {
	return &TableStub{table: table, proxy: httputil.NewSingleHostReverseProxy(upstream)}
}

// Stubbed is how many requests the stub answered itself.
func (s *TableStub) Stubbed() int64 { return s.stubbed.Load() }

// maxStubbedBody bounds what is read of a request to decide (a
// BatchWriteItem is at most 16 MB).
const maxStubbedBody = 17 << 20

func (s *TableStub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	op := r.Header.Get("X-Amz-Target")
	tx := strings.HasSuffix(op, ".TransactWriteItems")
	if !strings.HasSuffix(op, ".BatchWriteItem") && !strings.HasSuffix(op, ".BatchGetItem") && !tx {
		s.proxy.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxStubbedBody))
	if err != nil {
		http.Error(w, "read request: "+err.Error(), http.StatusBadRequest)
		return
	}
	// What was read, then the rest: a body over the limit goes on whole.
	r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), r.Body))
	if tx {
		// The write-behind's conditional writes of first records: stubbed
		// when every item is a Put into the table (as if none existed).
		if !s.onlyPuts(body) {
			s.proxy.ServeHTTP(w, r)
			return
		}
		s.stubbed.Add(1)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		_, _ = io.WriteString(w, `{}`)
		return
	}
	var req struct {
		RequestItems map[string]json.RawMessage
	}
	if json.Unmarshal(body, &req) != nil || len(req.RequestItems) != 1 || req.RequestItems[s.table] == nil {
		s.proxy.ServeHTTP(w, r)
		return
	}
	s.stubbed.Add(1)
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	if strings.HasSuffix(op, ".BatchGetItem") {
		// None of the keys exists: every record is written as new.
		_ = json.NewEncoder(w).Encode(map[string]any{"Responses": map[string][]any{s.table: {}}, "UnprocessedKeys": map[string]any{}})
		return
	}
	_, _ = io.WriteString(w, `{"UnprocessedItems":{}}`)
}

// onlyPuts reports whether a TransactWriteItems body holds only Puts into
// the stubbed table.
func (s *TableStub) onlyPuts(body []byte) bool {
	var req struct {
		TransactItems []map[string]struct{ TableName string }
	}
	if json.Unmarshal(body, &req) != nil || len(req.TransactItems) == 0 {
		return false
	}
	for _, it := range req.TransactItems {
		put, ok := it["Put"]
		if len(it) != 1 || !ok || put.TableName != s.table {
			return false
		}
	}
	return true
}
