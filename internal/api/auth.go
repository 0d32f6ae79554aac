// Package api is the internal, token-protected HTTP API (docs/design.md §4).
package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"log/slog"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/authlimit"
)

// BearerAuth refuses requests without `Authorization: Bearer <token>`. The
// comparison is constant-time over fixed-length digests, so neither the
// token's content nor its length leaks through timing. A presented token
// is an attempt counted by failures (nil: no limit): a client address that
// failed too often is answered 429 before its token is compared; a wrong
// token over the ceiling of all addresses' failures is answered 429 too,
// while the right token always gets in. Every refusal is logged with the
// address it was counted under.
func BearerAuth(token string, failures *authlimit.Limiter, log *slog.Logger) echo.MiddlewareFunc {
	want := sha256.Sum256([]byte(token))
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			scheme, got, ok := strings.Cut(c.Request().Header.Get("Authorization"), " ")
			if !ok || !strings.EqualFold(scheme, "Bearer") {
				return apperr.New(apperr.CodeUnauthorized, "missing bearer token")
			}
			done := func(bool) bool { return false }
			if failures != nil {
				var allowed bool
				if done, allowed = failures.Attempt("api", c.RealIP()); !allowed {
					log.Warn("internal API refused: too many failed tokens", "remote", c.RealIP(), "path", c.Request().URL.Path)
					c.Response().Header().Set("Retry-After", strconv.Itoa(int(failures.RetryAfter().Seconds())))
					return apperr.New(apperr.CodeTooManyRequests, "too many failed authentications from this address; retry later")
				}
			}
			sum := sha256.Sum256([]byte(strings.TrimSpace(got)))
			if subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
				if done(false) {
					log.Warn("internal API refused: wrong bearer token over the ceiling of failures from all addresses",
						"remote", c.RealIP(), "path", c.Request().URL.Path)
					c.Response().Header().Set("Retry-After", strconv.Itoa(int(failures.RetryAfter().Seconds())))
					return apperr.New(apperr.CodeTooManyRequests, "too many failed authentications; retry later")
				}
				log.Warn("internal API refused: wrong bearer token", "remote", c.RealIP(), "path", c.Request().URL.Path)
				return apperr.New(apperr.CodeUnauthorized, "invalid bearer token")
			}
			done(true)
			return next(c)
		}
	}
}
