package billingqueue

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A real-time run's locked account waits a lock lease; a test clock's is
// tried again soon (its advance waits for the run), doubling up to the
// lease, and a crashed holder's 60 s lease ends before the locked
// receives run out.
func TestLockedDelay(t *testing.T) {
	w := &Worker{cfg: WorkerConfig{LockedDelay: 61 * time.Second}}
	clock := Message{Clock: "clk_1"}
	for _, tc := range []struct {
		name     string
		m        Message
		receives int
		want     time.Duration
	}{
		{"real time, first receive", Message{}, 1, 61 * time.Second},
		{"real time, fifth receive", Message{}, 5, 61 * time.Second},
		{"test clock, first receive", clock, 1, time.Second},
		{"test clock, second receive", clock, 2, 2 * time.Second},
		{"test clock, sixth receive", clock, 6, 32 * time.Second},
		{"test clock, seventh receive: capped at the lease", clock, 7, 61 * time.Second},
		{"test clock, tenth receive", clock, 10, 61 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, w.lockedDelay(tc.m, tc.receives))
		})
	}
	var waited time.Duration
	for r := 1; r <= 6; r++ {
		waited += w.lockedDelay(clock, r)
	}
	assert.Greater(t, waited, 60*time.Second, "six locked receives outlast a crashed holder's lease")
}
