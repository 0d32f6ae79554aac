package billingqueue

import (
	"context"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
)

// RunStart names a run about to be enqueued.
type RunStart struct {
	Job   string
	Clock string
	Date  dates.Date
	// StaleAfter: an open run whose enqueuer has not reported for this long
	// is taken to be dead (killed mid-enqueue) and a new run replaces it.
	StaleAfter time.Duration
	// Deadline: a run not drained this long after its start is overdue
	// (the alert), and a new run for its date replaces it.
	Deadline time.Duration
}

// Run is one queued run, as the RunStore keeps it.
type Run struct {
	ID      string
	Job     string
	Clock   string
	Date    dates.Date
	Started time.Time
}

// Outcome of one message (one account, or one part of it).
type Outcome string

const (
	// Collected: the account's due entries were acted on (charged,
	// declined, marked stale, skipped when paused…), everything recorded.
	Collected Outcome = "collected"
	// NothingDue: nothing was due any more (another run or replica got
	// there first, or the subscription changed since the run read it).
	NothingDue Outcome = "nothing_due"
	// Incomplete: the account's attempts are recorded, but an entry failed
	// or a charge's outcome is unknown; the next run settles it, as after
	// an in-process run.
	Incomplete Outcome = "incomplete"
	// Locked: the account was locked; the message comes back later. Not
	// final: a later receive records the final outcome over it.
	Locked Outcome = "locked"
	// Dead: the message failed on its last receive and goes to the
	// dead-letter queue (an incident names the account).
	Dead Outcome = "dead"
)

// Final reports an outcome that ends the message.
func (o Outcome) Final() bool { return o != Locked }

// Counts is what collecting one account did, in the run report's terms.
type Counts struct {
	Entries        int `json:"entries"`
	Reminded       int `json:"reminded"`
	Succeeded      int `json:"succeeded"`
	Processing     int `json:"processing"`
	Declined       int `json:"declined"`
	Stale          int `json:"stale"`
	PausedSkipped  int `json:"paused_skipped"`
	Resumed        int `json:"resumed"`
	Skipped        int `json:"skipped"`
	PaidByCustomer int `json:"paid_by_customer"`
	Unknown        int `json:"unknown"`
	Resolved       int `json:"resolved"`
	Unresolved     int `json:"unresolved"`
	Errors         int `json:"errors"`
}

// Add adds o to c.
func (c *Counts) Add(o Counts) {
	c.Entries += o.Entries
	c.Reminded += o.Reminded
	c.Succeeded += o.Succeeded
	c.Processing += o.Processing
	c.Declined += o.Declined
	c.Stale += o.Stale
	c.PausedSkipped += o.PausedSkipped
	c.Resumed += o.Resumed
	c.Skipped += o.Skipped
	c.PaidByCustomer += o.PaidByCustomer
	c.Unknown += o.Unknown
	c.Resolved += o.Resolved
	c.Unresolved += o.Unresolved
	c.Errors += o.Errors
}

// outcome classifies a collection that returned without an error.
func (c Counts) outcome() Outcome {
	switch {
	case c.Errors > 0 || c.Unknown > 0 || c.Unresolved > 0:
		return Incomplete
	case c.Reminded+c.Succeeded+c.Processing+c.Declined+c.Stale+c.PausedSkipped+c.Resumed+c.PaidByCustomer+c.Resolved == 0:
		return NothingDue
	}
	return Collected
}

// Result is the recorded outcome of one message.
type Result struct {
	Run      string
	Account  string
	Part     int
	Outcome  Outcome
	Counts   Counts
	Receives int
	// Cause: why it failed (Incomplete, Locked, Dead), in words.
	Cause string
	// Replica: the worker that recorded it (the console shows the spread).
	Replica string
}

// Progress is a run's state across replicas.
type Progress struct {
	Run
	Enqueued int
	// EnqueueDone: the enqueuer sent every message (EnqueueError: or gave
	// up, saying why).
	EnqueueDone  bool
	EnqueueError string
	Collected    int
	NothingDue   int
	Incomplete   int
	Locked       int // waiting for their lock now
	Dead         int
	Drained      bool
	Superseded   bool
	Deadline     time.Time
	// Counts: the sum over the run's accounts.
	Counts Counts
	// Replicas: how many workers recorded outcomes of the run.
	Replicas int
}

// Failed is how many messages ended without being collected cleanly.
func (p Progress) Failed() int { return p.Incomplete + p.Dead }

// Done is how many messages ended.
func (p Progress) Done() int { return p.Collected + p.NothingDue + p.Incomplete + p.Dead }

// Clean: drained, and nothing failed.
func (p Progress) Clean() bool { return p.Drained && p.Failed() == 0 && p.EnqueueError == "" }

// RunStore keeps the queued runs and the outcome of each message, shared
// by every replica (Postgres: internal/opsdata).
type RunStore interface {
	// Begin opens a run for start's job, clock and date, or joins the one
	// open already (joined): only one replica enqueues a date at a time.
	// An open run whose enqueuer went quiet for StaleAfter, that failed to
	// enqueue, or that is past its deadline is superseded by the new one.
	Begin(ctx context.Context, start RunStart) (run Run, joined bool, err error)
	// Enqueuing reports the enqueuer alive with enqueued messages sent.
	Enqueuing(ctx context.Context, run string, enqueued int) error
	// Enqueued ends the enqueue: every message sent (err nil), or not.
	Enqueued(ctx context.Context, run string, enqueued int, err error) error
	// Record keeps one message's outcome (idempotent per run, account and
	// part: a later outcome replaces an earlier one).
	Record(ctx context.Context, r Result) error
	// Progress reads a run's state.
	Progress(ctx context.Context, run string) (Progress, error)
	// CloseDrained marks drained every open run whose enqueue is done and
	// all of whose messages ended, and returns them (each once, to one
	// caller across replicas).
	CloseDrained(ctx context.Context) ([]Progress, error)
	// Overdue counts the open runs past their deadline.
	Overdue(ctx context.Context) (int, error)
}
