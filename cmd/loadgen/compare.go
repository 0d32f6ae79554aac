package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/loadtest"
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
	// The optional third target: a second instance of this service whose
	// events-table batch calls a stub answers (loadgen stub-table), so
	// DynamoDB Local's CPU is off the machine: the ceiling it sets,
	// measured in the same run.
	stubbed, stubbedSecret string
	stubbedPID, stubPID    int
	// Where each instance of this service serves /metrics: its admin
	// listener (ADMIN_LISTEN_ADDR), not the webhook's.
	oursMetrics, stubbedMetrics string
	// cpus is the machine's core count for the goal table (0:
	// runtime.NumCPU; tests set it).
	cpus int
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
	fs.StringVar(&o.stubbed, "stubbed", "", "optional third target: a second instance of this service whose events-table batches a stub answers (diagnostic; loopback only)")
	fs.StringVar(&o.stubbedSecret, "stubbed-secret", "", "the stubbed instance's endpoint secret")
	fs.IntVar(&o.stubbedPID, "stubbed-pid", 0, "the stubbed instance's pid, for CPU per event")
	fs.StringVar(&o.oursMetrics, "ours-metrics", "http://127.0.0.1:8081/metrics", "this service's /metrics URL, on its admin listener (ADMIN_LISTEN_ADDR)")
	fs.StringVar(&o.stubbedMetrics, "stubbed-metrics", "", "the stubbed instance's /metrics URL, on its admin listener")
	fs.IntVar(&o.stubPID, "stub-pid", 0, "the events-table stub's pid (loadgen stub-table), for where the machine's CPU goes")
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
	if o.stubbed != "" && (o.stubbedSecret == "" || o.stubbedMetrics == "") {
		return errors.New("-stubbed needs -stubbed-secret and -stubbed-metrics")
	}
	for _, t := range []string{o.ours, o.peer, o.stubbed, o.oursMetrics, o.stubbedMetrics} {
		if t == "" {
			continue
		}
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
	targets := []target{
		{name: o.peerName, hook: loadtest.Webhook{URL: o.peer, Secret: o.peerSecret, Client: client()}, pid: o.peerPID},
		{name: "this service", hook: loadtest.Webhook{URL: o.ours, Secret: o.oursSecret, Client: client()}, pid: o.oursPID,
			metrics: o.oursMetrics, profiled: o.pprof != ""},
	}
	if o.stubbed != "" {
		targets = append(targets, target{name: "this service, events table stubbed", pid: o.stubbedPID, metrics: o.stubbedMetrics,
			hook: loadtest.Webhook{URL: o.stubbed, Secret: o.stubbedSecret, Client: client()}})
	}
	profiledAt := map[int]bool{}
	// stageStats[target][concurrency]: this service's per-stage metrics.
	stageStats := make([]map[int]stages, len(targets))
	phase := func(t int, c int, d time.Duration, label string) (sample, error) {
		send := func(ctx context.Context, _ int, _ int64) error {
			return targets[t].hook.Post(ctx, loadtest.CustomerUpdated(time.Now()))
		}
		roots := map[string]int{"target": targets[t].pid, "DynamoDB Local": o.dynamoPID, "Postgres": o.postgresPID, "load generator": os.Getpid()}
		if o.stubPID > 0 {
			roots[stubPart] = o.stubPID
		}
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
		if targets[t].profiled && !profiledAt[c] && d == o.duration {
			profiledAt[c] = true
			profiled = make(chan error, 1)
			go func() {
				profiled <- fetchProfile(ctx, o.pprof, max(d-time.Second, time.Second), filepath.Join(o.profileDir, fmt.Sprintf("cpu-c%d.pprof", c)))
			}()
		}
		var metricsBefore map[string]float64
		metricsURL := targets[t].metrics
		if metricsURL != "" && d == o.duration {
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
		if metricsURL != "" {
			var err error
			if s.drain, err = waitDrained(ctx, metricsURL); err != nil {
				return sample{}, err
			}
			if metricsBefore != nil {
				after, err := series(ctx, metricsURL)
				if err != nil {
					return sample{}, err
				}
				if stageStats[t] == nil {
					stageStats[t] = map[int]stages{}
				}
				if stageStats[t][c] == nil {
					stageStats[t][c] = stages{}
				}
				stageStats[t][c].add(metricsBefore, after)
				stageStats[t][c]["events"] += float64(res.Requests)
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
	// every concurrency on every target, rotating which goes first, so a
	// slow minute of the shared machine hits all of them.
	samples := make([][][]sample, len(targets))
	for t := range samples {
		samples[t] = make([][]sample, len(o.concurrency))
	}
	for r := range o.rounds {
		for ci, c := range o.concurrency {
			for _, t := range roundOrder(len(targets), r, ci) {
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
		row := compareRow{c: c, peer: summarise(samples[0][ci]), ours: summarise(samples[1][ci]), stages: stageStats[1][c]}
		if len(targets) > 2 {
			st := summarise(samples[2][ci])
			row.stubbed, row.stubbedStages = &st, stageStats[2][c]
		}
		rep.rows = append(rep.rows, row)
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

// target is one ingester under load.
type target struct {
	name     string
	hook     loadtest.Webhook
	pid      int
	metrics  string // this service's /metrics: drain and stage figures ("" for the peer)
	profiled bool   // a CPU profile of its first measured phase at each concurrency
}

// roundOrder is the order of n targets in round r at the ci-th concurrency:
// rotated by r+ci, so over the rounds each target goes first equally often
// (±1) and none always follows the same one's backlog.
func roundOrder(n, r, ci int) []int {
	order := make([]int, n)
	for i := range order {
		order[i] = (i + r + ci) % n
	}
	return order
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
