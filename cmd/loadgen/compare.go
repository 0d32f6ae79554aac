package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/google/uuid"

	"github.com/stripe-payments/stripe-payments/internal/dynamo"
	"github.com/stripe-payments/stripe-payments/internal/loadtest"
	"github.com/stripe-payments/stripe-payments/internal/tracking"
)

// compareOptions configure `loadgen compare`: the same signed
// customer.updated stream (unique ids) sent to this service and to a peer
// ingester, at each concurrency, in interleaved rounds.
type compareOptions struct {
	ours, peer             string
	oursSecret, peerSecret string
	peerName               string
	concurrency            []int
	rounds                 int
	duration, warmup       time.Duration
	oursPID, peerPID       int
	dynamoPID, postgresPID int
	ceilings               bool
	ceilingDuration        time.Duration
	databaseURL            string
	dynamoEndpoint, region string
	markdown               string
	pprof, profileDir      string
}

// sample is one measured phase of one target.
type sample struct {
	res    loadtest.Result
	cpuSec float64      // CPU seconds of the target's process during the phase (0: unknown)
	box    loadtest.Box // the machine's CPU from the phase's start until its records were written
	// drain is how long after the phase's last answer the target's
	// write-behind backlog (stripe_payments_event_records_backlog) took to
	// reach zero: every acknowledged record in the events table.
	drain time.Duration
}

// sustained is the rate counting the drain: events per second until every
// acknowledged event was in the events table.
func (s sample) sustained() float64 {
	return float64(s.res.Requests) / (s.res.Duration + s.drain).Seconds()
}

// stages accumulates, over this service's measured phases, the deltas of
// its per-stage metrics: where an event's time goes.
type stages map[string]float64

func (st stages) add(before, after map[string]float64) {
	for k, v := range after {
		st[k] += v - before[k]
	}
}

func (st stages) mean(sum, count string) float64 {
	if st[count] == 0 {
		return 0
	}
	return st[sum] / st[count]
}

// Series of this service's stage metrics (internal/metrics/records.go).
const (
	commitSum    = `stripe_payments_ingest_stage_seconds_sum{stage="commit"}`
	commitCount  = `stripe_payments_ingest_stage_seconds_count{stage="commit"}`
	recordSum    = `stripe_payments_ingest_stage_seconds_sum{stage="record"}`
	recordCount  = `stripe_payments_ingest_stage_seconds_count{stage="record"}`
	batchSum     = `stripe_payments_ingest_batch_events_sum`
	batchCount   = `stripe_payments_ingest_batch_events_count`
	writeSum     = `stripe_payments_event_records_write_seconds_sum`
	writeCount   = `stripe_payments_event_records_write_seconds_count`
	writtenOK    = `stripe_payments_event_records_written_total{result="ok"}`
	dynamoPrefix = `stripe_payments_dynamodb_requests_total`
)

// series reads every sample of a Prometheus text endpoint, by series.
func series(ctx context.Context, url string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] += v
			if strings.HasPrefix(line, dynamoPrefix) {
				out[dynamoPrefix] += v
			}
		}
	}
	return out, sc.Err()
}

// backlogMetric is this service's write-behind backlog gauge.
const backlogMetric = "stripe_payments_event_records_backlog"

func runCompare(ctx context.Context, args []string, out io.Writer) error {
	var o compareOptions
	fs := flag.NewFlagSet("loadgen compare", flag.ContinueOnError)
	fs.StringVar(&o.ours, "ours", "http://127.0.0.1:8080/webhooks/stripe", "this service's webhook URL (loopback only)")
	fs.StringVar(&o.oursSecret, "ours-secret", os.Getenv("STRIPE_WEBHOOK_SECRET"), "this service's endpoint secret")
	fs.StringVar(&o.peer, "peer", "", "the peer's webhook URL (loopback only)")
	fs.StringVar(&o.peerSecret, "peer-secret", "", "the peer's endpoint secret")
	fs.StringVar(&o.peerName, "peer-name", "peer", "the peer's name in the report")
	conc := fs.String("c", "1,32", "comma-separated concurrencies")
	fs.IntVar(&o.rounds, "rounds", 3, "interleaved rounds")
	fs.DurationVar(&o.duration, "d", 10*time.Second, "duration of each measured phase")
	fs.DurationVar(&o.warmup, "warmup", 3*time.Second, "unmeasured warm-up of each target at each concurrency, before the first round")
	fs.IntVar(&o.oursPID, "ours-pid", 0, "this service's pid, for CPU per event (Linux /proc)")
	fs.IntVar(&o.peerPID, "peer-pid", 0, "the peer's pid, for CPU per event")
	fs.IntVar(&o.dynamoPID, "dynamodb-pid", 0, "DynamoDB Local's pid, for where the machine's CPU goes in each phase")
	fs.IntVar(&o.postgresPID, "postgres-pid", 0, "the Postgres postmaster's pid (its backends count with it), for where the machine's CPU goes")
	fs.BoolVar(&o.ceilings, "ceilings", true, "also measure the storage ceilings (durable Postgres commit, DynamoDB batch write and put) in this run")
	fs.DurationVar(&o.ceilingDuration, "ceiling-d", 5*time.Second, "duration of each ceiling measure")
	fs.StringVar(&o.databaseURL, "database-url", os.Getenv("DATABASE_URL"), "Postgres of the ceilings (the one both services use)")
	fs.StringVar(&o.dynamoEndpoint, "dynamodb-endpoint", os.Getenv("DYNAMODB_ENDPOINT"), "DynamoDB of the ceilings")
	fs.StringVar(&o.region, "region", envOr("AWS_REGION", "us-east-1"), "AWS region")
	fs.StringVar(&o.markdown, "markdown", "", "also write the report as Markdown to this file")
	fs.StringVar(&o.pprof, "pprof", "", "this service's pprof base URL (PPROF_ADDR): a CPU profile of its first measured phase at each concurrency")
	fs.StringVar(&o.profileDir, "profile-dir", ".", "where the CPU profiles go (cpu-c<concurrency>.pprof)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, s := range strings.Split(*conc, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || c < 1 {
			return fmt.Errorf("-c: %q is not a positive integer", s)
		}
		o.concurrency = append(o.concurrency, c)
	}
	if o.peer == "" || o.oursSecret == "" || o.peerSecret == "" || o.rounds < 1 {
		return errors.New("-peer, -ours-secret, -peer-secret and -rounds ≥ 1 are required")
	}
	for _, t := range []string{o.ours, o.peer} {
		if err := loopback(t); err != nil {
			return err
		}
	}

	var ceilings []ceiling
	if o.ceilings {
		var err error
		if ceilings, err = measureCeilings(ctx, o, out); err != nil {
			return err
		}
	}

	maxConc := 0
	for _, c := range o.concurrency {
		maxConc = max(maxConc, c)
	}
	client := func() *http.Client {
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: maxConc * 2}}
	}
	targets := [2]struct {
		name string
		hook loadtest.Webhook
		pid  int
	}{
		{o.peerName, loadtest.Webhook{URL: o.peer, Secret: o.peerSecret, Client: client()}, o.peerPID},
		{"this service", loadtest.Webhook{URL: o.ours, Secret: o.oursSecret, Client: client()}, o.oursPID},
	}
	ou, _ := url.Parse(o.ours)
	metricsURL := ou.Scheme + "://" + ou.Host + "/metrics"
	profiledAt := map[int]bool{}
	stageStats := map[int]stages{}
	phase := func(t int, c int, d time.Duration, label string) (sample, error) {
		send := func(ctx context.Context, _ int, _ int64) error {
			return targets[t].hook.Post(ctx, loadtest.CustomerUpdated(time.Now()))
		}
		roots := map[string]int{"target": targets[t].pid, "DynamoDB Local": o.dynamoPID, "Postgres": o.postgresPID, "load generator": os.Getpid()}
		boxBefore, err := loadtest.ReadBox(roots)
		if err != nil {
			return sample{}, err
		}
		var before loadtest.ProcStats
		if targets[t].pid > 0 {
			var err error
			if before, err = loadtest.ReadProc(targets[t].pid); err != nil {
				return sample{}, err
			}
		}
		var profiled chan error
		if t == 1 && o.pprof != "" && !profiledAt[c] && d == o.duration {
			profiledAt[c] = true
			profiled = make(chan error, 1)
			go func() {
				profiled <- fetchProfile(ctx, o.pprof, max(d-time.Second, time.Second), filepath.Join(o.profileDir, fmt.Sprintf("cpu-c%d.pprof", c)))
			}()
		}
		var metricsBefore map[string]float64
		if t == 1 && d == o.duration {
			var err error
			if metricsBefore, err = series(ctx, metricsURL); err != nil {
				return sample{}, err
			}
		}
		res := loadtest.Run(ctx, label, c, d, 0, send)
		if profiled != nil {
			if err := <-profiled; err != nil {
				return sample{}, err
			}
		}
		s := sample{res: res}
		if t == 1 {
			var err error
			if s.drain, err = waitDrained(ctx, metricsURL); err != nil {
				return sample{}, err
			}
			if metricsBefore != nil {
				after, err := series(ctx, metricsURL)
				if err != nil {
					return sample{}, err
				}
				if stageStats[c] == nil {
					stageStats[c] = stages{}
				}
				stageStats[c].add(metricsBefore, after)
				stageStats[c]["events"] += float64(res.Requests)
			}
		}
		if targets[t].pid > 0 {
			after, err := loadtest.ReadProc(targets[t].pid)
			if err != nil {
				return sample{}, err
			}
			s.cpuSec = (after.CPU - before.CPU).Seconds()
		}
		boxAfter, err := loadtest.ReadBox(roots)
		if err != nil {
			return sample{}, err
		}
		s.box = boxBefore.Sub(boxAfter)
		return s, ctx.Err()
	}

	for _, c := range o.concurrency {
		for t := range targets {
			if _, err := phase(t, c, o.warmup, "warm-up"); err != nil {
				return err
			}
		}
	}
	// samples[target][concurrency index] over the rounds. Each round runs
	// every concurrency on both targets, alternating which goes first, so a
	// slow minute of the shared machine hits both.
	var samples [2][][]sample
	for t := range samples {
		samples[t] = make([][]sample, len(o.concurrency))
	}
	for r := range o.rounds {
		for ci, c := range o.concurrency {
			order := []int{0, 1}
			if (r+ci)%2 == 1 {
				order = []int{1, 0}
			}
			for _, t := range order {
				s, err := phase(t, c, o.duration, fmt.Sprintf("r%d %s", r+1, targets[t].name))
				if err != nil {
					return err
				}
				fmt.Fprintln(out, s.res)
				samples[t][ci] = append(samples[t][ci], s)
			}
		}
	}

	rep := compareReport{o: o, ceilings: ceilings}
	for ci, c := range o.concurrency {
		rep.rows = append(rep.rows, compareRow{c: c, peer: summarise(samples[0][ci]), ours: summarise(samples[1][ci]), stages: stageStats[c]})
	}
	rep.text(out)
	if o.markdown != "" {
		f, err := os.Create(o.markdown)
		if err != nil {
			return err
		}
		defer f.Close()
		rep.markdownTo(f)
	}
	return nil
}

// waitDrained polls the backlog gauge until it is zero (at most a minute);
// zero at once when the service has no write-behind.
func waitDrained(ctx context.Context, metricsURL string) (time.Duration, error) {
	start := time.Now()
	for {
		n, err := scrape(ctx, metricsURL, backlogMetric)
		if err != nil {
			return 0, err
		}
		if n == 0 {
			return time.Since(start), nil
		}
		if time.Since(start) > time.Minute {
			return 0, fmt.Errorf("%s still %v after a minute", backlogMetric, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// fetchProfile saves a CPU profile of d from a net/http/pprof endpoint.
func fetchProfile(ctx context.Context, base string, d time.Duration, path string) error {
	if err := loopback(base); err != nil {
		return err
	}
	url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", strings.TrimRight(base, "/"), int(d.Seconds()))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("profile: %s answered %d", url, resp.StatusCode)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("profile: %w", err)
	}
	return f.Close()
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func loopback(target string) error {
	u, err := url.Parse(target)
	if err != nil {
		return fmt.Errorf("target %q: %w", target, err)
	}
	if h := u.Hostname(); h != "127.0.0.1" && h != "localhost" && h != "::1" {
		return fmt.Errorf("target %q must be on loopback", target)
	}
	return nil
}

// summary is the medians of one target at one concurrency over the rounds.
type summary struct {
	rate, minRate, maxRate float64
	sustained              float64       // median of the rates counting the drain
	drain                  time.Duration // median drain after the phase
	p50, p99               time.Duration
	errors                 int64
	cpuPerEvent            time.Duration // 0: unknown
	box                    loadtest.Box  // summed over the rounds
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

// ceiling is one storage limit measured in the same run.
type ceiling struct {
	what string
	res  loadtest.Result
	per  int // items per operation
}

func (c ceiling) String() string {
	return fmt.Sprintf("%.0f/s (p50 %s, p99 %s)", c.res.Rate()*float64(c.per), ms(c.res.Quantile(.5)), ms(c.res.Quantile(.99)))
}

// measureCeilings measures, on the benchmark's own Postgres and DynamoDB:
// a durable single-insert commit at concurrency 1 and 32 (the floor of
// acknowledging one event, which both services pay), and DynamoDB Local's
// batch-write rate (25 items per request, 8 writers) and conditional-put
// rate and latency.
func measureCeilings(ctx context.Context, o compareOptions, out io.Writer) ([]ceiling, error) {
	if o.databaseURL == "" || o.dynamoEndpoint == "" {
		return nil, errors.New("ceilings need -database-url and -dynamodb-endpoint (or turn them off with -ceilings=false)")
	}
	pool, err := tracking.Connect(ctx, o.databaseURL)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	pgTable := "loadgen_ceiling_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	if _, err := pool.Exec(ctx, "CREATE TABLE "+pgTable+" (id text PRIMARY KEY, at timestamptz NOT NULL DEFAULT now())"); err != nil {
		return nil, err
	}
	defer pool.Exec(context.WithoutCancel(ctx), "DROP TABLE "+pgTable)
	client, err := dynamo.NewClient(ctx, o.region, o.dynamoEndpoint)
	if err != nil {
		return nil, err
	}
	ddbTable := "loadgen-ceiling-" + uuid.NewString()[:8]
	if err := dynamo.EnsureTables(ctx, client, dynamo.EventsTable(ddbTable)); err != nil {
		return nil, err
	}
	defer client.DeleteTable(context.WithoutCancel(ctx), &dynamodb.DeleteTableInput{TableName: aws.String(ddbTable)})

	d := o.ceilingDuration
	var cs []ceiling
	add := func(what string, per int, r loadtest.Result) {
		c := ceiling{what: what, res: r, per: per}
		fmt.Fprintf(out, "ceiling: %-52s %s, errors=%d\n", what, c, r.Errors)
		cs = append(cs, c)
	}
	loadtest.PostgresTx(ctx, pool, pgTable, 8, time.Second)
	add("durable Postgres commit (1 insert), 1 at a time", 1, loadtest.PostgresTx(ctx, pool, pgTable, 1, d))
	add("durable Postgres commit (1 insert), 32 concurrent", 1, loadtest.PostgresTx(ctx, pool, pgTable, 32, d))
	add("DynamoDB conditional put, 1 at a time", 1, loadtest.DynamoPut(ctx, client, ddbTable, 1, d))
	// Items shaped like a customer.updated record: no subscription, so two GSIs.
	loadtest.DynamoBatchWrite(ctx, client, ddbTable, 8, time.Second, false)
	add("DynamoDB BatchWriteItem×25, 8 writers (items, 2 GSIs)", 25, loadtest.DynamoBatchWrite(ctx, client, ddbTable, 8, d, false))
	return cs, ctx.Err()
}

type compareRow struct {
	c          int
	peer, ours summary
	stages     stages // this service's measured phases, all rounds
}

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
	}
}

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
	if r.rows[0].ours.cpuPerEvent > 0 || r.rows[0].peer.cpuPerEvent > 0 {
		fmt.Fprintf(w, "\n| CPU per event (process only) | %s | this service |\n| --- | --- | --- |\n", r.o.peerName)
		for _, row := range r.rows {
			fmt.Fprintf(w, "| concurrency %d | %d µs | %d µs |\n", row.c, row.peer.cpuPerEvent.Microseconds(), row.ours.cpuPerEvent.Microseconds())
		}
	}
	r.machineTable(w)
	if len(r.rows) > 0 && r.rows[0].stages != nil {
		fmt.Fprintf(w, "\n| where this service's time goes (means over its measured phases) | %s |\n| --- |%s\n",
			strings.Join(concurrencyHeads(r.rows), " | "), strings.Repeat(" --- |", len(r.rows)))
		line := func(name string, v func(st stages) string) {
			cells := make([]string, len(r.rows))
			for i, row := range r.rows {
				cells[i] = v(row.stages)
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
		line("write-behind batch (BatchGetItem + BatchWriteItem + delete)", func(st stages) string {
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
