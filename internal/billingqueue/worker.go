package billingqueue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// AccountCollector collects one message's account under the account's
// lock, as an in-process run does (same idempotency keys, history and
// budget class), and returns once every attempt is recorded. ErrLocked
// (wrapped) says another holder has the lock and nothing was done.
type AccountCollector interface {
	CollectAccount(ctx context.Context, m Message) (Counts, error)
}

// ErrLocked: the account is locked by another holder.
var ErrLocked = errors.New("account locked")

// ReceiveAPI is the part of the SQS client the worker uses (*sqs.Client).
// The IAM parity test (internal/dynamo) reads these calls from this
// package and compares them with terraform/.
type ReceiveAPI interface {
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
	ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
}

// Observer is told what the worker does (metrics); nil: nothing.
type Observer interface {
	// Finished: a message ended its receive with outcome ("retry": it
	// failed and comes back; "refused": not a billing queue message).
	Finished(outcome string)
	// Overdue: open runs past their deadline, as of now.
	Overdue(n int)
	// Depth: the queue's messages waiting (visible) and in hand (in
	// flight), as SQS last counted them.
	Depth(visible, inFlight int)
}

// Defaults of WorkerConfig.
const (
	DefaultWorkers        = 16
	DefaultMaxReceives    = 10
	DefaultWaitTime       = 10 * time.Second
	DefaultVisibility     = 60 * time.Second
	DefaultLockedDelay    = 61 * time.Second
	DefaultFailureBackoff = 10 * time.Second
	DefaultMaxBackoff     = 15 * time.Minute
	DefaultCollectTimeout = 5 * time.Minute
	DefaultRequestTimeout = 10 * time.Second
	DefaultDrainEvery     = 5 * time.Second
)

// WorkerConfig configures a Worker.
type WorkerConfig struct {
	QueueURL string
	// Workers: accounts collected at once by this replica.
	Workers int
	// MaxReceives is BILLING_QUEUE_MAX_RECEIVES, the queue's redrive
	// maxReceiveCount: a message that fails on its MaxReceives-th receive
	// is recorded dead and left to the redrive, which moves it to the
	// dead-letter queue.
	MaxReceives int
	// WaitTime: the long poll's wait (at most 20 s). The receive is not cut
	// short by a shutdown, so that no message is taken by a poll nobody
	// reads; a shutdown waits for it at most this long.
	WaitTime time.Duration
	// Visibility: how long a received message stays hidden; the worker
	// extends it while the account is being collected.
	Visibility time.Duration
	// LockedDelay: a locked account's message comes back after this (a
	// lock lease: long enough to take over a crashed holder's lock).
	LockedDelay time.Duration
	// FailureBackoff × 2^(receives−1), at most MaxBackoff: how long a
	// message that failed stays hidden.
	FailureBackoff, MaxBackoff time.Duration
	// CollectTimeout bounds one account's collection; it runs to the end
	// during a shutdown, so that its message can be deleted.
	CollectTimeout time.Duration
	RequestTimeout time.Duration
	// DrainEvery: how often this replica looks for drained runs (and
	// counts the overdue ones).
	DrainEvery time.Duration
	// Replica names this worker in the recorded outcomes.
	Replica string
}

// Worker long-polls the billing queue and collects its accounts.
type Worker struct {
	cfg       WorkerConfig
	api       ReceiveAPI
	collector AccountCollector
	runs      RunStore
	obs       Observer
	log       *slog.Logger
	// onDrained is called once per drained run, on the replica that
	// noticed it (the billing core moves its sweep watermark on when the
	// run was clean).
	onDrained func(ctx context.Context, p Progress)
}

// NewWorker returns a worker; obs and onDrained may be nil.
func NewWorker(cfg WorkerConfig, api ReceiveAPI, collector AccountCollector, runs RunStore, obs Observer,
	onDrained func(context.Context, Progress), log *slog.Logger) *Worker {
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.MaxReceives <= 0 {
		cfg.MaxReceives = DefaultMaxReceives
	}
	if cfg.WaitTime <= 0 || cfg.WaitTime > 20*time.Second {
		cfg.WaitTime = DefaultWaitTime
	}
	if cfg.Visibility < 3*time.Second {
		cfg.Visibility = DefaultVisibility
	}
	if cfg.LockedDelay <= 0 {
		cfg.LockedDelay = DefaultLockedDelay
	}
	if cfg.FailureBackoff <= 0 {
		cfg.FailureBackoff = DefaultFailureBackoff
	}
	if cfg.MaxBackoff < cfg.FailureBackoff {
		cfg.MaxBackoff = max(DefaultMaxBackoff, cfg.FailureBackoff)
	}
	if cfg.CollectTimeout <= 0 {
		cfg.CollectTimeout = DefaultCollectTimeout
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.DrainEvery <= 0 {
		cfg.DrainEvery = DefaultDrainEvery
	}
	if obs == nil {
		obs = nopObserver{}
	}
	if onDrained == nil {
		onDrained = func(context.Context, Progress) {}
	}
	return &Worker{cfg: cfg, api: api, collector: collector, runs: runs, obs: obs, onDrained: onDrained,
		log: log.With("component", "billing-queue", "queue_url", cfg.QueueURL)}
}

// Run receives and collects until ctx is done; then the collections in
// hand finish and their messages are deleted, messages received but not
// started are given back at once, and Run returns.
func (w *Worker) Run(ctx context.Context) {
	var wg sync.WaitGroup
	slots := make(chan struct{}, w.cfg.Workers)
	receivers := (w.cfg.Workers + 9) / 10
	for range receivers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.receiveLoop(ctx, slots, &wg)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		w.drainLoop(ctx)
	}()
	wg.Wait()
}

// receiveLoop takes free slots (at least one, at most ten), receives that
// many messages, and collects each in a goroutine of its own.
func (w *Worker) receiveLoop(ctx context.Context, slots chan struct{}, wg *sync.WaitGroup) {
	backoff := time.Second
	for {
		n := acquire(ctx, slots)
		if n == 0 {
			return
		}
		msgs, err := w.receive(ctx, n)
		for range n - len(msgs) {
			<-slots
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			w.log.Error("billing queue: receive failed; retrying", "error", err, "backoff", backoff.String())
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		backoff = time.Second
		if ctx.Err() != nil {
			// Shut down while the answer came: not started, so give them
			// back at once rather than after the visibility timeout.
			for _, m := range msgs {
				w.setVisibility(m, 0, "give back at shutdown")
				<-slots
			}
			return
		}
		for _, m := range msgs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-slots }()
				w.handle(ctx, m)
			}()
		}
	}
}

// acquire blocks for one free slot, then takes up to nine more that are
// free now; 0 when ctx ended first.
func acquire(ctx context.Context, slots chan struct{}) int {
	select {
	case <-ctx.Done():
		return 0
	case slots <- struct{}{}:
	}
	n := 1
	for n < 10 {
		select {
		case slots <- struct{}{}:
			n++
		default:
			return n
		}
	}
	return n
}

func (w *Worker) receive(ctx context.Context, n int) ([]types.Message, error) {
	in := &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(w.cfg.QueueURL),
		MaxNumberOfMessages:         int32(n),
		WaitTimeSeconds:             int32(w.cfg.WaitTime / time.Second),
		VisibilityTimeout:           int32(w.cfg.Visibility / time.Second),
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount},
	}
	// Detached from the shutdown: a poll cut off could leave the messages
	// it took hidden for a visibility timeout; its answer is given back.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.WaitTime+w.cfg.RequestTimeout)
	defer cancel()
	out, err := w.api.ReceiveMessage(rctx, in)
	if err != nil {
		return nil, fmt.Errorf("receive from %s: %w", w.cfg.QueueURL, err)
	}
	return out.Messages, nil
}

// handle collects one message's account and settles the message: deleted
// once the outcome is recorded, hidden for a while when the account is
// locked or the collection failed, left to the redrive on its last receive.
func (w *Worker) handle(ctx context.Context, sm types.Message) {
	receives, _ := strconv.Atoi(sm.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
	receives = max(receives, 1)
	log := w.log.With("message_id", aws.ToString(sm.MessageId), "receive_count", receives)
	m, err := Decode(aws.ToString(sm.Body))
	if err != nil {
		// Never acted on: it reaches the dead-letter queue by the redrive.
		w.obs.Finished("refused")
		log.Error("billing queue: message refused; it stays on the queue for the dead-letter redrive", "error", err)
		return
	}
	log = log.With("run", m.Run, "account", m.Account, "date", m.Date.String(), "test_clock", m.Clock, "part", m.Part)

	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.CollectTimeout)
	defer cancel()
	stop := w.keepHidden(cctx, sm, log)
	counts, err := w.collect(cctx, m)
	stop()

	res := Result{Run: m.Run, Account: m.Account, Part: m.Part, Counts: counts, Receives: receives, Replica: w.cfg.Replica}
	last := receives >= w.cfg.MaxReceives
	switch {
	case err == nil:
		res.Outcome = counts.outcome()
		if res.Outcome == Incomplete {
			res.Cause = fmt.Sprintf("%d entry error(s), %d charge(s) with an unknown outcome: the next run settles them", counts.Errors, max(counts.Unknown, counts.Unresolved))
		}
	case errors.Is(err, ErrLocked) && !last:
		res.Outcome, res.Cause = Locked, err.Error()
		w.record(cctx, res, log) // progress only: a final outcome is never replaced by it
		w.obs.Finished(string(Locked))
		d := w.lockedDelay(m, receives)
		log.Info("billing queue: account locked; its message comes back later", "delay", d.String())
		w.setVisibility(sm, d, "locked account")
		return
	case !last:
		w.obs.Finished("retry")
		d := w.backoff(receives)
		log.Warn("billing queue: collection failed; the message comes back later", "error", err, "delay", d.String())
		w.setVisibility(sm, d, "back off after a failure")
		return
	default:
		res.Outcome, res.Cause = Dead, fmt.Sprintf("failed on all %d receives, last: %v", receives, err)
		if err := w.record(cctx, res, log); err != nil {
			// Recorded nowhere: leave the message its last receive back, so
			// a replica that can record takes it.
			w.setVisibility(sm, w.backoff(receives), "record the dead letter")
			return
		}
		w.obs.Finished(string(Dead))
		log.Error("billing queue: message failed on its last receive; it goes to the dead-letter queue", "error", err)
		// Visible at once: the next receive moves it to the dead-letter queue.
		w.setVisibility(sm, 0, "dead letter")
		return
	}
	if err := w.record(cctx, res, log); err != nil {
		w.obs.Finished("retry")
		w.setVisibility(sm, w.backoff(receives), "record the outcome")
		return
	}
	w.obs.Finished(string(res.Outcome))
	w.delete(sm, log)
}

// collect runs the collector, a panic failing this message only.
func (w *Worker) collect(ctx context.Context, m Message) (c Counts, err error) {
	defer func() {
		if v := recover(); v != nil {
			w.log.Error("billing queue: collection panicked", "account", m.Account, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			err = fmt.Errorf("collection panicked: %v", v)
		}
	}()
	return w.collector.CollectAccount(ctx, m)
}

// keepHidden extends the message's visibility while its account is being
// collected, so no other replica takes it meanwhile.
func (w *Worker) keepHidden(ctx context.Context, sm types.Message, log *slog.Logger) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(w.cfg.Visibility / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				if err := w.changeVisibility(sm, w.cfg.Visibility); err != nil {
					log.Warn("billing queue: could not extend the visibility of a message in hand", "error", err)
				}
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

func (w *Worker) record(ctx context.Context, r Result, log *slog.Logger) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.RequestTimeout)
	defer cancel()
	if err := w.runs.Record(rctx, r); err != nil {
		log.Error("billing queue: could not record the outcome; the message comes back later", "outcome", string(r.Outcome), "error", err)
		return err
	}
	return nil
}

// lockedDelay is how long a locked account's message stays hidden. A real
// time run's comes back after a lock lease (enough to take over a crashed
// holder's lock). A test clock's advance waits for its run to drain, and
// its account is mostly locked only for a moment (a webhook of the same
// account being applied), so its message comes back after 1 s, doubling
// with each receive up to the lease: the advance is not held a whole
// lease, and a crashed holder's lease (60 s) still ends before its sixth
// locked receive (1+2+4+8+16+32 s), well within BILLING_QUEUE_MAX_RECEIVES.
func (w *Worker) lockedDelay(m Message, receives int) time.Duration {
	if m.Clock == "" {
		return w.cfg.LockedDelay
	}
	d := time.Second
	for i := 1; i < receives && d < w.cfg.LockedDelay; i++ {
		d *= 2
	}
	return min(d, w.cfg.LockedDelay)
}

func (w *Worker) backoff(receives int) time.Duration {
	d := w.cfg.FailureBackoff
	for i := 1; i < receives && d < w.cfg.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, w.cfg.MaxBackoff)
}

// delete removes a message whose outcome is recorded. A failed delete
// leaves it to come again: the account is found with nothing due.
func (w *Worker) delete(sm types.Message, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.RequestTimeout)
	defer cancel()
	if _, err := w.api.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(w.cfg.QueueURL), ReceiptHandle: sm.ReceiptHandle}); err != nil {
		log.Warn("billing queue: delete failed; the message comes again and finds nothing due", "error", err)
	}
}

func (w *Worker) setVisibility(sm types.Message, d time.Duration, why string) {
	if err := w.changeVisibility(sm, d); err != nil {
		w.log.Warn("billing queue: could not change a message's visibility; it keeps the one it has",
			"why", why, "message_id", aws.ToString(sm.MessageId), "error", err)
	}
}

func (w *Worker) changeVisibility(sm types.Message, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.RequestTimeout)
	defer cancel()
	_, err := w.api.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(w.cfg.QueueURL),
		ReceiptHandle: sm.ReceiptHandle, VisibilityTimeout: int32(min(d, maxVisibility) / time.Second)})
	return err
}

// maxVisibility is below SQS's limit of 12 hours from the receipt.
const maxVisibility = 11 * time.Hour

// drainLoop closes the drained runs and counts the overdue ones.
func (w *Worker) drainLoop(ctx context.Context) {
	t := time.NewTicker(w.cfg.DrainEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.CloseDrained(ctx)
	}
}

// CloseDrained marks the drained runs (calling onDrained for each) and
// reports the overdue ones; the worker calls it every DrainEvery.
func (w *Worker) CloseDrained(ctx context.Context) {
	drained, err := w.runs.CloseDrained(ctx)
	if err != nil && ctx.Err() == nil {
		w.log.Warn("billing queue: could not look for drained runs", "error", err)
	}
	for _, p := range drained {
		w.log.Info("billing queue: run drained", "run", p.ID, "job", p.Job, "date", p.Date.String(), "test_clock", p.Clock,
			"enqueued", p.Enqueued, "collected", p.Collected, "nothing_due", p.NothingDue, "failed", p.Failed(), "replicas", p.Replicas)
		w.onDrained(ctx, p)
	}
	n, err := w.runs.Overdue(ctx)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("billing queue: could not count the overdue runs", "error", err)
		}
		return
	}
	w.obs.Overdue(n)
	w.depth(ctx)
}

// depth reports the queue's approximate message counts.
func (w *Worker) depth(ctx context.Context) {
	visible, inFlight := types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible
	rctx, cancel := context.WithTimeout(ctx, w.cfg.RequestTimeout)
	defer cancel()
	out, err := w.api.GetQueueAttributes(rctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(w.cfg.QueueURL),
		AttributeNames: []types.QueueAttributeName{visible, inFlight}})
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("billing queue: could not read the queue's depth", "error", err)
		}
		return
	}
	v, _ := strconv.Atoi(out.Attributes[string(visible)])
	f, _ := strconv.Atoi(out.Attributes[string(inFlight)])
	w.obs.Depth(v, f)
}

type nopObserver struct{}

func (nopObserver) Finished(string) {}
func (nopObserver) Overdue(int)     {}
func (nopObserver) Depth(int, int)  {}
