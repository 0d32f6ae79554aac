package main

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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

// The goal table's figures, worked by hand for 2 cores: the peer at 1,000/s
// makes the goal 1,200/s, 1,666 µs of machine per event; the stubbed
// instance used 0.8 s of the machine (the stub's 0.2 s left out) for 2,000
// events, 400 µs each, which leaves DynamoDB Local 1,266 µs a record.
// 1,500 µs a record allows 2 s ÷ 1,900 µs = 1,053/s (1.05×); 300 µs,
// 2 s ÷ 700 µs = 2,857/s (2.86×). Per event without the load generator:
// the peer (1.5 − 0.5) s ÷ 3,000 = 333 µs; this service's floor
// (1.0 − 0.2 − 0.1) s ÷ 2,000 + 300 µs = 650 µs.
func TestGoalTableBoundsTheRateFromTheRunsOwnFigures(t *testing.T) {
	box := func(busy, loadgen, stub time.Duration) loadtest.Box {
		return loadtest.Box{Busy: busy, Total: 10 * time.Second, Procs: map[string]time.Duration{"load generator": loadgen, stubPart: stub}}
	}
	stubbed := summary{rate: 2000, events: 2000, box: box(time.Second, 100*time.Millisecond, 200*time.Millisecond)}
	rep := compareReport{
		o: compareOptions{peerName: "the peer", cpus: 2},
		rows: []compareRow{{c: 32,
			peer:    summary{rate: 1000, events: 3000, box: box(1500*time.Millisecond, 500*time.Millisecond, 0)},
			ours:    summary{rate: 500, events: 1000, box: box(time.Second, 100*time.Millisecond, 0)},
			stubbed: &stubbed,
		}},
		ceilings: []ceiling{
			{what: "conditional", kind: ceilingConditional, per: 100, dynamoPerItem: 1500 * time.Microsecond},
			{what: "unconditional", kind: ceilingUnconditional, per: 25, dynamoPerItem: 300 * time.Microsecond},
		},
	}
	var b strings.Builder
	rep.goalTable(&b)
	got := b.String()
	for _, want := range []string{
		"| the goal at concurrency 32 (1.2× the peer, counting the drain), from this run's figures | per event | the most the 2 cores allow (estimate) |",
		"| the machine's CPU the goal allows per event: 2 cores ÷ (1.2 × 1000/s) | 1666 µs | |",
		"| this service's machine CPU per event without DynamoDB Local's work (the stubbed instance at its own rate; the load generator included) | 400 µs | |",
		"| what that leaves DynamoDB Local per record | 1266 µs | |",
		"(the write-behind's first records; the ceiling's, 4 writers) | 1500 µs | 1053/s, **1.05×** |",
		"(the cheapest write it takes; no condition; the ceiling's, 8 writers) | 300 µs | 2857/s, **2.86×** |",
		"| 333 µs against 650 µs | |",
	} {
		require.Contains(t, got, want)
	}

	// The machine per event: this service (1.0 − 0.1) s ÷ 1,000 = 900 µs,
	// 2.70× the peer's 333 µs; stubbed 350 µs.
	b.Reset()
	rep.machinePerEventTable(&b)
	require.Contains(t, b.String(), "| concurrency 32 | 333 µs | 900 µs | 2.70× | 350 µs |")

	// A peer at 2,000/s allows 833 µs an event: the stubbed instance's
	// 400 µs fit; at 5,000/s, 333 µs do not, and nothing is left.
	for _, tc := range []struct {
		peer float64
		want string
	}{
		{2000, "| what that leaves DynamoDB Local per record | 433 µs | |"},
		{5000, "| what that leaves DynamoDB Local per record | none: out of reach even without DynamoDB Local | |"},
	} {
		rep.rows[0].peer.rate = tc.peer
		b.Reset()
		rep.goalTable(&b)
		require.Contains(t, b.String(), tc.want)
	}
	rep.rows[0].peer.rate = 1000

	// Without the stubbed instance, or without DynamoDB Local's CPU in the
	// ceilings, there is nothing to bound with: no table.
	rep.rows[0].stubbed = nil
	b.Reset()
	rep.goalTable(&b)
	require.Empty(t, b.String())
	rep.rows[0].stubbed = &stubbed
	rep.ceilings[0].dynamoPerItem = 0
	b.Reset()
	rep.goalTable(&b)
	require.Empty(t, b.String())
}
