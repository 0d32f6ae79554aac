package main

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/loadtest"
)

// summary is the medians of one target at one concurrency over the rounds.
type summary struct {
	rate, minRate, maxRate float64
	sustained              float64       // median of the rates counting the drain
	drain                  time.Duration // median drain after the phase
	p50, p99               time.Duration
	errors                 int64
	cpuPerEvent            time.Duration // 0: unknown
	box                    loadtest.Box  // summed over the rounds
	events                 float64       // acknowledged over the rounds (requests answered without error)
}

func summarise(ss []sample) summary {
	var rates, sustained []float64
	var p50s, p99s, drains []time.Duration
	var s summary
	var cpu, n float64
	for _, x := range ss {
		rates = append(rates, x.res.Rate())
		sustained = append(sustained, x.sustained())
		drains = append(drains, x.drain)
		p50s = append(p50s, x.res.Quantile(.5))
		p99s = append(p99s, x.res.Quantile(.99))
		s.errors += x.res.Errors
		cpu += x.cpuSec
		s.box = addBox(s.box, x.box)
		n += float64(x.res.Requests)
	}
	sort.Float64s(rates)
	s.rate, s.minRate, s.maxRate = median(rates), rates[0], rates[len(rates)-1]
	s.p50, s.p99 = medianDuration(p50s), medianDuration(p99s)
	s.sustained, s.drain = median(sustained), medianDuration(drains)
	if cpu > 0 && n > 0 {
		s.cpuPerEvent = time.Duration(cpu / n * float64(time.Second))
	}
	s.events = n - float64(s.errors)
	return s
}

func median(v []float64) float64 {
	sort.Float64s(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func medianDuration(v []time.Duration) time.Duration {
	f := make([]float64, len(v))
	for i, d := range v {
		f[i] = float64(d)
	}
	return time.Duration(median(f))
}

type compareRow struct {
	c          int
	peer, ours summary
	stages     stages // this service's measured phases, all rounds
	// The stubbed instance (nil without -stubbed) and its stages.
	stubbed       *summary
	stubbedStages stages
}

// stubbedLabel names the third target in the report.
const stubbedLabel = "this service, events-table batches stubbed (diagnostic)"

type compareReport struct {
	o        compareOptions
	rows     []compareRow
	ceilings []ceiling
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 2, 64) + " ms"
}

func (r compareReport) cell(s summary) string {
	v := fmt.Sprintf("%.0f req/s (%.0f–%.0f), p50 %s, p99 %s", s.rate, s.minRate, s.maxRate, ms(s.p50), ms(s.p99))
	if s.errors > 0 {
		v += fmt.Sprintf(", **%d errors**", s.errors)
	}
	return v
}

func (r compareReport) text(w io.Writer) {
	fmt.Fprintf(w, "\nmedians of %d rounds of %s, same customer.updated stream (unique ids):\n", r.o.rounds, r.o.duration)
	for _, row := range r.rows {
		fmt.Fprintf(w, "c=%-3d %s: %s\n      this service: %s\n      ratio %.2f×, p99 %s vs %s; records in the table %s after the last answer (sustained ratio %.2f×)\n",
			row.c, r.o.peerName, r.cell(row.peer), r.cell(row.ours), row.ours.rate/row.peer.rate, ms(row.ours.p99), ms(row.peer.p99),
			ms(row.ours.drain), row.ours.sustained/row.peer.rate)
		if row.stubbed != nil {
			fmt.Fprintf(w, "      events table stubbed: %s\n      ratio %.2f×, p99 %s vs %s\n",
				r.cell(*row.stubbed), row.stubbed.rate/row.peer.rate, ms(row.stubbed.p99), ms(row.peer.p99))
		}
	}
}

// stubbed reports a run with the third target.
func (r compareReport) stubbed() bool { return len(r.rows) > 0 && r.rows[0].stubbed != nil }

func concurrencyHeads(rows []compareRow) []string {
	out := make([]string, len(rows))
	for i, row := range rows {
		out[i] = fmt.Sprintf("concurrency %d", row.c)
	}
	return out
}

func (r compareReport) markdownTo(w io.Writer) {
	fmt.Fprintf(w, "Medians of %d interleaved rounds of %s per target and concurrency (range of the rates in brackets).\n\n", r.o.rounds, r.o.duration)
	fmt.Fprintf(w, "| concurrency | %s | this service | ratio | p99 this service ÷ peer | every record in DynamoDB after the last answer | ratio counting that drain |\n| --- | --- | --- | --- | --- | --- | --- |\n", r.o.peerName)
	for _, row := range r.rows {
		fmt.Fprintf(w, "| %d | %s | %s | **%.2f×** | %.2f | %s | %.2f× |\n", row.c, r.cell(row.peer), r.cell(row.ours),
			row.ours.rate/row.peer.rate, float64(row.ours.p99)/float64(max(row.peer.p99, 1)), ms(row.ours.drain), row.ours.sustained/row.peer.rate)
	}
	if r.stubbed() {
		fmt.Fprintf(w, "\nThe same run's ceiling: a second instance of this service, same code and settings, whose events-table "+
			"`BatchWriteItem`, `BatchGetItem` and `TransactWriteItems` of puts a stub answers (`loadgen stub-table`), so DynamoDB Local's JVM does none of "+
			"that work on the machine's cores. Diagnostic only: its records are not in DynamoDB.\n\n")
		fmt.Fprintf(w, "| concurrency | %s | %s | ratio | p99 stubbed ÷ peer |\n| --- | --- | --- | --- | --- |\n", r.o.peerName, stubbedLabel)
		for _, row := range r.rows {
			fmt.Fprintf(w, "| %d | %s | %s | **%.2f×** | %.2f |\n", row.c, r.cell(row.peer), r.cell(*row.stubbed),
				row.stubbed.rate/row.peer.rate, float64(row.stubbed.p99)/float64(max(row.peer.p99, 1)))
		}
	}
	if r.rows[0].ours.cpuPerEvent > 0 || r.rows[0].peer.cpuPerEvent > 0 {
		head, rule := "", ""
		if r.stubbed() {
			head, rule = " | this service, events table stubbed", " --- |"
		}
		fmt.Fprintf(w, "\n| CPU per event (process only) | %s | this service%s |\n| --- | --- | --- |%s\n", r.o.peerName, head, rule)
		for _, row := range r.rows {
			fmt.Fprintf(w, "| concurrency %d | %d µs | %d µs", row.c, row.peer.cpuPerEvent.Microseconds(), row.ours.cpuPerEvent.Microseconds())
			if row.stubbed != nil {
				fmt.Fprintf(w, " | %d µs", row.stubbed.cpuPerEvent.Microseconds())
			}
			fmt.Fprintln(w, " |")
		}
	}
	r.machineTable(w)
	r.machinePerEventTable(w)
	r.goalTable(w)
	if len(r.rows) > 0 && r.rows[0].stages != nil {
		heads, columns := concurrencyHeads(r.rows), make([]stages, 0, 2*len(r.rows))
		for _, row := range r.rows {
			columns = append(columns, row.stages)
		}
		if r.stubbed() {
			for _, row := range r.rows {
				heads = append(heads, fmt.Sprintf("concurrency %d, events table stubbed", row.c))
				columns = append(columns, row.stubbedStages)
			}
		}
		fmt.Fprintf(w, "\n| where this service's time goes (means over its measured phases) | %s |\n| --- |%s\n",
			strings.Join(heads, " | "), strings.Repeat(" --- |", len(heads)))
		line := func(name string, v func(st stages) string) {
			cells := make([]string, len(columns))
			for i, st := range columns {
				cells[i] = v(st)
			}
			fmt.Fprintf(w, "| %s | %s |\n", name, strings.Join(cells, " | "))
		}
		line("events per group-commit batch", func(st stages) string { return fmt.Sprintf("%.1f", st.mean(batchSum, batchCount)) })
		line("batch's Postgres commit (the answer waits for it)", func(st stages) string {
			return ms(time.Duration(st.mean(commitSum, commitCount) * float64(time.Second)))
		})
		line("batches whose Postgres commit took over 1 ms / 2.5 ms", func(st stages) string {
			n := st[commitCount]
			if n == 0 {
				return "–"
			}
			over := func(le string) float64 {
				return 100 * (n - st[`stripe_payments_ingest_stage_seconds_bucket{stage="commit",le="`+le+`"}`]) / n
			}
			return fmt.Sprintf("%.1f %% / %.1f %%", over("0.001"), over("0.0025"))
		})
		line("synchronous events-table work of a batch (redeliveries, failures; without write-behind: every batch)", func(st stages) string {
			return fmt.Sprintf("%s × %.0f", ms(time.Duration(st.mean(recordSum, recordCount)*float64(time.Second))), st[recordCount])
		})
		line("write-behind batch (conditional TransactWriteItems, or BatchGetItem + BatchWriteItem; + delete)", func(st stages) string {
			return fmt.Sprintf("%s, %.1f records", ms(time.Duration(st.mean(writeSum, writeCount)*float64(time.Second))), st.mean(writtenOK, writeCount))
		})
		line("DynamoDB requests per event", func(st stages) string { return fmt.Sprintf("%.3f", st.mean(dynamoPrefix, "events")) })
	}
	if len(r.ceilings) > 0 {
		fmt.Fprintf(w, "\n| ceiling, same run (%s each) | rate |\n| --- | --- |\n", r.o.ceilingDuration)
		for _, c := range r.ceilings {
			fmt.Fprintf(w, "| %s | %s |\n", c.what, c)
		}
	}
}
