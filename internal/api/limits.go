package api

import (
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
)

// MaxBody bounds every request body of the internal and purchase APIs
// (64 KiB: the largest valid request, a purchase of 50 items, is ~5 KiB).
// The webhook has its own limit (1 MiB, docs/design.md §4).
const MaxBody = 64 << 10

// limitBodies refuses with 413 a request under one of prefixes whose body is
// over max: at once when Content-Length says so, else while it is read
// (chunked bodies), so that no route of the APIs ever buffers more. It runs
// for every route, including ones added later, and before authentication
// (a 413 reveals nothing a client does not know).
func limitBodies(max int64, prefixes ...string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			req := c.Request()
			limited := false
			for _, p := range prefixes {
				limited = limited || req.URL.Path == p || strings.HasPrefix(req.URL.Path, p+"/")
			}
			if limited && req.Body != nil && req.Body != http.NoBody {
				if req.ContentLength > max {
					return apperr.New(apperr.CodePayloadTooLarge, "request body over %d KiB", max>>10)
				}
				req.Body = http.MaxBytesReader(c.Response(), req.Body, max)
			}
			return next(c)
		}
	}
}

// readBody reads a request body that limitBodies bounds, mapping an
// oversized one to 413.
func readBody(c echo.Context) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(c.Request().Body, MaxBody+1))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge), err == nil && len(body) > MaxBody:
		return nil, apperr.New(apperr.CodePayloadTooLarge, "request body over %d KiB", MaxBody>>10)
	case err != nil:
		return nil, apperr.Wrap(err, apperr.CodeInvalidParameter, "could not read the request body")
	}
	return body, nil
}
