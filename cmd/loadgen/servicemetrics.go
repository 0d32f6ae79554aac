package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// What `loadgen compare` reads from this service's /metrics.

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
