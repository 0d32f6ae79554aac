package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/mattn/go-isatty"

	"github.com/stripe-payments/stripe-payments/internal/app"
	"github.com/stripe-payments/stripe-payments/internal/config"
	"github.com/stripe-payments/stripe-payments/internal/stripeid"
	"github.com/stripe-payments/stripe-payments/poller"
)

const pollUsage = `usage: stripe-payments poll [flags]

Lists events from the Stripe Events API for the platform and every connected
account the service knows, and replays those the events table does not hold
as processed. Without --since, each account's window starts at its
checkpoint minus --overlap and the checkpoint advances; with --since/--until
it is a backfill that leaves checkpoints alone.

flags:
`

// accountFlags collects a repeatable --account.
type accountFlags []string

func (a *accountFlags) String() string { return strings.Join(*a, ",") }

func (a *accountFlags) Set(v string) error {
	for _, id := range strings.Split(v, ",") {
		id = strings.TrimSpace(id)
		if !stripeid.Valid(id, "acct_") {
			return fmt.Errorf("%q is not an account id (acct_...)", id)
		}
		*a = append(*a, id)
	}
	return nil
}

type pollFlags struct {
	once, dryRun, inProcess, stuck bool
	every                          time.Duration
	since, until, target           string
	accounts                       accountFlags
	rate                           float64
	overlap, settle, lookback      time.Duration
	concurrency                    int
}

func parsePollFlags(args []string, stderr io.Writer) (pollFlags, poller.Window, error) {
	var f pollFlags
	fs := flag.NewFlagSet("poll", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, pollUsage)
		fs.PrintDefaults()
	}
	fs.BoolVar(&f.once, "once", true, "run once and exit (unless --every)")
	fs.DurationVar(&f.every, "every", 0, "run every `DURATION` until interrupted (e.g. 1m)")
	fs.StringVar(&f.since, "since", "", "backfill from this `RFC3339` time (checkpoints are not moved)")
	fs.StringVar(&f.until, "until", "", "backfill until this `RFC3339` time (default: now - settle); needs --since")
	fs.Var(&f.accounts, "account", "limit the run to this `acct_...` (repeatable); the platform's own id means the platform")
	fs.BoolVar(&f.dryRun, "dry-run", false, "list what would be replayed; change nothing")
	fs.StringVar(&f.target, "target", "", "replay by signing and POSTing to this webhook `URL` (default http://$LISTEN_ADDR/webhooks/stripe)")
	fs.BoolVar(&f.inProcess, "in-process", false, "replay by calling the event handler in this process")
	fs.Float64Var(&f.rate, "rate", poller.DefaultRate, "Stripe API requests per second (token bucket)")
	fs.BoolVar(&f.stuck, "stuck", false, "instead, sweep the events table's date/time index for events stuck received/failed and re-drive them from their stored payload")
	fs.DurationVar(&f.overlap, "overlap", poller.DefaultOverlap, "how far before the checkpoint a window starts")
	fs.DurationVar(&f.settle, "settle", poller.DefaultSettle, "how far before now a window ends")
	fs.DurationVar(&f.lookback, "lookback", poller.DefaultLookback, "window of an account's first run (no checkpoint), and of --stuck without --since")
	fs.IntVar(&f.concurrency, "concurrency", poller.DefaultConcurrency, "replays in flight at once")
	if err := fs.Parse(args); err != nil {
		return f, poller.Window{}, err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return f, poller.Window{}, fmt.Errorf("poll: unexpected argument %q", fs.Arg(0))
	}
	var errs []error
	onceSet := false
	fs.Visit(func(fl *flag.Flag) { onceSet = onceSet || fl.Name == "once" })
	if f.every < 0 || f.every > 0 && f.every < time.Second {
		errs = append(errs, errors.New("--every: at least 1s"))
	}
	if f.every > 0 && onceSet && f.once {
		errs = append(errs, errors.New("--once and --every exclude each other"))
	}
	if f.target != "" && f.inProcess {
		errs = append(errs, errors.New("--target and --in-process exclude each other"))
	}
	var w poller.Window
	if f.since != "" {
		t, err := time.Parse(time.RFC3339, f.since)
		if err != nil {
			errs = append(errs, fmt.Errorf("--since: %w", err))
		}
		w.Since = t
	}
	if f.until != "" {
		t, err := time.Parse(time.RFC3339, f.until)
		if err != nil {
			errs = append(errs, fmt.Errorf("--until: %w", err))
		}
		if f.since == "" && !f.stuck {
			errs = append(errs, errors.New("--until needs --since"))
		}
		w.Until = t
	}
	if !w.Since.IsZero() && !w.Until.IsZero() && !w.Since.Before(w.Until) {
		errs = append(errs, errors.New("--since must be before --until"))
	}
	if f.every > 0 && !w.Since.IsZero() && !f.stuck {
		errs = append(errs, errors.New("--every repeats a checkpointed run; a backfill (--since) runs once"))
	}
	return f, w, errors.Join(errs...)
}

func poll(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, w, err := parsePollFlags(args, stderr)
	if err != nil {
		return err
	}
	// Replays are signed with the webhook secret and POSTed, unless they run
	// in this process or nothing is replayed.
	uses := config.UsesPoll
	uses.WebhookSecret = !f.inProcess && !f.dryRun
	cfg, err := config.FromEnvFor(uses)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	// On a terminal, a progress line sits under the logs.
	logOut := stderr
	var progress *progressLine
	if file, ok := stderr.(*os.File); ok && isatty.IsTerminal(file.Fd()) {
		progress = &progressLine{w: stderr}
		logOut = progress
	}
	log := newLogger(logOut, cfg.LogLevel, cfg.Secrets()...)
	a, err := app.New(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer a.Close()
	opts := app.PollerOptions{
		Config: poller.Config{
			Accounts: f.accounts, Overlap: f.overlap, Settle: f.settle, Lookback: f.lookback,
			Concurrency: f.concurrency, DryRun: f.dryRun,
		},
		Rate:      f.rate,
		Target:    f.target,
		InProcess: f.inProcess,
	}
	if f.rate <= 0 {
		opts.Rate = -1 // unlimited
	}
	if progress != nil {
		opts.Progress = progress.update
	}
	p, err := a.NewPoller(opts)
	if err != nil {
		return err
	}
	runOnce := func(ctx context.Context) error {
		defer progress.clear()
		if f.stuck {
			rep, err := p.Sweep(ctx, w)
			progress.clear()
			printCandidates(stdout, rep.WouldReplay)
			fmt.Fprintln(stdout, rep.Summary())
			return err
		}
		rep, err := p.Run(ctx, w)
		progress.clear()
		if errors.Is(err, poller.ErrBusy) {
			return fmt.Errorf("poll: %w (is serve running with POLL_EVERY?)", err)
		}
		for _, ar := range rep.Accounts {
			printCandidates(stdout, ar.WouldReplay)
		}
		for _, ar := range rep.Accounts {
			fmt.Fprintln(stdout, ar.Summary())
		}
		fmt.Fprintln(stdout, rep.Summary())
		return err
	}
	if f.every == 0 {
		return runOnce(ctx)
	}
	poller.Every(ctx, f.every, func(ctx context.Context) {
		if err := runOnce(ctx); err != nil && ctx.Err() == nil {
			log.Error("poll run incomplete", "error", err)
		}
	})
	return nil
}

func printCandidates(w io.Writer, cs []poller.Candidate) {
	for _, c := range cs {
		fmt.Fprintf(w, "would replay %s %s %s created %s (%s)\n", c.ID, c.Type, c.Account, c.Created.Format(time.RFC3339), c.Reason)
	}
}

// progressLine draws one status line at the bottom of a terminal; log lines
// written through it clear the line, print, and draw it again.
type progressLine struct {
	mu   sync.Mutex
	w    io.Writer
	line string
	last time.Time
}

func (p *progressLine) update(pr poller.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if now := time.Now(); now.Sub(p.last) >= 100*time.Millisecond {
		p.last = now
		p.line = fmt.Sprintf("%s: listed %d, already processed %d, to replay %d, replayed %d, failed %d",
			pr.Account, pr.Listed, pr.AlreadyProcessed, pr.ToReplay, pr.Replayed, pr.Failed)
		fmt.Fprint(p.w, "\r\033[K"+p.line)
	}
}

func (p *progressLine) clear() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.line != "" {
		fmt.Fprint(p.w, "\r\033[K")
		p.line = ""
	}
}

func (p *progressLine) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.line != "" {
		fmt.Fprint(p.w, "\r\033[K")
	}
	n, err := p.w.Write(b)
	if p.line != "" {
		fmt.Fprint(p.w, p.line)
	}
	return n, err
}
