package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"time"
	"unicode/utf8"
)

// MinInternalAPITokenLength and MinInternalAPITokenDistinct are the
// shortest INTERNAL_API_TOKEN accepted outside development mode, and the
// fewest distinct characters in it (docs/design.md §3): the token guards
// purchases, pay now and cancels on every merchant, so it must not be
// guessable, and 32 of one character is as good as one
// (`openssl rand -hex 32` makes a 64-character one).
const (
	MinInternalAPITokenLength   = 32
	MinInternalAPITokenDistinct = 12
)

// AdminConfig is the operator side (docs/design.md §3 "Two listeners"): the admin
// listener, which client addresses to believe behind a proxy, and the
// console's sessions.
type AdminConfig struct {
	// ListenAddr is ADMIN_LISTEN_ADDR: /ops/, /internal/v1/*, /v1/*,
	// /metrics, /readyz and /healthz.
	ListenAddr string
	// TrustedProxies (TRUSTED_PROXIES, comma-separated CIDRs or addresses)
	// are the proxies whose X-Forwarded-For is believed; empty: the
	// connection's address is the client's, whatever the header says.
	TrustedProxies []netip.Prefix
	// SessionIdle (OPS_SESSION_IDLE_TIMEOUT) ends a console session unused
	// for that long; SessionMaxAge (OPS_SESSION_MAX_AGE) ends every session
	// that long after login, used or not.
	SessionIdle   time.Duration
	SessionMaxAge time.Duration
}

// loadAdmin reads the admin settings and checks the token's length rule.
func loadAdmin(get func(key, def string) string, c Config, uses Uses) (AdminConfig, error) {
	var errs []error
	a := AdminConfig{ListenAddr: get("ADMIN_LISTEN_ADDR", "127.0.0.1:8081")}
	if a.ListenAddr == c.ListenAddr && !strings.HasSuffix(a.ListenAddr, ":0") {
		errs = append(errs, fmt.Errorf("ADMIN_LISTEN_ADDR: must differ from LISTEN_ADDR (%s): the public listener serves only the webhook", c.ListenAddr))
	}
	for _, s := range strings.Split(get("TRUSTED_PROXIES", ""), ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			addr, aerr := netip.ParseAddr(s)
			if aerr != nil {
				errs = append(errs, fmt.Errorf("TRUSTED_PROXIES: %q is neither a CIDR nor an IP address", s))
				continue
			}
			p = netip.PrefixFrom(addr, addr.BitLen())
		}
		a.TrustedProxies = append(a.TrustedProxies, p.Masked())
	}
	dur := func(key, def string, lo time.Duration) time.Duration {
		d, err := time.ParseDuration(get(key, def))
		if err != nil || d < lo {
			errs = append(errs, fmt.Errorf("%s: a duration of at least %s, such as %s", key, lo, def))
		}
		return d
	}
	a.SessionIdle = dur("OPS_SESSION_IDLE_TIMEOUT", "30m", time.Second)
	a.SessionMaxAge = dur("OPS_SESSION_MAX_AGE", "12h", time.Second)
	if a.SessionIdle > a.SessionMaxAge && a.SessionMaxAge > 0 {
		errs = append(errs, errors.New("OPS_SESSION_IDLE_TIMEOUT: at most OPS_SESSION_MAX_AGE"))
	}
	token := c.InternalAPIToken
	if !c.Development && uses.InternalAPI && token != "" && token != InternalAPIDisabled &&
		(utf8.RuneCountInString(token) < MinInternalAPITokenLength || distinct(token) < MinInternalAPITokenDistinct) {
		errs = append(errs, fmt.Errorf("INTERNAL_API_TOKEN: at least %d characters with at least %d distinct ones outside development mode "+
			"(it guards purchases, pay now and cancels on every merchant); generate one with `openssl rand -hex 32`, "+
			"or set it to %s to turn the internal routes off", MinInternalAPITokenLength, MinInternalAPITokenDistinct, InternalAPIDisabled))
	}
	return a, errors.Join(errs...)
}

// distinct counts the different characters of s.
func distinct(s string) int {
	seen := map[rune]bool{}
	for _, r := range s {
		seen[r] = true
	}
	return len(seen)
}

// LogValue renders the admin settings (no secrets among them).
func (a AdminConfig) LogValue() slog.Value {
	proxies := make([]string, len(a.TrustedProxies))
	for i, p := range a.TrustedProxies {
		proxies[i] = p.String()
	}
	return slog.GroupValue(
		slog.String("listen_addr", a.ListenAddr),
		slog.String("trusted_proxies", strings.Join(proxies, ",")),
		slog.Duration("session_idle", a.SessionIdle),
		slog.Duration("session_max_age", a.SessionMaxAge),
	)
}
