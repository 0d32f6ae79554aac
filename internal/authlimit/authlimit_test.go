package authlimit

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newClock() *clock { return &clock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)} }

// fail spends one failure of addr; false when it was refused (before the
// comparison, or over the global ceiling).
func fail(l *Limiter, addr string) bool {
	done, ok := l.Attempt("api", addr)
	limited := done(false)
	return ok && !limited
}

func TestOneSourceNeverLocksOutAnother(t *testing.T) {
	c := newClock()
	reg := prometheus.NewRegistry()
	l := New(Config{Now: c.Now, Registerer: reg})
	counter := func(t *testing.T, door, result string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() != "stripe_payments_auth_failures_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				labels := map[string]string{}
				for _, lp := range m.GetLabel() {
					labels[lp.GetName()] = lp.GetValue()
				}
				if labels["door"] == door && labels["result"] == result {
					return m.GetCounter().GetValue()
				}
			}
		}
		return 0
	}
	for i := range PerAddressBurst {
		require.True(t, fail(l, "203.0.113.7"), "failure %d", i)
	}
	assert.False(t, fail(l, "203.0.113.7"), "the burst is used up")
	done, ok := l.Attempt("api", "203.0.113.7")
	assert.False(t, ok, "refused whatever it sends")
	done(true)

	// A flood from one address for an hour: refused all along, while
	// another address still gets its full burst.
	for range 3600 {
		c.add(time.Second)
		fail(l, "203.0.113.7")
	}
	for i := range PerAddressBurst {
		require.True(t, fail(l, "198.51.100.1"), "the other address's failure %d", i)
	}
	done, ok = l.Attempt("console", "198.51.100.2")
	require.True(t, ok)
	done(true)

	// The address refills at its rate: one failure every PerAddressEvery.
	c.add(PerAddressEvery)
	assert.True(t, fail(l, "198.51.100.1"))
	assert.False(t, fail(l, "198.51.100.1"))

	// .7: its burst, then one every 6 s of the hour; .1: its burst and one
	// refill.
	assert.Equal(t, float64(PerAddressBurst+600+PerAddressBurst+1), counter(t, "api", "wrong_token"))
	assert.Equal(t, float64(1+1+3600-600+1), counter(t, "api", "limited"))
}

func TestRightTokensCostNothing(t *testing.T) {
	l := New(Config{Now: newClock().Now})
	for range 10 * PerAddressBurst {
		done, ok := l.Attempt("api", "192.0.2.1")
		require.True(t, ok)
		done(true)
	}
	for range PerAddressBurst {
		require.True(t, fail(l, "192.0.2.1"), "the burst is whole")
	}
}

func TestGlobalCeiling(t *testing.T) {
	c := newClock()
	l := New(Config{Now: c.Now, GlobalBurst: 50, GlobalPerSecond: 1})
	n := 0
	for i := 0; fail(l, fmt.Sprintf("10.0.%d.%d", i/250, i%250)); i++ {
		n++
	}
	assert.Equal(t, 50, n, "many sources together stop at the ceiling")
	assert.False(t, fail(l, "192.0.2.99"), "then everyone waits")
	c.add(time.Second)
	_, ok := l.Attempt("api", "192.0.2.99")
	assert.False(t, ok, "a wrong token over the ceiling cost its source the rest of its burst")
	assert.True(t, fail(l, "192.0.2.98"), "one a second")
	assert.False(t, fail(l, "192.0.2.97"))
	c.add(time.Hour)
	for i := range PerAddressBurst {
		require.True(t, fail(l, "192.0.2.99"), "refilled: failure %d", i)
	}
}

// Concurrent attempts cannot overrun the burst: the failure is reserved
// before the token is compared.
func TestConcurrentAttemptsReserve(t *testing.T) {
	l := New(Config{Now: newClock().Now})
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if fail(l, "203.0.113.9") {
				mu.Lock()
				allowed++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, PerAddressBurst, allowed)
}

func TestKey(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.1":            "192.0.2.1",
		"::ffff:192.0.2.1":     "192.0.2.1",
		"2001:db8:1:2:3:4:5:6": "2001:db8:1:2::/64",
		"2001:db8:1:2:ffff::1": "2001:db8:1:2::/64",
		"2001:db8:1:3::1":      "2001:db8:1:3::/64",
		"not an address":       "not an address",
	} {
		assert.Equal(t, want, Key(in), in)
	}
	l := New(Config{Now: newClock().Now})
	for i := range PerAddressBurst {
		require.True(t, fail(l, fmt.Sprintf("2001:db8:1:2::%x", i+1)))
	}
	assert.False(t, fail(l, "2001:db8:1:2::ffff"), "one /64 is one source")
}

// Many addresses guessing together use up the global ceiling, yet the
// right token still gets in, from a fresh address and from one of the
// guessing addresses that has failures of its own left: only failures are
// counted, and only after the token was compared.
func TestRightTokenIsNeverRefusedForOtherAddressesFailures(t *testing.T) {
	c := newClock()
	l := New(Config{Now: c.Now, GlobalBurst: 50, GlobalPerSecond: 1})
	for i := range 25 {
		for range 2 {
			require.True(t, fail(l, fmt.Sprintf("10.0.0.%d", i)), "address %d is within its own burst", i)
		}
	}
	for _, addr := range []string{"192.0.2.1", "10.0.0.3", "2001:db8::1"} {
		for range 3 {
			done, ok := l.Attempt("api", addr)
			require.True(t, ok, "%s: a right token is compared", addr)
			done(true)
		}
	}
}
