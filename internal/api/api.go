package api

import (
	"github.com/labstack/echo/v4"
)

// Prefix of every internal route.
const Prefix = "/internal/v1"

// Deps are the stores the API reads.
type Deps struct {
	Events  EventReader
	Billing BillingService // nil: no billing routes
}

// Register mounts the internal API on e behind bearer auth. An empty token
// disables the routes entirely (DESIGN §3).
func Register(e *echo.Echo, token string, deps Deps) {
	if token == "" {
		return
	}
	g := e.Group(Prefix, BearerAuth(token))
	ev := eventRoutes{store: deps.Events}
	g.GET("/events/:id", ev.get)
	if deps.Billing != nil {
		registerBilling(g, deps.Billing)
	}
}
