package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/app"
	"github.com/stripe-payments/stripe-payments/internal/config"
	"github.com/stripe-payments/stripe-payments/internal/reconcile"
)

const reconcileUsage = `usage: stripe-payments reconcile [--dry-run] [--since D] [--kinds K,...]

Compares what the service holds with what Stripe holds now, beyond the 30
days of the Events API (docs/operations.md "Reconciliation"): every
purchase's PaymentIntent and subscription not final, and those changed
since D (default: now less RECONCILE_WINDOW); every billing period whose
bank debit waits to settle (ACHSENT); every connected account the poller
walks. Each difference is a finding; unless --dry-run it is healed as the
event Stripe would have sent would have healed it (through the event
handler, or the billing feed), and a deauthorized account stops being
polled. The run is recorded: if this process stops,
serve (or the next reconcile) resumes it. Exit status 1 when an object
could not be compared or healed.

flags:
`

// CLIActor is who a run started by this command names.
const CLIActor = "cli"

func reconcileCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("reconcile", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, reconcileUsage)
		fs.PrintDefaults()
	}
	dryRun := fs.Bool("dry-run", false, "report the differences; change nothing")
	since := fs.String("since", "", "compare final objects changed since `D` too (YYYY-MM-DD or RFC 3339; default now less RECONCILE_WINDOW)")
	kinds := fs.String("kinds", "", "compare only these `kinds` (comma-separated: "+strings.Join(reconcile.AllKinds, ", ")+")")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("reconcile: unexpected argument %q", fs.Arg(0))
	}
	req := reconcile.Request{DryRun: *dryRun}
	var err error
	if req.Since, err = reconcile.ParseSince(*since); err != nil {
		return fmt.Errorf("--since: %w", err)
	}
	if *kinds != "" {
		for _, k := range strings.Split(*kinds, ",") {
			req.Kinds = append(req.Kinds, strings.TrimSpace(k))
		}
	}
	if _, err := req.Normalize(time.Now(), time.Hour); err != nil { // the window is not known yet: checks only
		return fmt.Errorf("reconcile: %w", err)
	}
	cfg, log, err := load(stderr, config.UsesPoll)
	if err != nil {
		return err
	}
	a, err := app.New(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer a.Close()
	rec := a.Reconciliations
	run, err := rec.Store.Start(ctx, req, CLIActor)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "reconciliation %s started: %d objects in scope (dry run: %t)\n", run.ID, run.Matched, run.DryRun)
	for run.Status != reconcile.StatusDone {
		// This process works through every run nobody holds (an older one
		// left by a stopped process first); a run serve's runner took is
		// waited for.
		worked, err := rec.Runner.RunOnce(ctx)
		if ctx.Err() != nil {
			return fmt.Errorf("interrupted: reconciliation %s stays running and resumes in serve or the next reconcile", run.ID)
		}
		if err != nil {
			log.Warn("reconciliation", "error", err)
		}
		if run, err = rec.Store.Get(ctx, run.ID); err != nil {
			return err
		}
		if (!worked || err != nil) && run.Status != reconcile.StatusDone { // never a tight loop on an error
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
	after := 0
	for {
		list, next, err := rec.Store.Findings(ctx, run.ID, after, 1000)
		if err != nil {
			return err
		}
		for _, f := range list {
			line := fmt.Sprintf("%s %s on %s: local %q, Stripe %q: %s", f.Kind, f.Object, f.StripeAccount, f.Local, f.Stripe, f.Action)
			if f.Error != "" {
				line += " (error: " + f.Error + ")"
			}
			fmt.Fprintln(stdout, line)
		}
		if next == 0 {
			break
		}
		after = next
	}
	fmt.Fprintf(stdout, "reconciliation %s done: %d checked, %d drifted, %d healed, %d failed\n",
		run.ID, run.Checked, run.Drifted, run.Healed, run.Failed)
	if run.Failed > 0 {
		return errors.New("reconcile: some objects could not be compared or healed (see the findings)")
	}
	return nil
}
