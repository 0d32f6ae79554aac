package stripebudget_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/postgres"
	"github.com/stripe-payments/stripe-payments/internal/stripebudget"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// fakeStripe records when each request arrives and its class (the test's
// own X-Class header): the rate is measured here, where Stripe measures it,
// not from the budget's counters.
type fakeStripe struct {
	*httptest.Server
	mu       sync.Mutex
	arrivals []arrival
	// answer, when set, writes the answer to request n (0-based).
	answer func(w http.ResponseWriter, n int) bool
}

type arrival struct {
	at    time.Time
	class string
	// released is when the budget handed the request to the HTTP client
	// (the releaseStamp transport's header): the instant the budget
	// controls. at adds the client's travel to the fake.
	released time.Time
}

func newFakeStripe(t *testing.T) *fakeStripe {
	f := &fakeStripe{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		n := len(f.arrivals)
		a := arrival{at: time.Now(), class: r.Header.Get("X-Class")}
		if ns, err := strconv.ParseInt(r.Header.Get(releasedHeader), 10, 64); err == nil {
			a.released = time.Unix(0, ns)
		}
		f.arrivals = append(f.arrivals, a)
		answer := f.answer
		f.mu.Unlock()
		if answer != nil && answer(w, n) {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"object":"payment_intent","id":"pi_1"}`))
	}))
	t.Cleanup(f.Close)
	return f
}

// windowSlack is how many requests more than the rate the tests allow in
// a one-second window of releases. The slots are 1/rate apart, so no
// window of one second holds more than rate of them, and a slot a request
// would use more than one interval late is dropped (these tests pin
// Config.Late to one interval: oneRequestLate); but a request is
// released when its goroutine wakes after its slot (the race detector, a
// 2-core machine shared by many suites). One request more is the window's
// edge (slots 0 and 1000 ms of a window released at 0 and 993 ms); one
// more is that wake-up's jitter.
const windowSlack = 2

// oneRequestLate is Config.Late at one request's worth, the tolerance
// windowSlack counts. The default tolerance, DefaultLateRequests requests'
// worth, adds that many requests to a window instead of one
// (TestLateToleranceSpendsStalledSlots holds it to that).
func oneRequestLate(rate float64) time.Duration {
	return time.Duration(float64(time.Second) / rate)
}

// warmUp is how long the tests that measure a rate let the replicas open
// their connections first. A replica keeps its connections to Stripe
// alive; a burst of first dials makes requests granted 20 ms apart arrive
// together, which is the dialer's doing, not the budget's.
const warmUp = 1500 * time.Millisecond

// warmedUp waits warmUp and forgets the arrivals so far.
func (f *fakeStripe) warmedUp() {
	time.Sleep(warmUp)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.arrivals = nil
}

func (f *fakeStripe) times(class string) []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []time.Time
	for _, a := range f.arrivals {
		if class == "" || a.class == class {
			out = append(out, a.at)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}

// releases is when the budget released each request of the class (all
// when class is ""), sorted; requests sent around the budget have none.
func (f *fakeStripe) releases(class string) []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []time.Time
	for _, a := range f.arrivals {
		if (class == "" || a.class == class) && !a.released.IsZero() {
			out = append(out, a.released)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}

// maxTravel is the longest time from a release to its arrival at the fake.
func (f *fakeStripe) maxTravel() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	var most time.Duration
	for _, a := range f.arrivals {
		if !a.released.IsZero() {
			most = max(most, a.at.Sub(a.released))
		}
	}
	return most
}

// assertRateAtStripe holds the requests to rate in two places. Where the
// budget releases them, any one-second window holds at most rate plus
// slack (the window's edge and the goroutine's wake-up). Where the fake
// receives them, a window of one second gathers the releases of a window
// one second plus the longest travel wide: on a 2-core machine shared by
// many suites that travel alone can add a request (a CI run saw 53
// arrivals at rate 50 while the releases held).
func assertRateAtStripe(t *testing.T, f *fakeStripe, rate float64, slack int) {
	t.Helper()
	released, travel := maxPerSecond(f.releases("")), f.maxTravel()
	arrived := maxPerSecond(f.times(""))
	t.Logf("at most %d released and %d arrived in one second (rate %.0f, longest travel %v)", released, arrived, rate, travel)
	assert.LessOrEqual(t, released, int(rate)+slack, "the budget released more than the rate in one second")
	assert.LessOrEqual(t, float64(arrived), rate*(1+travel.Seconds())+float64(slack), "more than the rate in one second at Stripe")
}

// releasedHeader carries the instant the budget released a request.
const releasedHeader = "X-Released-Unix-Nano"

// releaseStamp is the transport under the budget's: it stamps each request
// with the instant the budget let it go.
type releaseStamp struct{ next http.RoundTripper }

func (s releaseStamp) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(releasedHeader, strconv.FormatInt(time.Now().UnixNano(), 10))
	return s.next.RoundTrip(r)
}

// maxPerSecond is the most instants in any window [t, t+1s).
func maxPerSecond(ts []time.Time) int {
	most, j := 0, 0
	for i := range ts {
		for j < len(ts) && ts[j].Sub(ts[i]) < time.Second {
			j++
		}
		most = max(most, j-i)
	}
	return most
}

// replica is one replica's budget on its own connection pool.
type replica struct {
	budget *stripebudget.Shared
	client *http.Client
}

func newReplica(t *testing.T, dbURL, row string, cfg stripebudget.Config) replica {
	t.Helper()
	pool, err := postgres.Connect(context.Background(), dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return newReplicaOn(t, pool, row, cfg)
}

func newReplicaOn(t *testing.T, pool *pgxpool.Pool, row string, cfg stripebudget.Config) replica {
	t.Helper()
	b, err := stripebudget.New(stripebudget.PGStore{Pool: pool, Name: row}, cfg)
	require.NoError(t, err)
	// As many idle connections as workers (the default keeps two), as a
	// replica's client to Stripe does.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	return replica{budget: b, client: b.Client(&http.Client{Timeout: 10 * time.Second, Transport: releaseStamp{tr}}, stripebudget.Hydration)}
}

// send makes requests of class c through r until ctx ends, from workers
// goroutines, and returns how many got an answer.
func (r replica) send(ctx context.Context, t *testing.T, url string, c stripebudget.Class, workers int) *atomic.Int64 {
	var done atomic.Int64
	for range workers {
		go func() {
			for ctx.Err() == nil {
				req, err := http.NewRequestWithContext(stripebudget.WithClass(ctx, c), http.MethodPost, url+"/v1/payment_intents", nil)
				if err != nil {
					t.Error(err)
					return
				}
				req.Header.Set("X-Class", c.String())
				resp, err := r.client.Do(req)
				if err != nil {
					continue // ctx ended
				}
				_ = resp.Body.Close()
				done.Add(1)
			}
		}()
	}
	return &done
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(testWriter{}, nil)) }

type testWriter struct{}

func (testWriter) Write(p []byte) (int, error) { return len(p), nil }

// TestThreeReplicasShareOneRate: three replicas, each with its own pool and
// eight busy workers, never exceed the rate over any one-second window at
// the fake Stripe, and together use nearly all of it. The control (three
// budgets on three rows, i.e. three per-process limiters) shows the
// measurement catches an excess.
func TestThreeReplicasShareOneRate(t *testing.T) {
	t.Parallel()
	const rate = 50.0
	dbURL := testenv.DatabaseURL(t)
	for _, tc := range []struct {
		name   string
		rows   [3]string
		shared bool
	}{
		{"one budget for three replicas", [3]string{"stripe", "stripe", "stripe"}, true},
		{"control: a budget per replica", [3]string{"r1", "r2", "r3"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := newFakeStripe(t)
			ctx, cancel := context.WithTimeout(context.Background(), warmUp+4*time.Second)
			defer cancel()
			for i, row := range tc.rows {
				r := newReplica(t, dbURL, row, stripebudget.Config{Rate: rate, Late: oneRequestLate(rate), Log: quietLog()})
				r.send(ctx, t, fake.URL, []stripebudget.Class{stripebudget.Charges, stripebudget.Hydration, stripebudget.Background}[i], 8)
			}
			fake.warmedUp()
			<-ctx.Done()
			ts := fake.times("")
			most := maxPerSecond(ts)
			t.Logf("%d requests in 4 s, at most %d in one second (rate %.0f)", len(ts), most, rate)

			if !tc.shared {
				assert.Greater(t, most, int(rate)+5, "three separate budgets send three rates")
				return
			}
			assertRateAtStripe(t, fake, rate, windowSlack)
			assert.LessOrEqual(t, float64(len(ts)), rate*4+windowSlack, "more than the rate over the run")
			assert.GreaterOrEqual(t, float64(len(ts)), 0.8*rate*4, "the replicas leave the budget unused")
		})
	}
}

func slogTo(w *testenv.Logs) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

func hostOf(t *testing.T, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	return u.Host
}

// slowStore answers every lease delay later: half before the store decides,
// half after (a distant or loaded Postgres).
type slowStore struct {
	stripebudget.Store
	delay time.Duration
}

func (s slowStore) Lease(ctx context.Context, req stripebudget.LeaseRequest) (stripebudget.Lease, error) {
	time.Sleep(s.delay / 2)
	l, err := s.Store.Lease(ctx, req)
	time.Sleep(s.delay / 2)
	return l, err
}

// TestSlowStoreStillUsesTheRate: with leases taking 100 ms (five requests'
// worth at 50/s), a replica still sends nearly the whole rate, and never
// more: its first slot is no earlier than the answer can arrive (the
// lead), it leases a batch covering its lease's lag and asks for the next
// one that long before its slots run out. The control is the lease as
// first built (a fixed 100 ms batch, leased again 50 ms before its end,
// slots from the store's now): slots arrive after their time and are
// dropped as late.
func TestSlowStoreStillUsesTheRate(t *testing.T) {
	t.Parallel()
	const rate, seconds = 50.0, 4
	dbURL := testenv.DatabaseURL(t)
	for _, tc := range []struct {
		name     string
		adaptive bool
	}{
		{"batch and lead sized to the lease's lag", true},
		{"control: a fixed 100 ms batch, no lead", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool, err := postgres.Connect(context.Background(), dbURL)
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			b, err := stripebudget.New(slowStore{Store: stripebudget.PGStore{Pool: pool, Name: "slow-" + fmt.Sprint(tc.adaptive)}, delay: 100 * time.Millisecond},
				stripebudget.Config{Rate: rate, FixedLease: !tc.adaptive, Late: oneRequestLate(rate), Log: quietLog()})
			require.NoError(t, err)
			tr := http.DefaultTransport.(*http.Transport).Clone()
			tr.MaxIdleConnsPerHost = 64
			r := replica{budget: b, client: b.Client(&http.Client{Timeout: 10 * time.Second, Transport: releaseStamp{tr}}, stripebudget.Charges)}
			fake := newFakeStripe(t)
			ctx, cancel := context.WithTimeout(context.Background(), warmUp+seconds*time.Second)
			defer cancel()
			r.send(ctx, t, fake.URL, stripebudget.Charges, 8)
			fake.warmedUp()
			<-ctx.Done()
			ts := fake.times("")
			t.Logf("%d requests in %d s (%.2f of the rate), at most %d in one second", len(ts), seconds, float64(len(ts))/(rate*seconds), maxPerSecond(ts))
			assertRateAtStripe(t, fake, rate, windowSlack)
			if tc.adaptive {
				assert.GreaterOrEqual(t, float64(len(ts)), 0.9*rate*seconds, "the slow store's leases leave the budget unused")
			} else {
				assert.Less(t, float64(len(ts)), 0.9*rate*seconds, "the control should lose slots to the slow store (else the test proves nothing)")
			}
		})
	}
}
