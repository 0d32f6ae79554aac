package poller

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Counts of one reconciliation. Listed = AlreadyProcessed + Replayed +
// Failed + Ignored (+ events not attempted because the run was stopped, and
// + WouldReplay in a dry run).
type Counts struct {
	Listed           int // events the API listed (a sweep: records it scanned)
	AlreadyProcessed int // recorded and processed: skipped
	Missing          int // not recorded at all: the webhook gap
	Unprocessed      int // recorded but received/failed: re-driven
	Replayed         int // replayed and now processed
	Failed           int // replay failed; holds the checkpoint back
	Ignored          int // the handler ignored them (livemode mismatch)
}

func (c *Counts) add(o Counts) {
	c.Listed += o.Listed
	c.AlreadyProcessed += o.AlreadyProcessed
	c.Missing += o.Missing
	c.Unprocessed += o.Unprocessed
	c.Replayed += o.Replayed
	c.Failed += o.Failed
	c.Ignored += o.Ignored
}

// Progress is reported while a run goes (the CLI's progress line).
type Progress struct {
	Account string
	Counts
	ToReplay int // events found to replay so far in the current slice
}

// AccountReport is the outcome of one account's reconciliation.
type AccountReport struct {
	Account  string
	Platform bool
	// From and Until are the window listed, [From, Until).
	From, Until time.Time
	// Listing is the Events API listing used (Poller.listingFor).
	Listing Listing
	Counts
	// Delivered counts the listed events recorded from a webhook or
	// EventBridge delivery (Observer.Silent).
	Delivered int
	// Checkpoint is the account's checkpoint after the run (zero: none).
	Checkpoint time.Time
	// WouldReplay lists, in a dry run, what would have been replayed.
	WouldReplay []Candidate
	DryRun      bool
	Err         error
}

// Summary is the account's one-line summary.
func (r AccountReport) Summary() string {
	var b strings.Builder
	b.WriteString(r.Account)
	if r.Platform {
		b.WriteString(" (platform)")
	}
	fmt.Fprintf(&b, " %s..%s: listed %d", r.From.UTC().Format(time.RFC3339), r.Until.UTC().Format(time.RFC3339), r.Listed)
	if r.Listing == ListUndelivered {
		b.WriteString(" undelivered")
	}
	fmt.Fprintf(&b, ", already processed %d, ", r.AlreadyProcessed)
	if r.DryRun {
		fmt.Fprintf(&b, "would replay %d", len(r.WouldReplay))
	} else {
		fmt.Fprintf(&b, "replayed %d", r.Replayed)
	}
	fmt.Fprintf(&b, ", failed %d (missing %d, unprocessed %d", r.Failed, r.Missing, r.Unprocessed)
	if r.Ignored > 0 {
		fmt.Fprintf(&b, ", ignored %d", r.Ignored)
	}
	b.WriteString(")")
	if !r.Checkpoint.IsZero() {
		fmt.Fprintf(&b, "; checkpoint %s", r.Checkpoint.UTC().Format(time.RFC3339))
	}
	if r.Err != nil {
		fmt.Fprintf(&b, "; error: %v", r.Err)
	}
	return b.String()
}

// Report is the outcome of a run.
type Report struct {
	Accounts []AccountReport
	DryRun   bool
	Backfill bool
	Elapsed  time.Duration
}

// Total sums the accounts' counts.
func (r Report) Total() Counts {
	var t Counts
	for _, a := range r.Accounts {
		t.add(a.Counts)
	}
	return t
}

// Err joins the accounts' errors and reports failed replays.
func (r Report) Err() error {
	var errs []error
	for _, a := range r.Accounts {
		if a.Err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", a.Account, a.Err))
		}
	}
	if t := r.Total(); t.Failed > 0 {
		errs = append(errs, fmt.Errorf("%d event(s) could not be replayed", t.Failed))
	}
	return errors.Join(errs...)
}

// Summary is the run's one-line total.
func (r Report) Summary() string {
	t := r.Total()
	mode := ""
	switch {
	case r.DryRun:
		mode = " (dry run)"
	case r.Backfill:
		mode = " (backfill)"
	}
	return fmt.Sprintf("poll%s: %d account(s): listed %d, already processed %d, replayed %d, failed %d (webhook gap %d, unprocessed %d) in %s",
		mode, len(r.Accounts), t.Listed, t.AlreadyProcessed, t.Replayed, t.Failed, t.Missing, t.Unprocessed, r.Elapsed.Round(time.Millisecond))
}

// SweepReport is the outcome of a stuck sweep.
type SweepReport struct {
	From, Until time.Time
	Counts      // Listed: records scanned in the date/time index
	WouldReplay []Candidate
	DryRun      bool
	Elapsed     time.Duration
}

// Summary is the sweep's one-line summary.
func (r SweepReport) Summary() string {
	mode := ""
	if r.DryRun {
		mode = " (dry run)"
	}
	replayed := fmt.Sprintf("replayed %d", r.Replayed)
	if r.DryRun {
		replayed = fmt.Sprintf("would replay %d", len(r.WouldReplay))
	}
	return fmt.Sprintf("stuck sweep%s %s..%s: scanned %d, already processed %d, stuck %d, %s, failed %d in %s",
		mode, r.From.UTC().Format(time.RFC3339), r.Until.UTC().Format(time.RFC3339),
		r.Listed, r.AlreadyProcessed, r.Unprocessed, replayed, r.Failed, r.Elapsed.Round(time.Millisecond))
}

// withAccount sets the event's `account` field. Events listed with a
// Stripe-Account header are the connected account's; the field is added
// when the listing left it out, so that the replayed record is stored under
// that account rather than the platform's.
func withAccount(raw []byte, account string) []byte {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil {
		return raw
	}
	v, err := json.Marshal(account)
	if err != nil {
		return raw
	}
	doc["account"] = v
	out, err := json.Marshal(doc)
	if err != nil {
		return raw
	}
	return out
}
