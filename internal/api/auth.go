// Package api is the internal, token-protected HTTP API (DESIGN §4).
package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
)

// BearerAuth refuses requests without `Authorization: Bearer <token>`. The
// comparison is constant-time over fixed-length digests, so neither the
// token's content nor its length leaks through timing.
func BearerAuth(token string) echo.MiddlewareFunc {
	want := sha256.Sum256([]byte(token))
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			scheme, got, ok := strings.Cut(c.Request().Header.Get("Authorization"), " ")
			if !ok || !strings.EqualFold(scheme, "Bearer") {
				return apperr.New(apperr.CodeUnauthorized, "missing bearer token")
			}
			sum := sha256.Sum256([]byte(strings.TrimSpace(got)))
			if subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
				return apperr.New(apperr.CodeUnauthorized, "invalid bearer token")
			}
			return next(c)
		}
	}
}
