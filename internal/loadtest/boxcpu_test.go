package loadtest

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBoxSubCountsOnlyWhatWasSpentBetween(t *testing.T) {
	tick := 10 * time.Millisecond // one USER_HZ tick
	before := Box{Busy: 100 * tick, Total: 400 * tick, ticks: map[string]map[int]int64{
		"Postgres": {10: 50, 11: 70, 12: 900}, // 12 is an idle connection that will close
	}}
	after := Box{Busy: 160 * tick, Total: 600 * tick, ticks: map[string]map[int]int64{
		"Postgres": {10: 55, 11: 90, 13: 4}, // 13 is a new backend
	}}
	d := before.Sub(after)
	assert.Equal(t, 60*tick, d.Busy)
	assert.Equal(t, 200*tick, d.Total)
	assert.Equal(t, (5+20+4)*tick, d.Procs["Postgres"], "an ended process counts zero, a new one from its start")
}

func TestDescends(t *testing.T) {
	parent := map[int]int{100: 1, 200: 100, 300: 200, 400: 1}
	for _, tc := range []struct {
		pid, root int
		want      bool
	}{
		{100, 100, true},
		{300, 100, true},
		{400, 100, false},
		{1, 100, false},
	} {
		assert.Equal(t, tc.want, descends(tc.pid, tc.root, parent), "pid %d under %d", tc.pid, tc.root)
	}
}

func TestReadBoxReadsThisProcess(t *testing.T) {
	b, err := ReadBox(map[string]int{"self": os.Getpid(), "none": 0})
	require.NoError(t, err)
	assert.Positive(t, b.Total)
	assert.LessOrEqual(t, b.Busy, b.Total)
	assert.Contains(t, b.Procs, "self")
	assert.NotContains(t, b.Procs, "none")
	assert.Contains(t, b.ticks["self"], os.Getpid())
}
