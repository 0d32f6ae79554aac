// Package authlimit bounds guesses of INTERNAL_API_TOKEN: failed
// authentications (console logins, bearer tokens) are counted per client
// address and in total, in token buckets. A source that used up its own
// bucket is refused (429) before its token is even compared, whatever it
// sends, until the bucket refills; other sources are not affected.
//
// The total bucket is a ceiling on failures only, far above what one source
// can spend. It is consulted after the token was compared, so that many
// sources guessing together can never lock out the right token (an
// operator, an API client): over the ceiling a wrong token is answered 429
// and costs its source the rest of its bucket, which leaves each guessing
// source one guess per refill.
//
// The client address is echo's RealIP, which believes X-Forwarded-For only
// from TRUSTED_PROXIES (httpserver.Server.TrustProxies). IPv6 sources are
// counted per /64, the block one host usually holds. The counts live in
// the process: each replica has its own buckets.
package authlimit

import (
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults: one source may fail PerAddressBurst times in a row, then once
// every PerAddressEvery; all sources together GlobalBurst times, then
// GlobalPerSecond a second. One source's refill (1 per 6 s) is 1/60 of the
// global refill, so one source alone can never empty the global bucket.
const (
	PerAddressBurst = 10
	PerAddressEvery = 6 * time.Second
	GlobalBurst     = 1000
	GlobalPerSecond = 10
	// maxTracked bounds the per-address map; full buckets (sources that have
	// not failed for a minute) are dropped first.
	maxTracked = 100_000
)

// Config tunes a Limiter; zero fields take the defaults.
type Config struct {
	PerAddressBurst int
	PerAddressEvery time.Duration
	GlobalBurst     int
	GlobalPerSecond float64
	Now             func() time.Time
	// Registerer receives stripe_payments_auth_failures_total; nil: none.
	Registerer prometheus.Registerer
}

// Limiter counts failures. The zero value is not usable: use New.
type Limiter struct {
	cfg    Config
	mu     sync.Mutex
	per    map[string]*bucket
	global bucket
	counts *prometheus.CounterVec
}

// epsilon absorbs the float error of many small refills (six 1/6 s
// refills make one token, not 0.999…).
const epsilon = 1e-9

type bucket struct {
	tokens float64
	last   time.Time
}

// refill adds what accrued since last, up to burst.
func (b *bucket) refill(now time.Time, perSecond float64, burst int) {
	if b.last.IsZero() {
		b.tokens, b.last = float64(burst), now
		return
	}
	if el := now.Sub(b.last).Seconds(); el > 0 {
		b.tokens += el * perSecond
		b.last = now
	}
	if b.tokens > float64(burst) {
		b.tokens = float64(burst)
	}
}

// New returns a Limiter with cfg's settings.
func New(cfg Config) *Limiter {
	if cfg.PerAddressBurst <= 0 {
		cfg.PerAddressBurst = PerAddressBurst
	}
	if cfg.PerAddressEvery <= 0 {
		cfg.PerAddressEvery = PerAddressEvery
	}
	if cfg.GlobalBurst <= 0 {
		cfg.GlobalBurst = GlobalBurst
	}
	if cfg.GlobalPerSecond <= 0 {
		cfg.GlobalPerSecond = GlobalPerSecond
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	l := &Limiter{cfg: cfg, per: map[string]*bucket{},
		counts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stripe_payments_auth_failures_total",
			Help: "Authentication attempts refused, by door (console, api) and result: wrong_token, or limited (too many failures from the address, or a wrong token over the ceiling of failures from all addresses).",
		}, []string{"door", "result"})}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(l.counts)
	}
	return l
}

// Key is the bucket of a client address: the address itself, an IPv6 one
// by its /64.
func Key(addr string) string {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return addr
	}
	a = a.Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}

// Attempt reserves one failure of addr's own bucket before a token is
// compared: false means addr has no failure left, and the attempt must be
// refused without looking at the token. Other addresses' failures never
// make it false.
//
// done(true) returns the reservation (the token was right). done(false)
// keeps it and counts the failure against the global ceiling; limited
// reports that the ceiling was already reached: the wrong token is then
// answered 429, and addr loses the rest of its bucket.
func (l *Limiter) Attempt(door, addr string) (done func(ok bool) (limited bool), allowed bool) {
	key := Key(addr)
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.cfg.Now()
	b := l.per[key]
	if b == nil {
		l.prune(now)
		b = &bucket{}
		l.per[key] = b
	}
	perSecond := 1 / l.cfg.PerAddressEvery.Seconds()
	b.refill(now, perSecond, l.cfg.PerAddressBurst)
	if b.tokens < 1-epsilon {
		l.counts.WithLabelValues(door, "limited").Inc()
		return func(bool) bool { return false }, false
	}
	b.tokens--
	var once sync.Once
	return func(ok bool) (limited bool) {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			now := l.cfg.Now()
			if ok {
				b.tokens++
				b.refill(now, perSecond, l.cfg.PerAddressBurst)
				return
			}
			l.global.refill(now, l.cfg.GlobalPerSecond, l.cfg.GlobalBurst)
			if l.global.tokens < 1-epsilon {
				b.tokens = min(b.tokens, 0)
				limited = true
				l.counts.WithLabelValues(door, "limited").Inc()
				return
			}
			l.global.tokens--
			l.counts.WithLabelValues(door, "wrong_token").Inc()
		})
		return limited
	}, true
}

// RetryAfter is how long a refused source waits for its next attempt.
func (l *Limiter) RetryAfter() time.Duration { return l.cfg.PerAddressEvery }

// prune drops full buckets (sources that have not failed for a minute)
// when the map is at its bound, then any entries down to half of it (the
// global ceiling makes that take hours of failures from as many sources);
// mu is held.
func (l *Limiter) prune(now time.Time) {
	if len(l.per) < maxTracked {
		return
	}
	perSecond := 1 / l.cfg.PerAddressEvery.Seconds()
	for k, b := range l.per {
		b.refill(now, perSecond, l.cfg.PerAddressBurst)
		if b.tokens >= float64(l.cfg.PerAddressBurst) {
			delete(l.per, k)
		}
	}
	for k := range l.per {
		if len(l.per) < maxTracked/2 {
			break
		}
		delete(l.per, k)
	}
}
