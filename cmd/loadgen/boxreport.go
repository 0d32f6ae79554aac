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
