package main

import (
	"runtime"
	"testing"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/loadtest"
)

// measured is a phase of 200 requests at rate per second, every answer
// taking lat, cpu of the target's own CPU per event, and the machine one
// core busy (whatever its count) split among the watched processes.
func measured(rate float64, lat, cpu time.Duration) sample {
	s := phaseSample(200, time.Duration(200/rate*float64(time.Second)), lat)
	d := s.res.Duration
	s.cpuSec = (cpu * 200).Seconds()
	s.box = loadtest.Box{Busy: d, Total: time.Duration(runtime.NumCPU()) * d, Procs: map[string]time.Duration{
		"target": d / 4, "Postgres": d / 8, "DynamoDB Local": d / 8, "load generator": d / 16, stubPart: d / 10,
	}}
	return s
}

// The tables after the main one gain the stubbed instance's columns (CPU
// per event, the machine, where the time goes), and the stub its own row
// of the machine table when its pid is known; without the third target
// they are as they were.
func TestCompareMarkdownStubbedColumns(t *testing.T) {
	for _, tc := range []struct {
		name    string
		stubbed bool
		stubPID int
		want    []string
		absent  []string
	}{
		{
			name: "two targets",
			want: []string{
				"| CPU per event (process only) | the peer | this service |\n| --- | --- | --- |\n| concurrency 1 | 300 µs | 400 µs |\n",
				"| the peer, c=1 | this service, c=1 | the peer, c=32 | this service, c=32 |\n| --- | --- | --- | --- | --- |\n",
				"| everything else (kernel, other processes) | 0.44 | 0.44 | 0.44 | 0.44 |\n",
				"| where this service's time goes (means over its measured phases) | concurrency 1 | concurrency 32 |\n",
				"| events per group-commit batch | 2.0 | 8.0 |\n",
			},
			absent: []string{"stubbed", "loadgen stub-table"},
		},
		{
			name:    "the stubbed instance and the stub's pid",
			stubbed: true,
			stubPID: 4242,
			want: []string{
				"| CPU per event (process only) | the peer | this service | this service, events table stubbed |\n| --- | --- | --- | --- |\n",
				"| concurrency 1 | 300 µs | 400 µs | 350 µs |\n",
				"| the peer, c=1 | this service, c=1 | this service, events table stubbed, c=1 | the peer, c=32 |",
				"| the events-table stub (loadgen stub-table) | 0.10 | 0.10 | 0.10 | 0.10 | 0.10 | 0.10 |\n",
				// the stub's CPU is not counted again in "everything else"
				"| everything else (kernel, other processes) | 0.34 | 0.34 | 0.34 | 0.34 | 0.34 | 0.34 |\n",
				"| concurrency 1 | concurrency 32 | concurrency 1, events table stubbed | concurrency 32, events table stubbed |\n",
				"| events per group-commit batch | 2.0 | 8.0 | 5.0 | 6.0 |\n",
			},
		},
		{
			name:    "the stubbed instance without the stub's pid",
			stubbed: true,
			want:    []string{"this service, events table stubbed, c=32 |", "| concurrency 1 | 300 µs | 400 µs | 350 µs |\n"},
			absent:  []string{"the events-table stub (loadgen stub-table)"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := compareReport{o: compareOptions{peerName: "the peer", rounds: 2, duration: 10 * time.Second, stubPID: tc.stubPID}}
			for _, c := range []struct {
				c                      int
				ours, stubbed, stBatch float64
			}{{1, 2, 5, 5}, {32, 8, 6, 6}} {
				row := compareRow{
					c:      c.c,
					peer:   summarise([]sample{measured(1000, 2*time.Millisecond, 300*time.Microsecond), measured(1000, 2*time.Millisecond, 300*time.Microsecond)}),
					ours:   summarise([]sample{measured(800, 3*time.Millisecond, 400*time.Microsecond), measured(800, 3*time.Millisecond, 400*time.Microsecond)}),
					stages: stages{batchSum: 10 * c.ours, batchCount: 10},
				}
				if tc.stubbed {
					s := summarise([]sample{measured(1500, time.Millisecond, 350*time.Microsecond), measured(1500, time.Millisecond, 350*time.Microsecond)})
					row.stubbed, row.stubbedStages = &s, stages{batchSum: 10 * c.stBatch, batchCount: 10}
				}
				rep.rows = append(rep.rows, row)
			}
			assertMarkdown(t, rep, tc.want, tc.absent)
		})
	}
}
