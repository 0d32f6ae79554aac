package ops

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/opsdata"
)

const (
	sessionCookie = "ops_session"
	loginCookie   = "ops_login"
	// SessionTTL is the default absolute lifetime of a session
	// (OPS_SESSION_MAX_AGE); SessionIdle the default idle timeout
	// (OPS_SESSION_IDLE_TIMEOUT).
	SessionTTL  = 12 * time.Hour
	SessionIdle = 30 * time.Minute
)

// sessions are server-side (table ops_sessions, shared by every replica):
// the cookie is 32 random bytes, nothing derived from INTERNAL_API_TOKEN
// or any key, and the table holds only its SHA-256. A session ends at
// logout (its row is deleted: a copied cookie is refused at once, on every
// replica), after idle without a request, or maxAge after login. Its CSRF
// token is another random value kept in the row. Each row carries the tag
// of the token it was opened with: after the token is rotated, no session
// opened under the old one is accepted.
type sessions struct {
	store  SessionStore
	now    func() time.Time
	idle   time.Duration
	maxAge time.Duration
	tag    []byte // tokenTag(INTERNAL_API_TOKEN)
}

// tokenTag identifies a token without revealing it: 8 bytes of an HMAC
// keyed by it. It is stored server-side only, never sent to a browser.
func tokenTag(token string) []byte {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("stripe-payments ops session token tag v1"))
	return m.Sum(nil)[:8]
}

// session is a valid session: its cookie's digest and its CSRF token.
type session struct {
	idHash []byte
	csrf   string
}

var b64 = base64.RawURLEncoding

func digest(value string) []byte {
	sum := sha256.Sum256([]byte(value))
	return sum[:]
}

// SessionStore keeps the sessions' rows (opsdata.Sessions).
type SessionStore interface {
	Issue(ctx context.Context, s opsdata.NewSession) error
	Touch(ctx context.Context, idHash, tag []byte, now, touchBefore, idleSince time.Time) (opsdata.Live, error)
	Revoke(ctx context.Context, idHash []byte) error
}

// issue stores a new session and returns its cookie value.
func (s sessions) issue(ctx context.Context, remote string) (string, error) {
	value, csrf := randomToken(32), randomToken(32)
	now := s.now()
	if err := s.store.Issue(ctx, opsdata.NewSession{IDHash: digest(value), CSRF: csrf, Remote: remote, TokenTag: s.tag,
		Now: now, ExpiresAt: now.Add(s.maxAge), IdleSince: now.Add(-s.idle)}); err != nil {
		return "", err
	}
	return value, nil
}

// errNoSession: no such session, or it has ended.
var errNoSession = errors.New("no session")

// check returns the live session of a cookie value and marks it used;
// errNoSession when it is unknown, logged out, idle too long or too old.
// The last use is written only when it is older than a minute (or a tenth
// of the idle timeout, if shorter): most requests only read the row.
func (s sessions) check(ctx context.Context, value string) (session, error) {
	if value == "" || len(value) > 100 {
		return session{}, errNoSession
	}
	now := s.now()
	step := min(time.Minute, s.idle/10)
	live, err := s.store.Touch(ctx, digest(value), s.tag, now, now.Add(-step), now.Add(-s.idle))
	if errors.Is(err, opsdata.ErrNoSession) {
		return session{}, errNoSession
	}
	if err != nil {
		return session{}, err
	}
	return session{idHash: live.IDHash, csrf: live.CSRF}, nil
}

// revoke ends a session on every replica.
func (s sessions) revoke(ctx context.Context, idHash []byte) error {
	return s.store.Revoke(ctx, idHash)
}

// equal compares two secrets in constant time.
func equal(want, got string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(want), []byte(got)) == 1
}

// tokenOK compares a submitted token with INTERNAL_API_TOKEN in constant
// time over digests (length does not leak either).
func tokenOK(want, got string) bool {
	a, b := sha256.Sum256([]byte(want)), sha256.Sum256([]byte(got))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

func randomToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b64.EncodeToString(b)
}

func randomID() string { return randomToken(16) }

// secure reports whether the console's cookies are Secure: always outside
// development mode (the console is then behind TLS, and a cookie must never
// travel in clear), and in development mode when the request reached us
// over TLS, directly or through a proxy that says so.
func (c *Console) secure(r *http.Request) bool {
	return !c.d.Development || r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

func (c *Console) setCookie(w http.ResponseWriter, r *http.Request, name, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name: name, Value: value, Path: Prefix, MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: c.secure(r),
	})
}

// sameOrigin refuses a state-changing request a browser says came from
// another site, on top of the CSRF token and the SameSite cookie. Browsers
// that send Sec-Fetch-Site are trusted on it (it survives proxies that
// rewrite Host); older ones must send no Origin or this host's.
func sameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "same-origin", "none":
		return true
	case "":
	default:
		return false
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || origin == "null" {
		return false
	}
	return u.Host == r.Host || (r.Header.Get("X-Forwarded-Host") != "" && u.Host == r.Header.Get("X-Forwarded-Host"))
}
