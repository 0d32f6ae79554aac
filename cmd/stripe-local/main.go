// Command stripe-local is the local Stripe of `make run` (docs/design.md §3 "The
// embedded default for Stripe"; docs/local-stripe.md): a stateful, test-mode
// only simulation of the parts of Stripe's API the service uses, which sends
// signed webhooks to the service. It is a development tool: it is not part
// of the stripe-payments binary.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/config"
	"github.com/stripe-payments/stripe-payments/internal/localstripe"
)

const usage = `usage: stripe-local

The local Stripe: test mode only (any sk_test_ key; live keys refused).
It starts only in development mode (APP_ENV=development), on a loopback
address, and never with a live STRIPE_API_KEY in its environment.
Environment (all optional but APP_ENV):
  LOCAL_STRIPE_ADDR          listen address, loopback only           (127.0.0.1:8082)
  LOCAL_STRIPE_WEBHOOK_URL   where events are delivered              (http://$LISTEN_ADDR/webhooks/stripe)
  STRIPE_WEBHOOK_SECRET      signing secret (the first of a list)    (the service's dev secret)
  LOCAL_STRIPE_ACCOUNT       a connected account existing from start (acct_local_demo)
  LOCAL_STRIPE_ACH_DELAY     how long a bank debit stays processing  (20s)
  LOCAL_STRIPE_DROP_RATE     fraction of events never delivered      (0)
  LOCAL_STRIPE_RETRY_BASE    first retry pause, doubling per attempt (2s)
  LOCAL_STRIPE_MAX_ATTEMPTS  delivery attempts per event             (6)
  LOCAL_STRIPE_THIN_EVENTS   types a thin event destination asks for (none)
                             (v1.payment_intent.succeeded,…; v1.* all)
  LOCAL_STRIPE_THIN_AND_SNAPSHOT  true: deliver those types both ways (false)
  LOCAL_STRIPE_STATE         file keeping the state across restarts  (none: memory;
                             make run: .dev/stripe-local/state.json)
  ACTIONS_SECRET             verifies deliveries to /_local/actions  (the service's dev secret)

Besides Stripe's API it serves GET /_local/webhooks (each event's delivery)
and /_local/actions (an ACTIONS_URL stand-in: POST receives, GET lists).
`

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "-h", "--help", "help":
			fmt.Print(usage)
			return
		default:
			fmt.Fprint(os.Stderr, usage)
			os.Exit(2)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("component", "stripe-local")
	if err := run(ctx, os.Getenv, log); err != nil {
		log.Error("stripe-local stopped", "error", err)
		os.Exit(1)
	}
}

// Settings are the command's environment, read.
type Settings struct {
	Addr          string
	ActionsSecret string
	localstripe.Config
}

// readSettings reads the environment (getenv).
func readSettings(getenv func(string) string) (Settings, error) {
	get := func(k, def string) string {
		if v := strings.TrimSpace(getenv(k)); v != "" {
			return v
		}
		return def
	}
	var errs []error
	// A development tool (docs/design.md §3): never in production, never
	// reachable from another machine, never holding a live key.
	if v := strings.TrimSpace(getenv("APP_ENV")); v != config.DevelopmentEnv {
		errs = append(errs, fmt.Errorf("APP_ENV: the local Stripe runs only in development mode (APP_ENV=%s), not %q", config.DevelopmentEnv, v))
	}
	if k := strings.TrimSpace(getenv("STRIPE_API_KEY")); strings.HasPrefix(k, "sk_live_") || strings.HasPrefix(k, "rk_live_") {
		errs = append(errs, errors.New("STRIPE_API_KEY: a live key; the local Stripe is test mode only (use any sk_test_ key)"))
	}
	dur := func(k, def string) time.Duration {
		d, err := time.ParseDuration(get(k, def))
		if err != nil || d < 0 {
			errs = append(errs, fmt.Errorf("%s: a duration such as 10s", k))
		}
		return d
	}
	listen := get("LISTEN_ADDR", "127.0.0.1:8080")
	s := Settings{Addr: get("LOCAL_STRIPE_ADDR", "127.0.0.1:8082"), ActionsSecret: get("ACTIONS_SECRET", config.DevActionsSecret), Config: localstripe.Config{
		WebhookURL:    get("LOCAL_STRIPE_WEBHOOK_URL", "http://"+listen+"/webhooks/stripe"),
		WebhookSecret: strings.TrimSpace(strings.Split(get("STRIPE_WEBHOOK_SECRET", config.DevWebhookSecret), ",")[0]),
		Account:       get("LOCAL_STRIPE_ACCOUNT", "acct_local_demo"),
		ACHDelay:      dur("LOCAL_STRIPE_ACH_DELAY", "20s"),
		RetryBase:     dur("LOCAL_STRIPE_RETRY_BASE", "2s"),
	}}
	if err := config.LoopbackAddr(s.Addr); err != nil {
		errs = append(errs, fmt.Errorf("LOCAL_STRIPE_ADDR: the local Stripe binds to loopback only: %w", err))
	}
	s.StatePath = get("LOCAL_STRIPE_STATE", "")
	thin, bad := localstripe.NormalizeThinTypes(strings.Split(get("LOCAL_STRIPE_THIN_EVENTS", ""), ","))
	if bad != "" {
		errs = append(errs, fmt.Errorf("LOCAL_STRIPE_THIN_EVENTS: %q is not a v1 event type (v1.payment_intent.succeeded, v1.*)", bad))
	}
	s.ThinTypes = thin
	switch v := get("LOCAL_STRIPE_THIN_AND_SNAPSHOT", "false"); v {
	case "true", "1":
		s.SnapshotToo = true
	case "false", "0":
	default:
		errs = append(errs, errors.New("LOCAL_STRIPE_THIN_AND_SNAPSHOT: true or false"))
	}
	if s.WebhookURL == "off" {
		s.WebhookURL = ""
	}
	var err error
	if s.DropRate, err = strconv.ParseFloat(get("LOCAL_STRIPE_DROP_RATE", "0"), 64); err != nil || s.DropRate < 0 || s.DropRate > 1 {
		errs = append(errs, errors.New("LOCAL_STRIPE_DROP_RATE: a fraction from 0 to 1"))
	}
	if s.MaxAttempts, err = strconv.Atoi(get("LOCAL_STRIPE_MAX_ATTEMPTS", "6")); err != nil || s.MaxAttempts < 1 {
		errs = append(errs, errors.New("LOCAL_STRIPE_MAX_ATTEMPTS: a whole number, at least 1"))
	}
	if !strings.HasPrefix(s.Account, "acct_") {
		errs = append(errs, errors.New("LOCAL_STRIPE_ACCOUNT: an account id (acct_…)"))
	}
	return s, errors.Join(errs...)
}

func run(ctx context.Context, getenv func(string) string, log *slog.Logger) error {
	s, err := readSettings(getenv)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	s.Log = log
	actions := localstripe.NewActions(s.ActionsSecret)
	s.Actions = actions
	srv, err := localstripe.Open(s.Config)
	if err != nil {
		return err
	}
	defer srv.Close() // after the listener stopped: the last state is saved
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return fmt.Errorf("listen on LOCAL_STRIPE_ADDR %s: %w", s.Addr, err)
	}
	// localhost is resolved by the system: make sure it was loopback.
	if a, ok := ln.Addr().(*net.TCPAddr); !ok || !a.IP.IsLoopback() {
		ln.Close()
		return fmt.Errorf("LOCAL_STRIPE_ADDR %s: listening on %s, not loopback", s.Addr, ln.Addr())
	}
	hs := &http.Server{Handler: srv.LocalHandler(actions), ReadHeaderTimeout: 10 * time.Second}
	log.Info("local Stripe listening (test mode only, simulated)", "addr", ln.Addr().String(), "webhook_url", s.WebhookURL,
		"account", s.Account, "ach_delay", s.ACHDelay.String(), "drop_rate", s.DropRate,
		"retry_base", s.RetryBase.String(), "max_attempts", s.MaxAttempts, "thin_events", strings.Join(s.ThinTypes, ","),
		"thin_and_snapshot", s.SnapshotToo, "state", s.StatePath)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return hs.Shutdown(shutdown)
}
