package billingqueue_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billingqueue"
	"github.com/stripe-payments/stripe-payments/internal/opsdata"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// The worker against the real local SQS server (a FIFO queue with a
// redrive policy, as Terraform creates it) and the real Postgres run
// store; the account collector is the test's, since what is under test is
// what the worker does with each message.

var runDate = dates.New(2026, time.March, 2)

type fixture struct {
	client *sqs.Client
	queue  testenv.Queue
	runs   *opsdata.QueueRuns
	log    *slog.Logger
}

func newFixture(t *testing.T, visibility time.Duration, maxReceives int) *fixture {
	t.Helper()
	client := testenv.SQS(t)
	return &fixture{client: client, queue: testenv.CreateFIFOQueue(t, client, visibility, maxReceives),
		runs: opsdata.NewQueueRuns(testenv.Postgres(t)), log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
}

func (f *fixture) enqueuer(cfg billingqueue.EnqueuerConfig) *billingqueue.Enqueuer {
	cfg.QueueURL = f.queue.URL
	return billingqueue.NewEnqueuer(cfg, f.client, f.runs, f.log)
}

// enqueue runs one enqueue of accounts (one entry each) for runDate.
func (f *fixture) enqueue(t *testing.T, accounts ...string) billingqueue.Enqueued {
	t.Helper()
	out, err := f.enqueuer(billingqueue.EnqueuerConfig{}).Enqueue(context.Background(), billingqueue.RunStart{Job: "collect", Date: runDate}, time.Time{},
		addAll(accounts))
	require.NoError(t, err)
	return out
}

func addAll(accounts []string) func(context.Context, billingqueue.Add) error {
	return func(_ context.Context, add billingqueue.Add) error {
		for _, a := range accounts {
			if err := add(a, []billingqueue.Entry{{PK: "ACC#" + a, SK: "SUB#s1#SKU#basic", Date: runDate, Kind: 1}}); err != nil {
				return err
			}
		}
		return nil
	}
}

func (f *fixture) config(maxReceives int) billingqueue.WorkerConfig {
	return billingqueue.WorkerConfig{QueueURL: f.queue.URL, Workers: 4, MaxReceives: maxReceives, WaitTime: time.Second,
		Visibility: 5 * time.Second, LockedDelay: time.Second, FailureBackoff: time.Second, DrainEvery: 200 * time.Millisecond, Replica: "test"}
}

// start runs a worker until the test ends or stop is called.
func (f *fixture) start(t *testing.T, cfg billingqueue.WorkerConfig, api billingqueue.ReceiveAPI, runs billingqueue.RunStore, c billingqueue.AccountCollector) (stop func()) {
	t.Helper()
	if api == nil {
		api = f.client
	}
	if runs == nil {
		runs = f.runs
	}
	w := billingqueue.NewWorker(cfg, api, c, runs, nil, nil, f.log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx)
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// messagesLeft counts the queue's messages, visible or in flight.
func messagesLeft(t *testing.T, client *sqs.Client, url string) int {
	t.Helper()
	out, err := client.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	require.NoError(t, err)
	n := 0
	for _, k := range []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible} {
		v, _ := strconv.Atoi(out.Attributes[string(k)])
		n += v
	}
	return n
}

func (f *fixture) progress(t *testing.T, run string) billingqueue.Progress {
	t.Helper()
	p, err := f.runs.Progress(context.Background(), run)
	require.NoError(t, err)
	return p
}

// collectorFunc is an AccountCollector.
type collectorFunc func(ctx context.Context, m billingqueue.Message) (billingqueue.Counts, error)

func (f collectorFunc) CollectAccount(ctx context.Context, m billingqueue.Message) (billingqueue.Counts, error) {
	return f(ctx, m)
}

// calls records each account's collection times.
type calls struct {
	mu sync.Mutex
	at map[string][]time.Time
}

func (c *calls) add(account string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at == nil {
		c.at = map[string][]time.Time{}
	}
	c.at[account] = append(c.at[account], time.Now())
	return len(c.at[account])
}

func (c *calls) of(account string) []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.at[account]...)
}

var charged = billingqueue.Counts{Entries: 1, Succeeded: 1}

// failingRecords fails the first n Records.
type failingRecords struct {
	billingqueue.RunStore
	left atomic.Int32
}

func (r *failingRecords) Record(ctx context.Context, res billingqueue.Result) error {
	if r.left.Add(-1) >= 0 {
		return errors.New("postgres unavailable")
	}
	return r.RunStore.Record(ctx, res)
}

// A message is deleted only once its outcome is recorded: when the record
// fails, the message comes back and the account is collected again (the
// billing core finds it done: idempotent), and the run counts it once.
func TestMessageDeletedOnlyOnceItsOutcomeIsRecorded(t *testing.T) {
	f := newFixture(t, 30*time.Second, 5)
	out := f.enqueue(t, "acct_rec")
	require.Equal(t, 1, out.Messages)
	var c calls
	runs := &failingRecords{RunStore: f.runs}
	runs.left.Store(1)
	f.start(t, f.config(5), nil, runs, collectorFunc(func(_ context.Context, m billingqueue.Message) (billingqueue.Counts, error) {
		if c.add(m.Account) == 1 {
			return charged, nil
		}
		return billingqueue.Counts{Entries: 1, Skipped: 1}, nil // the second time: already charged
	}))
	require.Eventually(t, func() bool { return f.progress(t, out.Run.ID).Drained }, 20*time.Second, 100*time.Millisecond)
	assert.Len(t, c.of("acct_rec"), 2, "the record failed the first time: the message came back")
	p := f.progress(t, out.Run.ID)
	assert.Equal(t, 1, p.Done(), "one outcome for the message")
	assert.Equal(t, 1, p.NothingDue, "the recorded outcome is the second delivery's: the charge was the first's")
	assert.Equal(t, 0, messagesLeft(t, f.client, f.queue.URL), "deleted once recorded")
}

// A later delivery of a message already recorded collected (its delete
// failed) finds nothing due: that never replaces the collection, nor does
// a locked one.
func TestRecordKeepsTheCollectionOverALaterNothingDue(t *testing.T) {
	f := newFixture(t, 30*time.Second, 5)
	out := f.enqueue(t, "acct_twice")
	ctx := context.Background()
	rec := func(o billingqueue.Outcome, c billingqueue.Counts) {
		require.NoError(t, f.runs.Record(ctx, billingqueue.Result{Run: out.Run.ID, Account: "acct_twice", Outcome: o, Counts: c, Receives: 1}))
	}
	rec(billingqueue.Locked, billingqueue.Counts{})
	assert.Equal(t, 1, f.progress(t, out.Run.ID).Locked)
	rec(billingqueue.Collected, charged)
	rec(billingqueue.NothingDue, billingqueue.Counts{Entries: 1, Skipped: 1})
	rec(billingqueue.Locked, billingqueue.Counts{})
	p := f.progress(t, out.Run.ID)
	assert.Equal(t, 1, p.Collected)
	assert.Equal(t, 0, p.NothingDue+p.Locked)
	assert.Equal(t, 1, p.Counts.Succeeded)
}

// A locked account's message comes back after LockedDelay, and is then
// collected; the run shows it waiting meanwhile.
func TestLockedAccountComesBackAfterTheDelay(t *testing.T) {
	f := newFixture(t, 30*time.Second, 5)
	out := f.enqueue(t, "acct_locked", "acct_free")
	var c calls
	release := make(chan struct{})
	f.start(t, f.config(5), nil, nil, collectorFunc(func(_ context.Context, m billingqueue.Message) (billingqueue.Counts, error) {
		if c.add(m.Account) == 1 && m.Account == "acct_locked" {
			return billingqueue.Counts{}, fmt.Errorf("account %s: %w", m.Account, billingqueue.ErrLocked)
		}
		if m.Account == "acct_locked" {
			<-release
		}
		return charged, nil
	}))
	require.Eventually(t, func() bool { return len(c.of("acct_locked")) == 2 }, 20*time.Second, 50*time.Millisecond)
	p := f.progress(t, out.Run.ID)
	assert.Equal(t, 1, p.Locked, "shown waiting for its lock")
	assert.False(t, p.Drained)
	close(release)
	require.Eventually(t, func() bool { return f.progress(t, out.Run.ID).Drained }, 20*time.Second, 100*time.Millisecond)
	at := c.of("acct_locked")
	assert.GreaterOrEqual(t, at[1].Sub(at[0]), 900*time.Millisecond, "came back after LockedDelay, not at once")
	p = f.progress(t, out.Run.ID)
	assert.Equal(t, 2, p.Collected)
	assert.Equal(t, 0, p.Locked)
	assert.Equal(t, 0, messagesLeft(t, f.client, f.queue.URL))
}

// A message that fails on every receive is recorded dead on its last
// (MaxReceives) receive, moves to the dead-letter queue by the redrive
// policy, ends the run's wait, and is an incident's source naming its
// account until a later collection of the account succeeds.
func TestMessageFailingEveryReceiveGoesToTheDeadLetterQueue(t *testing.T) {
	const maxReceives = 3
	f := newFixture(t, 30*time.Second, maxReceives)
	out := f.enqueue(t, "acct_broken", "acct_fine")
	var c calls
	f.start(t, f.config(maxReceives), nil, nil, collectorFunc(func(_ context.Context, m billingqueue.Message) (billingqueue.Counts, error) {
		c.add(m.Account)
		if m.Account == "acct_broken" {
			return billingqueue.Counts{}, errors.New("dynamodb: throttled")
		}
		return charged, nil
	}))
	require.Eventually(t, func() bool { return f.progress(t, out.Run.ID).Drained }, 30*time.Second, 100*time.Millisecond)
	p := f.progress(t, out.Run.ID)
	assert.Equal(t, 1, p.Dead)
	assert.Equal(t, 1, p.Collected)
	assert.False(t, p.Clean(), "a dead letter keeps the sweep watermark where it was")
	assert.Len(t, c.of("acct_broken"), maxReceives, "tried on every receive, no more")

	// The redrive moves it on the next receive.
	var dlq []types.Message
	require.Eventually(t, func() bool {
		got, err := f.client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(f.queue.DLQURL), WaitTimeSeconds: 1})
		require.NoError(t, err)
		dlq = append(dlq, got.Messages...)
		return len(dlq) > 0
	}, 20*time.Second, 100*time.Millisecond, "the message reached the dead-letter queue")
	m, err := billingqueue.Decode(aws.ToString(dlq[0].Body))
	require.NoError(t, err)
	assert.Equal(t, "acct_broken", m.Account)

	groups, err := f.runs.DeadGroups(context.Background(), 5)
	require.NoError(t, err)
	require.Len(t, groups, 1)
	assert.Equal(t, "acct_broken", groups[0].Account)
	assert.Equal(t, []string{out.Run.ID}, groups[0].Samples)
}

// receiveThenShutDown cancels the worker's context as a receive answers,
// as a SIGTERM arriving during the long poll does.
type receiveThenShutDown struct {
	*sqs.Client
	cancel func()
	got    atomic.Int32
}

func (r *receiveThenShutDown) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	out, err := r.Client.ReceiveMessage(ctx, in, opts...)
	if err == nil && len(out.Messages) > 0 {
		r.got.Add(int32(len(out.Messages)))
		r.cancel()
	}
	return out, err
}

// Messages received as the worker shuts down are not started: they are
// given back at once (not after the 30 s visibility timeout) for another
// replica.
func TestShutdownGivesBackMessagesNotStarted(t *testing.T) {
	f := newFixture(t, 30*time.Second, 5)
	out := f.enqueue(t, "acct_a", "acct_b")
	ctx, cancel := context.WithCancel(context.Background())
	api := &receiveThenShutDown{Client: f.client, cancel: cancel}
	var c calls
	w := billingqueue.NewWorker(f.config(5), api, collectorFunc(func(_ context.Context, m billingqueue.Message) (billingqueue.Counts, error) {
		c.add(m.Account)
		return charged, nil
	}), f.runs, nil, nil, f.log)
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the worker did not stop")
	}
	require.Positive(t, api.got.Load(), "a receive answered during the shutdown")
	assert.Empty(t, c.of("acct_a"))
	assert.Empty(t, c.of("acct_b"))

	// Another replica gets them now, long before the visibility timeout.
	start := time.Now()
	var got []types.Message
	for time.Since(start) < 10*time.Second && len(got) < 2 {
		r, err := f.client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(f.queue.URL), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		require.NoError(t, err)
		got = append(got, r.Messages...)
	}
	assert.Len(t, got, 2, "both messages given back at once")
	assert.Less(t, time.Since(start), 10*time.Second)
	assert.Equal(t, 0, f.progress(t, out.Run.ID).Done())
}

// A shutdown lets the collections in hand finish; their messages are
// deleted once recorded.
func TestShutdownFinishesTheAccountsInHand(t *testing.T) {
	f := newFixture(t, 30*time.Second, 5)
	out := f.enqueue(t, "acct_slow")
	started := make(chan struct{})
	release := make(chan struct{})
	stop := f.start(t, f.config(5), nil, nil, collectorFunc(func(ctx context.Context, m billingqueue.Message) (billingqueue.Counts, error) {
		close(started)
		<-release
		return charged, ctx.Err()
	}))
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("never collected")
	}
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	time.Sleep(300 * time.Millisecond)
	select {
	case <-stopped:
		t.Fatal("the worker stopped with an account in hand")
	default:
	}
	close(release)
	<-stopped
	p := f.progress(t, out.Run.ID)
	assert.Equal(t, 1, p.Collected, "the collection in hand was not cancelled by the shutdown")
	assert.Equal(t, 0, messagesLeft(t, f.client, f.queue.URL))
}

// Two replicas starting the same run at once open one run: one enqueues
// every account once, the other joins it and sends nothing.
func TestTwoReplicasStartingTheSameRunEnqueueOnce(t *testing.T) {
	f := newFixture(t, 30*time.Second, 5)
	accounts := make([]string, 25)
	for i := range accounts {
		accounts[i] = fmt.Sprintf("acct_%02d", i)
	}
	var (
		wg   sync.WaitGroup
		outs [2]billingqueue.Enqueued
		errs [2]error
	)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], errs[i] = f.enqueuer(billingqueue.EnqueuerConfig{}).Enqueue(context.Background(),
				billingqueue.RunStart{Job: "collect", Date: runDate}, time.Time{}, addAll(accounts))
		}()
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	assert.Equal(t, outs[0].Run.ID, outs[1].Run.ID, "one run")
	assert.True(t, outs[0].Joined != outs[1].Joined, "one opened it, the other joined")
	assert.Equal(t, len(accounts), outs[0].Messages+outs[1].Messages, "every account sent once")

	seen := map[string]int{}
	for len(seen) < len(accounts) {
		r, err := f.client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(f.queue.URL), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		require.NoError(t, err)
		if len(r.Messages) == 0 {
			break
		}
		for _, m := range r.Messages {
			msg, err := billingqueue.Decode(aws.ToString(m.Body))
			require.NoError(t, err)
			seen[msg.Account]++
			_, err = f.client.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: aws.String(f.queue.URL), ReceiptHandle: m.ReceiptHandle})
			require.NoError(t, err)
		}
	}
	assert.Len(t, seen, len(accounts))
	for a, n := range seen {
		assert.Equal(t, 1, n, a)
	}
}

// An enqueue killed half-way (its replica died: no heartbeat) does not
// block its date: once its heartbeat is StaleAfter old, the next start
// supersedes it and enqueues again. While it is alive, a start joins it.
func TestAQuietEnqueueIsSuperseded(t *testing.T) {
	f := newFixture(t, 30*time.Second, 5)
	ctx := context.Background()
	start := billingqueue.RunStart{Job: "collect", Date: runDate, StaleAfter: time.Second, Deadline: time.Hour}
	dead, joined, err := f.runs.Begin(ctx, start)
	require.NoError(t, err)
	require.False(t, joined)
	again, joined, err := f.runs.Begin(ctx, start)
	require.NoError(t, err)
	assert.True(t, joined, "alive: joined")
	assert.Equal(t, dead.ID, again.ID)

	time.Sleep(1200 * time.Millisecond)
	out, err := f.enqueuer(billingqueue.EnqueuerConfig{StaleAfter: time.Second}).Enqueue(ctx, billingqueue.RunStart{Job: "collect", Date: runDate}, time.Time{}, addAll([]string{"acct_x"}))
	require.NoError(t, err)
	assert.False(t, out.Joined)
	assert.NotEqual(t, dead.ID, out.Run.ID)
	assert.Equal(t, 1, out.Messages)
	assert.True(t, f.progress(t, dead.ID).Superseded)
}
