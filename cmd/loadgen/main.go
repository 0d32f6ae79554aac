// Command loadgen sends signed, realistic Stripe events to a running
// stripe-payments at a fixed concurrency and reports throughput, latency
// quantiles, errors, the service's CPU and memory, and DynamoDB requests per
// event — next to the raw DynamoDB conditional-put and Postgres transaction
// rates measured in the same run at the same concurrency. Loopback only.
//
//	loadgen [flags]              the mixed-event load test of `make bench`
//	loadgen compare [flags]      this service against a peer ingester, side by side (`make bench-peer`)
//	loadgen drop-tables NAME...  delete a benchmark's DynamoDB tables (DynamoDB Local keeps them in memory)
//	loadgen stub-table [flags]   a diagnostic proxy answering one table's batch reads and writes (the stubbed target of `make bench-peer`)
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
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/google/uuid"

	"github.com/stripe-payments/stripe-payments/internal/config"
	"github.com/stripe-payments/stripe-payments/internal/dynamo"
	"github.com/stripe-payments/stripe-payments/internal/loadtest"
	"github.com/stripe-payments/stripe-payments/internal/postgres"
)

func main() {
	// SIGTERM too: bench-peer.sh stops the stub-table with it, and the stub
	// then logs how many requests it answered.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return // the usage went to stdout: asking for help is not a failure
		}
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

type options struct {
	target      string
	metrics     string // this service's /metrics, on its admin listener
	secret      string
	concurrency int
	duration    time.Duration
	warmup      time.Duration
	duplicates  float64
	pid         int
	baselines   bool
	markdown    string
}

func run(ctx context.Context, args []string, out io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "compare":
			return runCompare(ctx, args[1:], out)
		case "drop-tables":
			return dropTables(ctx, args[1:])
		case "stub-table":
			return stubTable(ctx, args[1:])
		}
	}
	var o options
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.target, "target", "http://127.0.0.1:8080/webhooks/stripe", "webhook URL (loopback only)")
	fs.StringVar(&o.metrics, "metrics", "http://127.0.0.1:8081/metrics", "this service's /metrics URL, on its admin listener (ADMIN_LISTEN_ADDR; loopback only)")
	fs.StringVar(&o.secret, "secret", "", "endpoint secret (default: the first of STRIPE_WEBHOOK_SECRET)")
	fs.IntVar(&o.concurrency, "c", 32, "concurrent senders")
	fs.DurationVar(&o.duration, "d", 20*time.Second, "duration of each measured phase")
	fs.DurationVar(&o.warmup, "warmup", 3*time.Second, "unmeasured warm-up")
	fs.Float64Var(&o.duplicates, "dup", 0.05, "share of redeliveries of events already sent")
	fs.IntVar(&o.pid, "pid", 0, "service pid, for CPU and RSS (Linux /proc)")
	fs.BoolVar(&o.baselines, "baselines", true, "measure raw DynamoDB and Postgres rates first (uses DYNAMODB_ENDPOINT, DATABASE_URL)")
	fs.StringVar(&o.markdown, "markdown", "", "also write the report as a Markdown table to this file")
	// Flags first: -h needs no settings.
	if err := fs.Parse(args); err != nil {
		return err
	}
	// The secret signs the load; the databases serve the baselines.
	cfg, err := config.FromEnvFor(config.Uses{WebhookSecret: true, Database: true})
	if err != nil {
		return err
	}
	if o.secret == "" {
		o.secret = cfg.WebhookSecrets[0]
	}
	u, err := url.Parse(o.target)
	if err != nil {
		return fmt.Errorf("target: %w", err)
	}
	if h := u.Hostname(); h != "127.0.0.1" && h != "localhost" && h != "::1" {
		return errors.New("target must be on loopback")
	}

	var dynamoBase, pgBase loadtest.Result
	if o.baselines {
		if dynamoBase, err = dynamoBaseline(ctx, cfg, o); err != nil {
			return err
		}
		fmt.Fprintln(out, dynamoBase)
		if pgBase, err = postgresBaseline(ctx, cfg, o); err != nil {
			return err
		}
		fmt.Fprintln(out, pgBase)
	}

	hook := loadtest.Webhook{URL: o.target, Secret: o.secret, Client: &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: o.concurrency * 2},
	}}
	mix := loadtest.NewMix(o.duplicates, 42)
	send := func(ctx context.Context, _ int, _ int64) error { return hook.Post(ctx, mix.Next(time.Now())) }
	loadtest.Run(ctx, "warm-up", o.concurrency, o.warmup, 0, send)

	metricsURL := o.metrics
	if mu, err := url.Parse(metricsURL); err != nil || (mu.Hostname() != "127.0.0.1" && mu.Hostname() != "localhost" && mu.Hostname() != "::1") {
		return fmt.Errorf("-metrics %q: a loopback URL", metricsURL)
	}
	ddbBefore, err := scrape(ctx, metricsURL, "stripe_payments_dynamodb_requests_total")
	if err != nil {
		return err
	}
	var before loadtest.ProcStats
	peak := int64(0)
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	if o.pid > 0 {
		if before, err = loadtest.ReadProc(o.pid); err != nil {
			return err
		}
		go func() {
			defer close(sampled)
			t := time.NewTicker(100 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-stopSampling:
					return
				case <-t.C:
					if s, err := loadtest.ReadProc(o.pid); err == nil && s.RSS > peak {
						peak = s.RSS
					}
				}
			}
		}()
	} else {
		close(sampled)
	}
	ingest := loadtest.Run(ctx, "ingest (webhook → processed)", o.concurrency, o.duration, 0, send)
	close(stopSampling)
	<-sampled
	fmt.Fprintln(out, ingest)
	ddbAfter, err := scrape(ctx, metricsURL, "stripe_payments_dynamodb_requests_total")
	if err != nil {
		return err
	}

	r := report{o: o, ingest: ingest, dynamo: dynamoBase, pg: pgBase,
		ddbPerEvent: (ddbAfter - ddbBefore) / float64(max(ingest.Requests, 1))}
	if o.pid > 0 {
		after, err := loadtest.ReadProc(o.pid)
		if err != nil {
			return err
		}
		r.cpuCores = (after.CPU - before.CPU).Seconds() / ingest.Duration.Seconds()
		r.peakRSS = peak
	}
	r.print(out)
	if o.markdown != "" {
		f, err := os.Create(o.markdown)
		if err != nil {
			return err
		}
		defer f.Close()
		r.markdown(f)
	}
	return nil
}

func dynamoBaseline(ctx context.Context, cfg config.Config, o options) (loadtest.Result, error) {
	client, err := dynamo.NewClient(ctx, cfg.AWSRegion, cfg.DynamoEndpoint)
	if err != nil {
		return loadtest.Result{}, err
	}
	table := "loadgen-baseline-" + uuid.NewString()[:8]
	if err := dynamo.EnsureTables(ctx, client, dynamo.EventsTable(table)); err != nil {
		return loadtest.Result{}, err
	}
	defer client.DeleteTable(context.WithoutCancel(ctx), &dynamodb.DeleteTableInput{TableName: aws.String(table)})
	loadtest.DynamoPut(ctx, client, table, o.concurrency, o.warmup)
	return loadtest.DynamoPut(ctx, client, table, o.concurrency, o.duration), nil
}

func postgresBaseline(ctx context.Context, cfg config.Config, o options) (loadtest.Result, error) {
	pool, err := postgres.Connect(ctx, cfg.DatabaseURL)
	if err != nil {
		return loadtest.Result{}, err
	}
	defer pool.Close()
	table := "loadgen_baseline_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	if _, err := pool.Exec(ctx, "CREATE TABLE "+table+" (id text PRIMARY KEY, at timestamptz NOT NULL DEFAULT now())"); err != nil {
		return loadtest.Result{}, err
	}
	defer pool.Exec(context.WithoutCancel(ctx), "DROP TABLE "+table)
	loadtest.PostgresTx(ctx, pool, table, o.concurrency, o.warmup)
	return loadtest.PostgresTx(ctx, pool, table, o.concurrency, o.duration), nil
}

// scrape sums every sample of a counter on a Prometheus text endpoint.
func scrape(ctx context.Context, url, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err == nil {
			sum += v
		}
	}
	return sum, sc.Err()
}

type report struct {
	o           options
	ingest      loadtest.Result
	dynamo, pg  loadtest.Result
	ddbPerEvent float64
	cpuCores    float64
	peakRSS     int64
}

func ratio(a, b loadtest.Result) string {
	if b.Requests == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f×", a.Rate()/b.Rate())
}

func (r report) print(w io.Writer) {
	fmt.Fprintf(w, "ingest / raw DynamoDB put: %s   ingest / raw Postgres tx: %s\n", ratio(r.ingest, r.dynamo), ratio(r.ingest, r.pg))
	fmt.Fprintf(w, "DynamoDB requests per event: %.3f   service CPU: %.2f cores   service peak RSS: %.1f MiB\n",
		r.ddbPerEvent, r.cpuCores, float64(r.peakRSS)/(1<<20))
}

func (r report) markdown(w io.Writer) {
	fmt.Fprintf(w, "| measure (concurrency %d, %s each) | result |\n| --- | --- |\n", r.o.concurrency, r.o.duration)
	row := func(name, v string) { fmt.Fprintf(w, "| %s | %s |\n", name, v) }
	if r.dynamo.Requests > 0 {
		row("raw DynamoDB Local conditional put", fmt.Sprintf("%.0f/s, p99 %s", r.dynamo.Rate(), r.dynamo.Quantile(.99).Round(100*time.Microsecond)))
		row("raw Postgres single-insert transaction", fmt.Sprintf("%.0f/s, p99 %s", r.pg.Rate(), r.pg.Quantile(.99).Round(100*time.Microsecond)))
	}
	row("ingest (signed webhook → recorded and processed)", fmt.Sprintf("%.0f/s, %d errors", r.ingest.Rate(), r.ingest.Errors))
	row("ingest latency p50 / p95 / p99", fmt.Sprintf("%s / %s / %s", r.ingest.Quantile(.5).Round(100*time.Microsecond),
		r.ingest.Quantile(.95).Round(100*time.Microsecond), r.ingest.Quantile(.99).Round(100*time.Microsecond)))
	row("**ingest ÷ raw DynamoDB put**", "**"+ratio(r.ingest, r.dynamo)+"**")
	row("ingest ÷ raw Postgres transaction", ratio(r.ingest, r.pg))
	row("DynamoDB requests per event", fmt.Sprintf("%.3f", r.ddbPerEvent))
	if r.o.pid > 0 {
		row("service CPU", fmt.Sprintf("%.2f cores", r.cpuCores))
		row("service peak RSS (sampled every 100 ms)", fmt.Sprintf("%.1f MiB", float64(r.peakRSS)/(1<<20)))
	}
}

// dropTables deletes DynamoDB tables (a benchmark's own, on DYNAMODB_ENDPOINT).
func dropTables(ctx context.Context, names []string) error {
	endpoint := os.Getenv("DYNAMODB_ENDPOINT")
	if endpoint == "" || loopback(endpoint) != nil {
		return errors.New("drop-tables: DYNAMODB_ENDPOINT must be a loopback DynamoDB Local")
	}
	client, err := dynamo.NewClient(ctx, envOr("AWS_REGION", "us-east-1"), endpoint)
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range names {
		if _, err := client.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(n)}); err != nil {
			errs = append(errs, fmt.Errorf("delete table %s: %w", n, err))
		}
	}
	return errors.Join(errs...)
}

// stubTable serves loadtest.TableStub on loopback until ctx ends.
func stubTable(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("loadgen stub-table", flag.ContinueOnError)
	table := fs.String("table", "", "the table whose BatchWriteItem, BatchGetItem and TransactWriteItems of puts are answered here")
	upstream := fs.String("upstream", os.Getenv("DYNAMODB_ENDPOINT"), "DynamoDB Local, for everything else (loopback only)")
	listen := fs.String("listen", "127.0.0.1:18284", "address to serve on (loopback only)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *table == "" {
		return errors.New("stub-table: -table is required")
	}
	if err := loopback(*upstream); err != nil {
		return fmt.Errorf("stub-table: upstream: %w", err)
	}
	if err := loopback("http://" + *listen); err != nil {
		return fmt.Errorf("stub-table: listen: %w", err)
	}
	u, err := url.Parse(*upstream)
	if err != nil {
		return fmt.Errorf("stub-table: upstream: %w", err)
	}
	stub := loadtest.NewTableStub(*table, u)
	srv := &http.Server{Addr: *listen, Handler: stub, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	fmt.Fprintf(os.Stderr, "stub-table: answering %s's batch reads and writes on %s; everything else goes to %s\n", *table, *listen, *upstream)
	err = srv.ListenAndServe()
	fmt.Fprintf(os.Stderr, "stub-table: answered %d requests itself\n", stub.Stubbed())
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("stub-table: %w", err)
}
