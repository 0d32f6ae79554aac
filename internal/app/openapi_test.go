package app_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/api/openapi"
)

// Every API route the server registers is in the OpenAPI document, and
// every operation of the document is a registered route.
func TestOpenAPIDocumentMatchesRoutes(t *testing.T) {
	a := startApp(t, nil, nil)
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(openapi.Document, &doc))
	require.True(t, strings.HasPrefix(doc.OpenAPI, "3."))

	documented := map[string]bool{}
	for path, ops := range doc.Paths {
		for method := range ops {
			documented[strings.ToUpper(method)+" "+path] = true
		}
	}
	param := regexp.MustCompile(`:([a-z_]+)`)
	registered := map[string]bool{}
	for _, r := range a.Admin.Echo.Routes() {
		if !strings.HasPrefix(r.Path, "/internal/") && !strings.HasPrefix(r.Path, "/v1/") {
			continue // webhook, health and metrics are not the internal API
		}
		if r.Method == "echo_route_not_found" {
			continue // echo's per-group 404 routes
		}
		registered[r.Method+" "+param.ReplaceAllString(r.Path, "{$1}")] = true
	}
	assert.Equal(t, keys(documented), keys(registered), "OpenAPI paths vs registered routes")

	status, body := get(t, a.Admin.URL()+"/internal/v1/openapi.json", token)
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, doc.OpenAPI, body["openapi"])
	status, _ = get(t, a.Admin.URL()+"/internal/v1/openapi.json", "")
	assert.Equal(t, http.StatusUnauthorized, status)
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Every API route refuses a request without the token or with a wrong one,
// before doing anything.
func TestEveryAPIRouteRequiresTheToken(t *testing.T) {
	// Each route is asked from an address of its own (through a trusted
	// proxy): the wrong tokens would otherwise use up one address's
	// failures and be answered 429 (TestBearerFailuresAreLimitedPerAddress).
	a := startApp(t, nil, map[string]string{"TRUSTED_PROXIES": "127.0.0.1/32"})
	param := regexp.MustCompile(`:([a-z_]+)`)
	checked := 0
	for _, r := range a.Admin.Echo.Routes() {
		if r.Method == "echo_route_not_found" || (!strings.HasPrefix(r.Path, "/internal/") && !strings.HasPrefix(r.Path, "/v1/")) {
			continue
		}
		path := param.ReplaceAllString(r.Path, "x")
		for _, bearer := range []string{"", "wrong-token", token + "x"} {
			req, err := http.NewRequest(r.Method, a.Admin.URL()+path, strings.NewReader("{}"))
			require.NoError(t, err)
			if bearer != "" {
				req.Header.Set("Authorization", "Bearer "+bearer)
			}
			req.Header.Set("X-Forwarded-For", fmt.Sprintf("198.51.100.%d", checked+1))
			status, body := do(t, req)
			assert.Equal(t, http.StatusUnauthorized, status, "%s %s with %q", r.Method, path, bearer)
			assert.Equal(t, "unauthorized", errorCode(body))
		}
		checked++
	}
	assert.GreaterOrEqual(t, checked, 9)
}

// With INTERNAL_API_TOKEN=disabled, the API routes do not exist.
func TestDisabledTokenDisablesTheAPI(t *testing.T) {
	a := startApp(t, nil, map[string]string{"INTERNAL_API_TOKEN": "disabled"})
	for _, path := range []string{"/internal/v1/events/evt_1", "/internal/v1/openapi.json", "/v1/purchases/x"} {
		status, _ := get(t, a.Admin.URL()+path, "")
		assert.Equal(t, http.StatusNotFound, status, path)
	}
}
