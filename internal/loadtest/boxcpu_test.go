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

func TestParseProcStat(t *testing.T) {
	// utime and stime are the 14th and 15th fields of the whole line.
	for _, tc := range []struct {
		name, line string
		pid, ppid  int
		ticks      int64
		wantErr    bool
	}{
		{"plain", "4242 (postgres) S 17 4242 4242 0 -1 4194560 1 0 0 0 300 45 0 0 20 0 1 0 5 0 0", 4242, 17, 345, false},
		{"a command with spaces and parentheses", "7 (a b) (c)) R 1 7 7 0 -1 0 0 0 0 0 12 3 0 0 20 0 1 0 5 0 0", 7, 1, 15, false},
		{"short", "9 (x) S 1 2 3", 0, 0, 0, true},
		{"no command", "garbage", 0, 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pid, ppid, ticks, err := parseProcStat([]byte(tc.line))
			if tc.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, []any{tc.pid, tc.ppid, tc.ticks}, []any{pid, ppid, ticks})
		})
	}
}
