// Command stripe-payments is the service binary: serve, migrate, and the
// operator subcommands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"
	// The time-zone database inside the binary: billing days follow time
	// zones, and the image (FROM scratch) has no /usr/share/zoneinfo.
	_ "time/tzdata"

	"github.com/stripe-payments/stripe-payments/internal/app"
	"github.com/stripe-payments/stripe-payments/internal/config"
	"github.com/stripe-payments/stripe-payments/webhook"
)

const usage = `usage: stripe-payments <command> [flags]

commands:
  serve          run the HTTP service (webhooks, internal API, health, metrics)
  migrate        create missing DynamoDB tables and apply Postgres migrations
  poll           find events the service missed or never finished and replay them (poll -h)
  events sign    print a Stripe-Signature header for a payload read from stdin
  billing remind|collect [--date D]
                 run the recurring billing reminder or collection job
  reconcile [--dry-run] [--since D] [--kinds K,...]
                 compare the service with Stripe's objects and heal the drift (reconcile -h)
  healthcheck [--live]
                 exit 0 when the admin listener answers /readyz (/healthz) 200 (healthcheck -h)
  version        print the version
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "stripe-payments:", err)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) > 0 && helpAsked(args[1:]) {
		// Help that was asked for is the answer, not an error: it goes to
		// stdout and the exit status is 0, for every command.
		err := dispatch(ctx, args, stdin, stdout, stdout)
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	return dispatch(ctx, args, stdin, stdout, stderr)
}

func dispatch(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return flag.ErrHelp
	}
	switch args[0] {
	case "serve", "migrate":
		if helpAsked(args[1:]) { // before the configuration: help needs none
			fmt.Fprint(stdout, commandHelp[args[0]])
			return nil
		}
		if len(args) > 1 {
			fmt.Fprint(stderr, commandHelp[args[0]])
			return fmt.Errorf("%s takes no arguments (its settings are environment variables)", args[0])
		}
		if args[0] == "migrate" {
			return migrate(ctx, stderr)
		}
		return serve(ctx, stderr)
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, versionString())
		return nil
	case "events":
		return eventsCmd(args[1:], stdin, stdout, stderr)
	case "poll":
		return poll(ctx, args[1:], stdout, stderr)
	case "billing":
		return billingCmd(ctx, args[1:], stdout, stderr)
	case "reconcile":
		return reconcileCmd(ctx, args[1:], stdout, stderr)
	case "healthcheck":
		return healthcheck(ctx, args[1:], os.Getenv, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", args[0])
	}
}

// commandHelp is the -h text of the commands that take no flags.
var commandHelp = map[string]string{
	"serve": `usage: stripe-payments serve

Run the HTTP service: the webhook, the internal API, the purchase API, the
console, health and metrics, and the background workers. Every setting is an
environment variable (docs/configuration.md); APP_ENV=development applies
the development defaults.
`,
	"migrate": `usage: stripe-payments migrate

Create the missing DynamoDB tables and apply the Postgres migrations, then
exit. Settings come from the environment (docs/configuration.md).
`,
}

// helpAsked: the arguments ask for help (-h, -help, --help, help).
func helpAsked(args []string) bool {
	for _, a := range args {
		switch a {
		case "-h", "-help", "--help", "help":
			return true
		}
	}
	return false
}

// newLogger logs JSON to w, masking secrets (config.Redactor) as a last line
// of defence.
func newLogger(w io.Writer, level slog.Level, secrets ...string) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: config.Redactor(secrets...)}))
}

// load reads the configuration of a subcommand: only the required settings
// it uses are required (config.Uses).
func load(stderr io.Writer, uses config.Uses) (config.Config, *slog.Logger, error) {
	cfg, err := config.FromEnvFor(uses)
	if err != nil {
		return cfg, nil, fmt.Errorf("configuration: %w", err)
	}
	return cfg, newLogger(stderr, cfg.LogLevel, cfg.Secrets()...), nil
}

func serve(ctx context.Context, stderr io.Writer) error {
	cfg, log, err := load(stderr, config.UsesServe)
	if err != nil {
		return err
	}
	if cfg.Development {
		log.Warn("APP_ENV=development: development defaults apply; never run production this way")
	}
	if cfg.UsingDevWebhookSecret {
		log.Warn("STRIPE_WEBHOOK_SECRET not set: using the local development secret", "secret", cfg.WebhookSecrets[0])
	}
	if cfg.UsingDevAPIToken {
		log.Warn("INTERNAL_API_TOKEN not set: using the local development token", "token", cfg.InternalAPIToken)
	}
	log.Info("starting", "version", versionString(), "config", cfg)
	a, err := app.New(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer a.Close()
	return a.Run(ctx)
}

func migrate(ctx context.Context, stderr io.Writer) error {
	cfg, log, err := load(stderr, config.UsesMigrate)
	if err != nil {
		return err
	}
	a, err := app.New(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer a.Close()
	if err := a.Migrate(ctx); err != nil {
		return err
	}
	log.Info("migrations applied")
	return nil
}

func eventsCmd(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "sign" {
		fmt.Fprint(stderr, "usage: stripe-payments events sign [-secret S] [-at UNIX] < event.json\n")
		return flag.ErrHelp
	}
	fs := flag.NewFlagSet("events sign", flag.ContinueOnError)
	fs.SetOutput(stderr)
	secret := fs.String("secret", "", "endpoint secret (default: the first of STRIPE_WEBHOOK_SECRET)")
	at := fs.Int64("at", 0, "signature timestamp, Unix seconds (default: now)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *secret == "" {
		cfg, err := config.FromEnvFor(config.UsesSign)
		if err != nil {
			return fmt.Errorf("configuration: %w", err)
		}
		*secret = cfg.WebhookSecrets[0]
	}
	payload, err := io.ReadAll(io.LimitReader(stdin, 1<<20+1))
	if err != nil {
		return fmt.Errorf("read payload: %w", err)
	}
	ts := time.Now()
	if *at != 0 {
		ts = time.Unix(*at, 0)
	}
	fmt.Fprintln(stdout, webhook.Sign(payload, *secret, ts))
	return nil
}
