package app_test

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// BenchmarkThinVsSnapshotIntake measures notifications accepted per second
// (answered 200) by the real server, thin against snapshot, at concurrency
// 1 and 32, in the same run (BENCHMARKS.md, issue 25). A snapshot event is
// answered once recorded and processed; a thin one once recorded and
// queued, its hydration (two Stripe calls to the fake, then the same
// processing) running behind the answer on the same machine.
//
//	go test -run '^$' -bench ThinVsSnapshot -benchtime 2000x ./internal/app/
func BenchmarkThinVsSnapshotIntake(b *testing.B) {
	fake := stripetest.New(b, stripetest.Options{})
	if os.Getenv("BENCH_NO_HYDRATION") != "" {
		fake.DelayV2(time.Hour)
	}
	a := startApp(b, nil, map[string]string{"STRIPE_API_BASE": fake.URL})
	url := a.Server.URL() + "/webhooks/stripe"
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	for _, c := range []int{1, 32} {
		for _, kind := range []string{"snapshot", "thin"} {
			b.Run(fmt.Sprintf("%s/c=%d", kind, c), func(b *testing.B) {
				payloads := make(chan []byte, b.N)
				for range b.N {
					snap := stripetest.Event{Fixture: "payment_intent.succeeded", Account: stripetest.Ptr(merchant)}
					snapID := stripetest.NewID()
					snap.ID = snapID
					raw := snap.Build(b)
					if kind == "snapshot" {
						payloads <- raw
						continue
					}
					fake.Add(merchant, raw)
					thin := stripetest.Thin{Fixture: "v1.payment_intent.succeeded", Context: stripetest.Ptr(merchant)}.Build(b)
					fake.AddV2(thin, snapID)
					payloads <- thin
				}
				close(payloads)
				b.SetParallelism(max(1, c/runtime.GOMAXPROCS(0)))
				start := time.Now()
				b.ResetTimer()
				send := func(p []byte) {
					req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(p))
					req.Header.Set("Stripe-Signature", stripetest.Sign(p, secret, time.Now()))
					resp, err := client.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						b.Errorf("status %d", resp.StatusCode)
					}
				}
				if c == 1 {
					for p := range payloads {
						send(p)
					}
				} else {
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							send(<-payloads)
						}
					})
				}
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "accepted/s")
			})
		}
	}
}
