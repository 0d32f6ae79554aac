package app_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/authlimit"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// apiFrom asks GET path on the admin listener with bearer, as the client
// at xff (through the trusted proxy at 127.0.0.1; "" sends no header).
func apiFrom(t *testing.T, base, path, bearer, xff string) (int, http.Header) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+bearer)
	if xff != "" {
		req.Header.Set("X-Forwarded-For", xff)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode, resp.Header
}

// Wrong bearer tokens are limited per client address, so a token cannot be
// guessed at speed: after
// authlimit.PerAddressBurst failures an address is answered 429 whatever
// token it sends, while another address still gets in with the right
// token and is told 401, not 429, for a wrong one. Refusals are logged
// with the address they were counted under.
func TestBearerFailuresAreLimitedPerAddress(t *testing.T) {
	var logs testenv.Logs
	a := startApp(t, &logs, map[string]string{"TRUSTED_PROXIES": "127.0.0.1/32"})
	base := a.Admin.URL()
	const path = "/internal/v1/events/evt_missing"
	const attacker, operator = "203.0.113.7", "198.51.100.20"

	for i := range authlimit.PerAddressBurst {
		status, _ := apiFrom(t, base, path, fmt.Sprintf("guess-%d", i), "10.1.1.1, "+attacker)
		require.Equal(t, http.StatusUnauthorized, status, "guess %d", i)
	}
	status, header := apiFrom(t, base, path, "one-more-guess", attacker)
	assert.Equal(t, http.StatusTooManyRequests, status, "the address used up its failures")
	assert.NotEmpty(t, header.Get("Retry-After"))
	status, _ = apiFrom(t, base, path, token, attacker)
	assert.Equal(t, http.StatusTooManyRequests, status, "a locked-out address is refused before its token is compared")

	status, _ = apiFrom(t, base, path, token, operator)
	assert.Equal(t, http.StatusNotFound, status, "another address gets in (the event does not exist)")
	status, _ = apiFrom(t, base, path, "typo", operator)
	assert.Equal(t, http.StatusUnauthorized, status, "another address's failure is its own")
	for range 3 * authlimit.PerAddressBurst { // right tokens cost nothing
		status, _ = apiFrom(t, base, path, token, operator)
		require.Equal(t, http.StatusNotFound, status)
	}

	out := logs.String()
	assert.Contains(t, out, `"msg":"internal API refused: wrong bearer token"`)
	assert.Contains(t, out, `"remote":"`+attacker+`"`, "refusals carry the address they were counted under")
	assert.Contains(t, out, `"msg":"internal API refused: too many failed tokens"`)
	assert.NotContains(t, out, `"remote":"10.1.1.1"`, "an address left of the client's in X-Forwarded-For is the client's own claim")
	assert.NotContains(t, out, "guess-", "a wrong token is never logged")
}

// Without TRUSTED_PROXIES, X-Forwarded-For is never believed: a client
// cannot spread its guesses over made-up addresses, and the logs show the
// connection's address.
func TestForwardedForIsIgnoredWithoutTrustedProxies(t *testing.T) {
	var logs testenv.Logs
	a := startApp(t, &logs, nil)
	base := a.Admin.URL()
	for i := range authlimit.PerAddressBurst {
		status, _ := apiFrom(t, base, "/internal/v1/events/evt_x", "guess", fmt.Sprintf("192.0.2.%d", i+1))
		require.Equal(t, http.StatusUnauthorized, status)
	}
	status, _ := apiFrom(t, base, "/internal/v1/events/evt_x", "guess", "192.0.2.200")
	assert.Equal(t, http.StatusTooManyRequests, status, "every guess counted against 127.0.0.1")
	out := logs.String()
	assert.Contains(t, out, `"remote":"127.0.0.1"`)
	assert.False(t, strings.Contains(out, `"remote":"192.0.2.`), "a spoofed X-Forwarded-For is never logged as the client")
}

// Many addresses sending wrong tokens together go over the global ceiling
// of failures, but never lock out the right token: an operator at a fresh
// address, and a guessing address that has failures of its own left, both
// get in. Wrong tokens stay limited: per address, and over the ceiling,
// where a wrong token also costs its address the rest of its burst.
func TestGuessersNeverLockOutTheRightToken(t *testing.T) {
	a := startApp(t, nil, map[string]string{"TRUSTED_PROXIES": "127.0.0.1/32"})
	base := a.Admin.URL()
	const path = "/internal/v1/events/evt_missing"
	const perAddress = authlimit.PerAddressBurst / 2
	// Each guessing address stays within its own burst; together they go
	// over the ceiling (the ceiling refills while they guess, hence twice
	// as many as it takes).
	limitedAt := ""
	for i := 0; limitedAt == "" && i < 2*authlimit.GlobalBurst/perAddress; i++ {
		addr := fmt.Sprintf("203.0.%d.%d", i/200, i%200+1)
		for j := 0; j < perAddress && limitedAt == ""; j++ {
			status, header := apiFrom(t, base, path, "guess", addr)
			switch status {
			case http.StatusUnauthorized:
			case http.StatusTooManyRequests:
				assert.NotEmpty(t, header.Get("Retry-After"))
				limitedAt = addr
			default:
				t.Fatalf("%s guess %d: status %d", addr, j, status)
			}
		}
	}
	require.NotEmpty(t, limitedAt, "the guesses went over the global ceiling")
	for _, addr := range []string{"198.51.100.20", "203.0.0.1"} {
		for range 3 {
			status, _ := apiFrom(t, base, path, token, addr)
			require.Equal(t, http.StatusNotFound, status, "%s: the right token gets in (the event does not exist)", addr)
		}
	}
	status, _ := apiFrom(t, base, path, "guess", limitedAt)
	assert.Equal(t, http.StatusTooManyRequests, status, "a wrong token over the ceiling cost its address the rest of its burst")
	status, _ = apiFrom(t, base, path, token, "198.51.100.20")
	assert.Equal(t, http.StatusNotFound, status, "the operator is still in")
}
