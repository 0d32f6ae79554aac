package poller

import (
	"errors"
	"fmt"
	"time"
)

// Defaults of Config.
const (
	DefaultOverlap     = 10 * time.Minute
	DefaultSettle      = 30 * time.Second
	DefaultLookback    = 72 * time.Hour
	DefaultRetention   = 30 * 24 * time.Hour // Stripe lists events of the last 30 days
	DefaultSlice       = 24 * time.Hour
	DefaultPageSize    = 100 // Stripe's maximum
	DefaultConcurrency = 4
	DefaultFullEvery   = 30 * time.Minute
)

// Config of a poller.
type Config struct {
	// PlatformAccount is STRIPE_PLATFORM_ACCOUNT: listed without a
	// Stripe-Account header.
	PlatformAccount string
	// Accounts, when set, limits a run to these accounts (--account);
	// otherwise the platform and every account of the AccountSource.
	Accounts []string
	// Overlap is how far before the checkpoint a window starts.
	Overlap time.Duration
	// Settle is how far before now a window ends.
	Settle time.Duration
	// Lookback is the window of an account's first run (no checkpoint), and
	// of a stuck sweep without --since.
	Lookback time.Duration
	// Retention is how far back Stripe lists events; windows never start
	// earlier.
	Retention time.Duration
	// Slice cuts long windows into pieces that are listed, diffed and
	// replayed one after the other, oldest first.
	Slice time.Duration
	// FullEvery is the longest a checkpointed account goes without a full
	// listing (default 30 min, inside the stale-checkpoint alert's hour).
	// Between full listings a run lists only the events Stripe has not
	// delivered (GET /v1/events?delivery_success=false) when that is
	// expected to take fewer calls (see Poller.listingFor). Negative: every
	// run lists everything.
	FullEvery time.Duration
	// PageSize is the listing's `limit` (1..100).
	PageSize int64
	// Concurrency is how many replays are in flight at once.
	Concurrency int
	// ReplayAttempts is how often a replay is tried before it counts as
	// failed (default 3); ReplayTimeout bounds each attempt (default 30 s).
	ReplayAttempts int
	ReplayTimeout  time.Duration
	// RetryBackoff is the first wait between replay attempts (default 200 ms).
	RetryBackoff time.Duration
	// DryRun lists what would be replayed and changes nothing: no replay, no
	// checkpoint, no metrics.
	DryRun bool
}

func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.Overlap, DefaultOverlap)
	def(&c.Settle, DefaultSettle)
	def(&c.Lookback, DefaultLookback)
	def(&c.Retention, DefaultRetention)
	def(&c.Slice, DefaultSlice)
	def(&c.FullEvery, DefaultFullEvery)
	def(&c.ReplayTimeout, 30*time.Second)
	def(&c.RetryBackoff, 200*time.Millisecond)
	if c.PageSize == 0 {
		c.PageSize = DefaultPageSize
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.ReplayAttempts == 0 {
		c.ReplayAttempts = 3
	}
	return c
}

// Validate reports every invalid setting at once.
func (c Config) Validate() error {
	var errs []error
	if c.PlatformAccount == "" {
		errs = append(errs, errors.New("platform account: required"))
	}
	for name, d := range map[string]time.Duration{"overlap": c.Overlap, "settle": c.Settle} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s: must not be negative", name))
		}
	}
	for name, d := range map[string]time.Duration{"lookback": c.Lookback, "retention": c.Retention, "slice": c.Slice} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s: must be positive", name))
		}
	}
	if c.Slice > 0 && c.Slice < time.Second {
		errs = append(errs, errors.New("slice: at least 1s"))
	}
	if c.PageSize < 1 || c.PageSize > 100 {
		errs = append(errs, errors.New("page size: 1 to 100"))
	}
	if c.Concurrency < 1 {
		errs = append(errs, errors.New("concurrency: at least 1"))
	}
	return errors.Join(errs...)
}
