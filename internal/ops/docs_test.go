package ops_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The console serves the runbooks an incident links to, behind the login,
// and nothing but docs pages.
func TestConsoleServesRunbooksOnly(t *testing.T) {
	a := startApp(t, "http://127.0.0.1:1")
	c := newConsole(t, a.AdminURL+"/ops")
	before := c.get("/docs/runbooks/StripePaymentsEventRejected.md")
	assert.NotEqual(t, http.StatusOK, before.status, "not before the login")
	assert.NotContains(t, before.body, "What to do")

	c.mustLogin(token)
	r := c.get("/docs/runbooks/StripePaymentsEventRejected.md")
	assert.Equal(t, http.StatusOK, r.status)
	assert.Contains(t, r.body, "StripePaymentsEventRejected")
	assert.Contains(t, r.body, "What to do")
	assert.Equal(t, http.StatusOK, c.get("/docs/incidents.md").status)
	for _, p := range []string{"/docs/runbooks/NoSuchAlert.md", "/docs/../README.md", "/docs/%2e%2e/go.mod",
		"/docs/runbooks/../../sql/00039_incident_event_groups.sql", "/docs/docs.go", "/docs/"} {
		r := c.get(p)
		assert.Equal(t, http.StatusNotFound, r.status, p)
		assert.NotContains(t, r.body, "module github.com", p)
	}
}
