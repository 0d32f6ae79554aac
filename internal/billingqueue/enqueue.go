package billingqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// SendAPI is the part of the SQS client the enqueuer uses (*sqs.Client).
type SendAPI interface {
	SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
}

// Defaults of EnqueuerConfig.
const (
	DefaultSenders    = 4
	DefaultStaleAfter = 2 * time.Minute
	DefaultDeadline   = 6 * time.Hour
	// maxBatchBytes keeps a SendMessageBatch under SQS's 256 KiB total.
	maxBatchBytes = 200 << 10
	// sendAttempts: a batch entry SQS refused is sent again (same
	// deduplication id) this many times in all before the run fails.
	sendAttempts = 5
)

// EnqueuerConfig configures an Enqueuer.
type EnqueuerConfig struct {
	QueueURL string
	// Senders: concurrent SendMessageBatch calls.
	Senders int
	// StaleAfter and Deadline: see RunStart.
	StaleAfter, Deadline time.Duration
	// Heartbeat: how often the enqueuer reports itself alive (and its
	// count so far); StaleAfter/4 when zero.
	Heartbeat time.Duration
}

// Enqueuer sends a run's accounts to the queue.
type Enqueuer struct {
	cfg  EnqueuerConfig
	api  SendAPI
	runs RunStore
	log  *slog.Logger
}

// NewEnqueuer returns an enqueuer on queue cfg.QueueURL.
func NewEnqueuer(cfg EnqueuerConfig, api SendAPI, runs RunStore, log *slog.Logger) *Enqueuer {
	if cfg.Senders <= 0 {
		cfg.Senders = DefaultSenders
	}
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = DefaultStaleAfter
	}
	if cfg.Deadline <= 0 {
		cfg.Deadline = DefaultDeadline
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = cfg.StaleAfter / 4
	}
	return &Enqueuer{cfg: cfg, api: api, runs: runs, log: log.With("component", "billing-queue", "queue_url", cfg.QueueURL)}
}

// Runs is the run store the enqueuer records in.
func (e *Enqueuer) Runs() RunStore { return e.runs }

// Add hands one account's due entries to the run.
type Add func(account string, entries []Entry) error

// Enqueued is what an enqueue did.
type Enqueued struct {
	Run Run
	// Joined: a run for the same job, clock and date was open already
	// (another replica's, or an earlier one still draining): nothing was
	// sent; its workers collect what is due.
	Joined   bool
	Messages int
	Accounts int
}

// Enqueue opens the run (or joins the open one) and calls accounts, which
// hands each account with something due to add; every account becomes a
// message. clockNow is the test clock's time during the run (zero: real
// time).
func (e *Enqueuer) Enqueue(ctx context.Context, start RunStart, clockNow time.Time, accounts func(ctx context.Context, add Add) error) (Enqueued, error) {
	start.StaleAfter, start.Deadline = e.cfg.StaleAfter, e.cfg.Deadline
	run, joined, err := e.runs.Begin(ctx, start)
	if err != nil {
		return Enqueued{}, fmt.Errorf("billing queue: open the run: %w", err)
	}
	out := Enqueued{Run: run, Joined: joined}
	log := e.log.With("run", run.ID, "job", run.Job, "date", run.Date.String(), "test_clock", run.Clock)
	if joined {
		log.Info("billing queue: a run for this date is open already; joined it instead of enqueuing again")
		return out, nil
	}
	var sent, accountsN atomic.Int64
	msgs := make(chan Message)
	sendCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for range e.cfg.Senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := e.sender(sendCtx, msgs, &sent); err != nil {
				cancel(err)
			}
		}()
	}
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		t := time.NewTicker(e.cfg.Heartbeat)
		defer t.Stop()
		for {
			select {
			case <-sendCtx.Done():
				return
			case <-t.C:
				if err := e.runs.Enqueuing(sendCtx, run.ID, int(sent.Load())); err != nil && sendCtx.Err() == nil {
					log.Warn("billing queue: could not report the enqueue alive", "error", err)
				}
			}
		}
	}()
	base := Message{Run: run.ID, Job: run.Job, Clock: run.Clock, ClockNow: clockNow, Date: run.Date}
	readErr := accounts(sendCtx, func(account string, entries []Entry) error {
		b := base
		b.Account = account
		accountsN.Add(1)
		for _, m := range split(b, entries) {
			select {
			case msgs <- m:
			case <-sendCtx.Done():
				return context.Cause(sendCtx)
			}
		}
		return nil
	})
	close(msgs)
	wg.Wait()
	cause := context.Cause(sendCtx)
	cancel(nil)
	<-hbDone
	out.Messages, out.Accounts = int(sent.Load()), int(accountsN.Load())
	runErr := errors.Join(readErr, cause)
	if errors.Is(cause, context.Canceled) && readErr != nil {
		runErr = readErr
	}
	if err := e.runs.Enqueued(context.WithoutCancel(ctx), run.ID, out.Messages, runErr); err != nil {
		runErr = errors.Join(runErr, fmt.Errorf("billing queue: record the enqueue: %w", err))
	}
	if runErr != nil {
		return out, fmt.Errorf("billing queue: enqueue run %s: %w", run.ID, runErr)
	}
	log.Info("billing queue: run enqueued", "accounts", out.Accounts, "messages", out.Messages)
	return out, nil
}

// sender batches messages from msgs (ten, or fewer bytes than SQS takes)
// and sends them.
func (e *Enqueuer) sender(ctx context.Context, msgs <-chan Message, sent *atomic.Int64) error {
	var (
		batch []types.SendMessageBatchRequestEntry
		size  int
	)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := e.send(ctx, batch); err != nil {
			return err
		}
		sent.Add(int64(len(batch)))
		batch, size = nil, 0
		return nil
	}
	for m := range msgs {
		body, err := json.Marshal(m)
		if err != nil {
			return fmt.Errorf("encode message of %s: %w", m.Account, err)
		}
		if len(batch) == 10 || (len(batch) > 0 && size+len(body) > maxBatchBytes) {
			if err := flush(); err != nil {
				return err
			}
		}
		batch = append(batch, types.SendMessageBatchRequestEntry{
			Id:                     aws.String(strconv.Itoa(len(batch))),
			MessageBody:            aws.String(string(body)),
			MessageGroupId:         aws.String(groupID(m.Account)),
			MessageDeduplicationId: aws.String(dedupID(m)),
		})
		size += len(body)
	}
	return flush()
}

// send sends one batch, again for the entries SQS refused (their
// deduplication ids make a resend of one it took harmless).
func (e *Enqueuer) send(ctx context.Context, batch []types.SendMessageBatchRequestEntry) error {
	pending := batch
	var last error
	for attempt := range sendAttempts {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
			}
		}
		out, err := e.api.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(e.cfg.QueueURL), Entries: pending})
		if err != nil {
			last = fmt.Errorf("send to %s: %w", e.cfg.QueueURL, err)
			continue
		}
		if len(out.Failed) == 0 {
			return nil
		}
		byID := map[string]types.SendMessageBatchRequestEntry{}
		for _, p := range pending {
			byID[aws.ToString(p.Id)] = p
		}
		var again []types.SendMessageBatchRequestEntry
		for _, f := range out.Failed {
			last = fmt.Errorf("send to %s: %s: %s", e.cfg.QueueURL, aws.ToString(f.Code), aws.ToString(f.Message))
			if f.SenderFault {
				return last
			}
			again = append(again, byID[aws.ToString(f.Id)])
		}
		pending = again
	}
	return last
}
