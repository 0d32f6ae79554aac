package recordq_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/recordq"
)

// heldTable stands in for the events table: it holds every write for hold
// (the first one for first, when set), counts the writes in flight and
// keeps what was written.
type heldTable struct {
	hold, first time.Duration

	mu      sync.Mutex
	writes  int
	now     int
	peak    int
	written map[string]bool
}

func (h *heldTable) BatchGet(context.Context, []string) (map[string]events.Record, error) {
	return map[string]events.Record{}, nil
}

func (h *heldTable) PutProcessed(ctx context.Context, recs []events.Record) error {
	h.mu.Lock()
	h.writes++
	hold := h.hold
	if h.writes == 1 && h.first > 0 {
		hold = h.first
	}
	h.now++
	h.peak = max(h.peak, h.now)
	h.mu.Unlock()
	var err error
	select {
	case <-time.After(hold):
	case <-ctx.Done():
		err = ctx.Err()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.now--
	for _, r := range recs {
		h.written[r.ID] = err == nil
	}
	return err
}

func (h *heldTable) state() (peak int, written map[string]bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := make(map[string]bool, len(h.written))
	for id := range h.written {
		w[id] = true
	}
	return h.peak, w
}

// docs/architecture.md: the write-behind keeps one table write in flight
// while one writer keeps up (DynamoDB Local runs conditional transactions
// one at a time); the other writers join when a full batch waits, or when
// a record has waited HelpAfter past the linger (a stuck write); every
// record is written.
func TestWritersJoinOnlyWhenTheFirstFallsBehind(t *testing.T) {
	cases := []struct {
		name        string
		hold, first time.Duration // heldTable's
		helpAfter   time.Duration
		linger      time.Duration // recordq.New's default (10 ms) when zero
		waves       int           // handed one after the other, every gap
		perWave     int
		gap         time.Duration
		wantPeak    int
		within      time.Duration // the last wave written within this of its hand
	}{
		// 100 records/s, a write held 60 ms: a batch of 100 would take a
		// second of falling behind to fill.
		{name: "a rate one writer keeps up with", hold: 60 * time.Millisecond,
			helpAfter: time.Minute, waves: 40, perWave: 2, gap: 20 * time.Millisecond, wantPeak: 1, within: 10 * time.Second},
		// The others wait HelpAfter past the linger, never before the first.
		{name: "a linger longer than HelpAfter", hold: 150 * time.Millisecond, linger: 300 * time.Millisecond,
			helpAfter: 100 * time.Millisecond, waves: 40, perWave: 2, gap: 20 * time.Millisecond, wantPeak: 1, within: 10 * time.Second},
		{name: "a backlog of full batches", hold: 300 * time.Millisecond,
			helpAfter: time.Minute, waves: 1, perWave: 1000, wantPeak: 4, within: 20 * time.Second},
		// The first write never ends within the test: records handed after
		// it are written by the others once they have waited HelpAfter.
		{name: "a stuck first write", hold: time.Millisecond, first: time.Hour,
			helpAfter: 200 * time.Millisecond, waves: 2, perWave: 3, gap: 50 * time.Millisecond, wantPeak: 2, within: 10 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			table := &heldTable{hold: tc.hold, first: tc.first, written: map[string]bool{}}
			q := recordq.New(e.pool, table, recordq.Config{Writers: 4, Linger: tc.linger,
				HelpAfter: tc.helpAfter, Timeout: 2 * time.Hour})
			run(t, q)
			var all []events.Record
			var last time.Time
			for w := range tc.waves {
				wave := make([]events.Record, tc.perWave)
				for i := range wave {
					wave[i] = record(t)
				}
				commit(t, e, q, wave...)
				if w > 0 {
					time.Sleep(tc.gap)
				}
				last = time.Now()
				q.Hand(wave)
				all = append(all, wave...)
			}
			stuck := ""
			if tc.first > 0 {
				stuck = "first wave" // held by the stuck write
			}
			deadline := last.Add(tc.within)
			for {
				peak, written := table.state()
				missing := 0
				for i, r := range all {
					if stuck != "" && i < tc.perWave {
						continue
					}
					if !written[r.ID] {
						missing++
					}
				}
				if missing == 0 {
					require.Equal(t, tc.wantPeak, peak, "table writes in flight at most")
					return
				}
				require.True(t, time.Now().Before(deadline), "%d of %d records not written %s after the last hand", missing, len(all), tc.within)
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}
