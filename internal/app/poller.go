package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	billingstore "github.com/stripe-payments/stripe-payments/internal/billing/store"
	"github.com/stripe-payments/stripe-payments/internal/ledger"
	"github.com/stripe-payments/stripe-payments/internal/stripebudget"
	"github.com/stripe-payments/stripe-payments/internal/thin"
	"github.com/stripe-payments/stripe-payments/poller"
	"github.com/stripe-payments/stripe-payments/webhook"
)

// PollerOptions are the choices of one poller; serve uses the defaults.
type PollerOptions struct {
	// Config of the runs; PlatformAccount defaults to STRIPE_PLATFORM_ACCOUNT.
	Config poller.Config
	// Rate limits Stripe API requests per second (0: poller.DefaultRate).
	Rate float64
	// Target is the webhook URL replays are POSTed to; empty means
	// http://$LISTEN_ADDR/webhooks/stripe.
	Target string
	// InProcess replays through this process's handler instead.
	InProcess bool
	// Observer receives the metrics (nil: none).
	Observer poller.Observer
	// Progress is told how a run goes (nil: nothing).
	Progress func(poller.Progress)
	// APIClient is the HTTP client of the Stripe API (nil: default).
	APIClient *http.Client
}

// NewPoller builds a poller on this instance's stores: the events table for
// the diff, Postgres for checkpoints (and the run lock) and for the accounts
// the ledger knows.
func (a *App) NewPoller(o PollerOptions) (*poller.Poller, error) {
	cfg := o.Config
	if cfg.PlatformAccount == "" {
		cfg.PlatformAccount = a.Config.PlatformAccount
	}
	// The poller and its backfills draw on the shared budget last (docs/design.md
	// §9); o.Rate is a further cap of this poller alone.
	apiClient := o.APIClient
	if apiClient == nil {
		apiClient = &http.Client{Timeout: 80 * time.Second} // the poller's default
	}
	api := poller.NewEventsAPI(poller.APIConfig{
		Key: a.Config.StripeAPIKey, BaseURL: a.Config.StripeAPIBase, Rate: o.Rate,
		HTTPClient: a.stripeBudget.Client(apiClient, stripebudget.Background),
	}, a.log)
	var replayer poller.Replayer
	switch {
	case o.InProcess:
		replayer = poller.NewHandlerReplayer(a.Handler)
	case len(a.Config.WebhookSecrets) == 0:
		// A dry run replays nothing, so poll does not require the secret
		// for one; any other run must sign its replays.
		if !cfg.DryRun {
			return nil, errors.New("poller: replays are signed with STRIPE_WEBHOOK_SECRET, which is not set")
		}
		replayer = poller.NewHandlerReplayer(a.Handler)
	default:
		target := o.Target
		if target == "" {
			target = webhookURL(a.Config.ListenAddr)
		}
		replayer = poller.NewWebhookReplayer(target, a.Config.WebhookSecrets[0], nil)
	}
	checkpoints := ledger.NewCheckpoints(a.Pool)
	return poller.New(cfg, poller.Deps{
		API:         api,
		Store:       a.Events,
		Checkpoints: checkpoints,
		Locker:      checkpoints,
		// Every account the ledger, the purchases or the billing table knows.
		// Accounts v2 events keep a registry of their own (package thin),
		// which also drops the accounts closed for good.
		Accounts: thin.Polled{Registry: a.Thin.Registry,
			Others: poller.Accounts{ledger.NewAccounts(a.Pool), billingstore.ChargedAccounts{Store: a.BillingStore}}},
		Replayer: replayer,
		Observer: o.Observer,
		Progress: o.Progress,
		Log:      a.log,
	})
}

// webhookURL is the local webhook endpoint of a listen address; an
// all-interfaces address is reached on loopback.
func webhookURL(listenAddr string) string {
	host, port, err := net.SplitHostPort(listenAddr)
	if err != nil {
		return "http://" + listenAddr + webhook.Path
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + webhook.Path
}

// startPolling runs the poller every POLL_EVERY inside serve, replaying
// through this instance's own webhook endpoint. stop cancels the loop and
// waits for the run in flight.
func (a *App) startPolling(ctx context.Context) (stop func(), err error) {
	if a.Config.PollEvery <= 0 {
		return func() {}, nil
	}
	p, err := a.NewPoller(PollerOptions{
		Target:   webhookURL(a.Server.Addr()),
		Observer: a.pollerMetrics,
	})
	if err != nil {
		return nil, fmt.Errorf("start poller: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	a.log.Info("poller running inside serve", "every", a.Config.PollEvery.String())
	run := func(ctx context.Context) {
		rep, err := p.Run(ctx, poller.Window{})
		switch {
		case errors.Is(err, poller.ErrBusy):
			a.log.Info("poll skipped: another poller run holds the lock")
		case err != nil && ctx.Err() == nil:
			a.log.Error("poll run incomplete", "error", err, "summary", rep.Summary())
		default:
			a.log.Info("poll run done", "summary", rep.Summary())
		}
	}
	go func() {
		defer close(done)
		a.safe.Loop(ctx, "poller", func(ctx context.Context) { poller.Every(ctx, a.Config.PollEvery, run) })
	}()
	return func() { cancel(); <-done }, nil
}
