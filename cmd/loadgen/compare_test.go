package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/loadtest"
)

// Every (round, concurrency) runs every target exactly once, and over the
// rounds each target goes first equally often, give or take one: a slow
// minute of the shared machine must not always fall on the same target.
func TestRoundOrderIsFair(t *testing.T) {
	for _, tc := range []struct{ targets, rounds, concurrencies int }{
		{2, 3, 2}, {2, 5, 2}, {3, 3, 2}, {3, 5, 2}, {3, 4, 1}, {2, 1, 1},
	} {
		leads := make([]int, tc.targets)
		for r := range tc.rounds {
			for ci := range tc.concurrencies {
				order := roundOrder(tc.targets, r, ci)
				require.Len(t, order, tc.targets)
				seen := map[int]bool{}
				for _, target := range order {
					require.True(t, target >= 0 && target < tc.targets, "target %d out of range in %v", target, order)
					require.False(t, seen[target], "target %d twice in %v", target, order)
					seen[target] = true
				}
				leads[order[0]]++
			}
		}
		lo, hi := leads[0], leads[0]
		for _, n := range leads {
			lo, hi = min(lo, n), max(hi, n)
		}
		if tc.rounds*tc.concurrencies >= tc.targets {
			assert.LessOrEqual(t, hi-lo, 1, "%+v: leads %v", tc, leads)
		}
	}
}

// With two targets the order is the one the earlier reports were measured
// with: alternating, the peer first in the first round at the first
// concurrency.
func TestRoundOrderOfTwoAlternates(t *testing.T) {
	assert.Equal(t, []int{0, 1}, roundOrder(2, 0, 0))
	assert.Equal(t, []int{1, 0}, roundOrder(2, 0, 1))
	assert.Equal(t, []int{1, 0}, roundOrder(2, 1, 0))
	assert.Equal(t, []int{0, 1}, roundOrder(2, 1, 1))
}

func phaseSample(requests int64, d time.Duration, latency time.Duration) sample {
	res := loadtest.Result{Requests: requests, Duration: d}
	for range 100 {
		res.Latencies = append(res.Latencies, latency)
	}
	return sample{res: res}
}

func TestCompareMarkdown(t *testing.T) {
	peer := summarise([]sample{phaseSample(10_000, 10*time.Second, 2*time.Millisecond)})    // 1,000/s
	ours := summarise([]sample{phaseSample(8_000, 10*time.Second, 3*time.Millisecond)})     // 800/s
	stubbed := summarise([]sample{phaseSample(15_000, 10*time.Second, 1*time.Millisecond)}) // 1,500/s
	o := compareOptions{peerName: "the peer", rounds: 1, duration: 10 * time.Second}
	for _, tc := range []struct {
		name    string
		stubbed *summary
		want    []string
		absent  []string
	}{
		{
			name:   "two targets",
			want:   []string{"| concurrency | the peer | this service | ratio |", "| 32 | 1000 req/s", "**0.80×** | 1.50 |"},
			absent: []string{stubbedLabel, "Diagnostic only"},
		},
		{
			name:    "with the stubbed instance",
			stubbed: &stubbed,
			want: []string{
				"**0.80×** | 1.50 |",
				"Diagnostic only: its records are not in DynamoDB.",
				"| concurrency | the peer | " + stubbedLabel + " | ratio | p99 stubbed ÷ peer |",
				"| 32 | 1000 req/s (1000–1000), p50 2.00 ms, p99 2.00 ms | 1500 req/s (1500–1500), p50 1.00 ms, p99 1.00 ms | **1.50×** | 0.50 |",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := compareReport{o: o, rows: []compareRow{{c: 32, peer: peer, ours: ours, stubbed: tc.stubbed}}}
			assertMarkdown(t, rep, tc.want, tc.absent)
			var text bytes.Buffer
			rep.text(&text)
			assert.Equal(t, tc.stubbed != nil, strings.Contains(text.String(), "events table stubbed: 1500 req/s"), text.String())
		})
	}
}

// assertMarkdown renders rep as Markdown and checks that it holds every
// want and none of absent.
func assertMarkdown(t *testing.T, rep compareReport, want, absent []string) {
	t.Helper()
	var md bytes.Buffer
	rep.markdownTo(&md)
	for _, w := range want {
		assert.Contains(t, md.String(), w)
	}
	for _, a := range absent {
		assert.NotContains(t, md.String(), a)
	}
}
