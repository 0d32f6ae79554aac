package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/app"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/config"
)

const billingUsage = `usage: stripe-payments billing <remind|collect> [--date YYYY-MM-DD]

  remind    send the payment reminders due on the date
  collect   charge the payments (and retries) due on the date

Without --date the job date is tomorrow in UTC, and each subscription is
acted on only once that date has come in its own time zone (so those ahead
of UTC are charged on their own date; nothing is charged before its date).
Rerunning a job for a date sends and charges nothing twice. The report is
printed as JSON; the exit status is 1 when something is left for a rerun
(locked accounts, attempts without an answer, periods whose outcome is still
unresolved, errors).
`

// billingCmd runs one billing job, as cron or an operator would.
func billingCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "remind" && args[0] != "collect") {
		fmt.Fprint(stderr, billingUsage)
		return flag.ErrHelp
	}
	job := args[0]
	fs := flag.NewFlagSet("billing "+job, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dateFlag := fs.String("date", "", "job date, YYYY-MM-DD (default: tomorrow in UTC; each subscription waits for the date in its own time zone)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprint(stderr, billingUsage)
		return fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	cfg, log, err := load(stderr, config.UsesBilling)
	if err != nil {
		return err
	}
	a, err := app.New(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer a.Close()

	date := a.Billing.NowDate()
	if *dateFlag != "" {
		if date, err = dates.Parse(*dateFlag); err != nil {
			return fmt.Errorf("--date: %w", err)
		}
		if latest := dates.Of(time.Now().UTC()).AddDays(1); date.After(latest) {
			return fmt.Errorf("--date %s is in the future", date)
		}
	}
	run := a.Billing.Collect
	if job == "remind" {
		run = a.Billing.Remind
	}
	started := time.Now()
	rep, err := run(ctx, date)
	a.RecordBillingRun(context.WithoutCancel(ctx), job, date, started, rep, err)
	if rep != nil {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if encErr := enc.Encode(rep); encErr != nil {
			return encErr
		}
	}
	if err != nil {
		return fmt.Errorf("billing %s %s: %w", job, date, err)
	}
	if !rep.OK() {
		return fmt.Errorf("billing %s %s: %w", job, date, errIncomplete)
	}
	return nil
}

var errIncomplete = errors.New("incomplete run: rerun the job for the same date (docs/runbooks/StripePaymentsBillingRunFailed.md)")
