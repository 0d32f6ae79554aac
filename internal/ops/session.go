package ops

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"net/http"
	"net/url"
	"strings"
	"time"
)

const (
	sessionCookie = "ops_session"
	loginCookie   = "ops_login"
	// SessionTTL bounds a browser session; the token is asked again after.
	SessionTTL = 12 * time.Hour
)

// sessions issues and checks stateless session cookies: expiry and a random
// session id, signed with a key derived from INTERNAL_API_TOKEN. Nothing is
// stored, so every instance accepts every session, and rotating the token
// ends them all. The CSRF token of a session is a MAC of its id.
type sessions struct {
	key []byte
	now func() time.Time
}

func newSessions(token string, now func() time.Time) sessions {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("stripe-payments ops console session key v1"))
	return sessions{key: m.Sum(nil), now: now}
}

func (s sessions) mac(parts ...string) []byte {
	m := hmac.New(sha256.New, s.key)
	for _, p := range parts {
		m.Write([]byte(p))
		m.Write([]byte{0})
	}
	return m.Sum(nil)
}

var b64 = base64.RawURLEncoding

// issue returns a new session cookie value and its id.
func (s sessions) issue() (value, id string) {
	raw := make([]byte, 8+16)
	binary.BigEndian.PutUint64(raw, uint64(s.now().Add(SessionTTL).Unix()))
	_, _ = rand.Read(raw[8:])
	body := b64.EncodeToString(raw)
	return body + "." + b64.EncodeToString(s.mac("session", body)), b64.EncodeToString(raw[8:])
}

// check returns the session id of a valid, unexpired cookie value.
func (s sessions) check(value string) (string, bool) {
	body, sig, ok := strings.Cut(value, ".")
	if !ok {
		return "", false
	}
	got, err := b64.DecodeString(sig)
	if err != nil || !hmac.Equal(got, s.mac("session", body)) {
		return "", false
	}
	raw, err := b64.DecodeString(body)
	if err != nil || len(raw) != 24 {
		return "", false
	}
	if s.now().Unix() >= int64(binary.BigEndian.Uint64(raw)) {
		return "", false
	}
	return b64.EncodeToString(raw[8:]), true
}

// csrf is the CSRF token of a session (or of a login nonce).
func (s sessions) csrf(kind, id string) string { return b64.EncodeToString(s.mac("csrf", kind, id)) }

func (s sessions) csrfOK(kind, id, got string) bool {
	want := s.csrf(kind, id)
	return subtle.ConstantTimeCompare([]byte(want), []byte(got)) == 1
}

// tokenOK compares a submitted token with INTERNAL_API_TOKEN in constant
// time over digests (length does not leak either).
func tokenOK(want, got string) bool {
	a, b := sha256.Sum256([]byte(want)), sha256.Sum256([]byte(got))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

func randomID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return b64.EncodeToString(b)
}

// secure reports a request that reached us over TLS, directly or through a
// proxy that says so: the cookies are then Secure.
func secure(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

func setCookie(w http.ResponseWriter, r *http.Request, name, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name: name, Value: value, Path: Prefix, MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secure(r),
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
