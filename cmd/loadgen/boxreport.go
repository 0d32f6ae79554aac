package main

import (
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/loadtest"
)

// addBox sums two samples of the machine.
func addBox(a, b loadtest.Box) loadtest.Box {
	sum := loadtest.Box{Busy: a.Busy + b.Busy, Total: a.Total + b.Total, Procs: map[string]time.Duration{}}
	for k, v := range a.Procs {
		sum.Procs[k] += v
	}
	for k, v := range b.Procs {
		sum.Procs[k] += v
	}
	return sum
}

// stubPart is the events-table stub's row (runs with -stub-pid).
const stubPart = "events-table stub"

// boxParts are the rows of the machine table, in order; "target" is the
// service under load in that phase.
var boxParts = []struct{ key, label string }{
	{"target", "the service under load"},
	{"Postgres", "Postgres (the cluster both use)"},
	{"DynamoDB Local", "DynamoDB Local (this service's events table)"},
	{"load generator", "the load generator"},
}

// machineTable says where the machine's cores went in each target's phases
// (from the phase's start until its records were in the table), as cores
// busy: a machine whose cores are all busy is the ceiling, whatever the
// service does, and the rows say who held them.
func (r compareReport) machineTable(w io.Writer) {
	if len(r.rows) == 0 || r.rows[0].ours.box.Total == 0 {
		return
	}
	ncpu := runtime.NumCPU()
	var heads []string
	var boxes []loadtest.Box
	for _, row := range r.rows {
		heads = append(heads, fmt.Sprintf("%s, c=%d", r.o.peerName, row.c), fmt.Sprintf("this service, c=%d", row.c))
		boxes = append(boxes, row.peer.box, row.ours.box)
		if row.stubbed != nil {
			heads = append(heads, fmt.Sprintf("this service, events table stubbed, c=%d", row.c))
			boxes = append(boxes, row.stubbed.box)
		}
	}
	parts := boxParts
	if r.o.stubPID > 0 {
		parts = append(parts[:len(parts):len(parts)], struct{ key, label string }{stubPart, "the events-table stub (loadgen stub-table)"})
	}
	fmt.Fprintf(w, "\n| cores busy during the phases (of %d; until every record was written) | %s |\n| --- |%s\n",
		ncpu, strings.Join(heads, " | "), strings.Repeat(" --- |", len(heads)))
	cores := func(b loadtest.Box, d time.Duration) string {
		wall := b.Total / time.Duration(ncpu)
		if wall <= 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f", d.Seconds()/wall.Seconds())
	}
	line := func(label string, v func(b loadtest.Box) string) {
		cells := make([]string, len(boxes))
		for i, b := range boxes {
			cells[i] = v(b)
		}
		fmt.Fprintf(w, "| %s | %s |\n", label, strings.Join(cells, " | "))
	}
	line("**the whole machine**", func(b loadtest.Box) string { return "**" + cores(b, b.Busy) + "**" })
	for _, p := range parts {
		line(p.label, func(b loadtest.Box) string { return cores(b, b.Procs[p.key]) })
	}
	line("everything else (kernel, other processes)", func(b loadtest.Box) string {
		rest := b.Busy
		for _, p := range parts {
			rest -= b.Procs[p.key]
		}
		return cores(b, max(rest, 0))
	})
}

// perEvent is the machine's busy time over s's phases, the named
// processes' taken out, per acknowledged event (0 when unknown).
func perEvent(s summary, without ...string) time.Duration {
	if s.events <= 0 || s.box.Total == 0 {
		return 0
	}
	busy := s.box.Busy
	for _, p := range without {
		busy -= s.box.Procs[p]
	}
	return time.Duration(float64(max(busy, 0)) / s.events)
}

// machinePerEventTable is the "machine CPU per acknowledged event" the
// throughput goal is judged by (BENCHMARKS.md):
// the machine's busy time (/proc/stat) from the phase's start until every
// record was written, the load generator's (and the events-table stub's)
// taken out, per event acknowledged: every process a service needs,
// DynamoDB Local included for this one, whatever the split between them.
// The kernel's work and any other tenant's stay in (the machine table's
// "everything else" row says how much).
func (r compareReport) machinePerEventTable(w io.Writer) {
	if len(r.rows) == 0 || r.rows[0].ours.box.Total == 0 {
		return
	}
	head, rule := "", ""
	if r.stubbed() {
		head, rule = " | this service, events table stubbed (its records not written)", " --- |"
	}
	fmt.Fprintf(w, "\n| machine CPU per acknowledged event (the machine's busy time but the load generator's, until every record was written) | %s | this service | ratio%s |\n| --- | --- | --- | --- |%s\n",
		r.o.peerName, head, rule)
	for _, row := range r.rows {
		peer, ours := perEvent(row.peer, "load generator"), perEvent(row.ours, "load generator")
		fmt.Fprintf(w, "| concurrency %d | %d µs | %d µs | %.2f×", row.c, peer.Microseconds(), ours.Microseconds(), float64(ours)/float64(max(peer, 1)))
		if row.stubbed != nil {
			fmt.Fprintf(w, " | %d µs", perEvent(*row.stubbed, "load generator", stubPart).Microseconds())
		}
		fmt.Fprintln(w, " |")
	}
}

// goalRatio is the throughput goal at the highest concurrency
// (BENCHMARKS.md): this service at 1.2× the peer, counting the drain.
const goalRatio = 1.2

// goalTable bounds, from this run's own figures, what the cores alone let
// this service reach at the highest concurrency: the stubbed instance's
// machine CPU per event is everything but DynamoDB Local's work (the load
// generator included: it shares the cores), and the ceilings measured
// DynamoDB Local's CPU per item for the write-behind's conditional
// transactions and for the cheapest write the table takes (an
// unconditional batch, which cannot keep a failure from being overwritten
// unread). The bound assumes every core busy and nothing else in the way:
// an estimate from the run's own figures, with two approximations named in
// the rows (DynamoDB Local's CPU per item is the ceiling's, measured with
// its writers in flight; the stubbed instance's CPU per event at its own
// rate). Where it is below the goal, the goal is out of reach on this
// machine unless DynamoDB Local's work per record falls.
func (r compareReport) goalTable(w io.Writer) {
	if len(r.rows) == 0 || !r.stubbed() {
		return
	}
	row := r.rows[len(r.rows)-1]
	var cond, uncond time.Duration
	for _, c := range r.ceilings {
		switch c.kind {
		case ceilingConditional:
			cond = c.dynamoPerItem
		case ceilingUnconditional:
			uncond = c.dynamoPerItem
		}
	}
	without := perEvent(*row.stubbed, stubPart)
	if cond == 0 || uncond == 0 || without == 0 || row.peer.rate <= 0 {
		return
	}
	ncpu := float64(r.o.cpus)
	if ncpu == 0 {
		ncpu = float64(runtime.NumCPU())
	}
	budget := time.Duration(ncpu * float64(time.Second) / (goalRatio * row.peer.rate))
	bound := func(d time.Duration) string {
		return fmt.Sprintf("%.0f/s, **%.2f×**", ncpu/(without+d).Seconds(), ncpu/(without+d).Seconds()/row.peer.rate)
	}
	us := func(d time.Duration) string { return fmt.Sprintf("%d µs", d.Microseconds()) }
	left := us(budget - without)
	if budget <= without {
		left = "none: out of reach even without DynamoDB Local"
	}
	fmt.Fprintf(w, "\n| the goal at concurrency %d (%.1f× the peer, counting the drain), from this run's figures | per event | the most the %d cores allow (estimate) |\n| --- | --- | --- |\n", row.c, goalRatio, int(ncpu))
	fmt.Fprintf(w, "| the machine's CPU the goal allows per event: %d cores ÷ (%.1f × %.0f/s) | %s | |\n", int(ncpu), goalRatio, row.peer.rate, us(budget))
	fmt.Fprintf(w, "| this service's machine CPU per event without DynamoDB Local's work (the stubbed instance at its own rate; the load generator included) | %s | |\n", us(without))
	fmt.Fprintf(w, "| what that leaves DynamoDB Local per record | %s | |\n", left)
	fmt.Fprintf(w, "| DynamoDB Local's CPU per record, conditional TransactWriteItems×100 (the write-behind's first records; the ceiling's, 4 writers) | %s | %s |\n", us(cond), bound(cond))
	fmt.Fprintf(w, "| DynamoDB Local's CPU per record, unconditional BatchWriteItem×25 (the cheapest write it takes; no condition; the ceiling's, 8 writers) | %s | %s |\n", us(uncond), bound(uncond))
	peer := perEvent(row.peer, "load generator")
	floor := perEvent(*row.stubbed, "load generator", stubPart) + uncond
	fmt.Fprintf(w, "| machine CPU per event, the load generator left out: the peer, against this service's floor (stubbed instance + the cheapest write) | %s against %s | |\n", us(peer), us(floor))
}
