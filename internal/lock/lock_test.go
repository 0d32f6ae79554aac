package lock_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/dynamo"
	"github.com/stripe-payments/stripe-payments/internal/lock"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type env struct {
	db    *dynamodb.Client
	table string
}

func newEnv(t *testing.T) env {
	t.Helper()
	db := testenv.Dynamo(t)
	table := testenv.TableName("locks")
	testenv.CreateTables(t, db, dynamo.LocksTable(table))
	return env{db: db, table: table}
}

func (e env) client(owner string, lease, heartbeat time.Duration) *lock.Client {
	return lock.New(e.db, e.table, lock.Options{Owner: owner, Lease: lease, Heartbeat: heartbeat, Log: quiet})
}

func (e env) rvn(t *testing.T, key string) string {
	t.Helper()
	out, err := e.db.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(e.table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"PartitionKey": &types.AttributeValueMemberS{Value: key}},
	})
	require.NoError(t, err)
	if v, ok := out.Item["recordVersionNumber"].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func TestContentionOnlyOneOfNWins(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 8
	key := "test:contended"
	var wg sync.WaitGroup
	start := make(chan struct{})
	locks := make([]*lock.Lock, n)
	errs := make([]error, n)
	for i := range n {
		c := e.client(fmt.Sprintf("owner-%d", i), 5*time.Second, 100*time.Millisecond)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			locks[i], errs[i] = c.Acquire(context.Background(), key, true)
		}()
	}
	close(start)
	wg.Wait()
	won := 0
	for i := range n {
		if errs[i] == nil {
			won++
			require.NoError(t, locks[i].Release(context.Background()))
			continue
		}
		assert.ErrorIs(t, errs[i], lock.ErrAlreadyLocked)
	}
	assert.Equal(t, 1, won, "errors: %v", errs)
	// Released: the next one gets it.
	l, err := e.client("late", 5*time.Second, time.Second).Acquire(context.Background(), key, true)
	require.NoError(t, err)
	require.NoError(t, l.Release(context.Background()))
}

// manualClock is a lock client's clock that moves only when the test says
// (Options.Now): the lease tests decide what "a whole lease has passed"
// means on the observer's clock, so they hold however slow the machine is
// (-race on two busy cores) and never sleep to make time pass.
type manualClock struct {
	mu    sync.Mutex
	now   time.Time
	reads int
}

func newManualClock() *manualClock { return &manualClock{now: time.Now()} }

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads++
	return c.now
}

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Reads is how often the client looked at the clock: once per acquire
// attempt that found the lock held.
func (c *manualClock) Reads() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads
}

func (e env) clientAt(owner string, lease, heartbeat time.Duration, clock *manualClock) *lock.Client {
	return lock.New(e.db, e.table, lock.Options{Owner: owner, Lease: lease, Heartbeat: heartbeat, Log: quiet, Now: clock.Now})
}

// eventually waits for cond, polling; the deadline is far beyond any normal
// duration: it only bounds a broken run.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestHeartbeatKeepsTheLockPastItsLease: as long as the holder heartbeats,
// a contender never takes over, however much time passes on the
// contender's clock between its looks: each heartbeat replaces the RVN, and
// only an RVN unchanged for a whole lease means a dead holder.
func TestHeartbeatKeepsTheLockPastItsLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const lease, beat = 30 * time.Second, 20 * time.Millisecond
	key := "test:kept"
	holder, err := e.client("holder", lease, beat).Acquire(context.Background(), key, true)
	require.NoError(t, err)

	clock := newManualClock()
	contender := e.clientAt("contender", lease, beat, clock)
	for round := range 5 {
		_, err = contender.Acquire(context.Background(), key, true)
		require.ErrorIs(t, err, lock.ErrAlreadyLocked, "round %d", round)
		// The RVN the contender saw, or a later one: RVNs never repeat, so
		// a change from this one is a heartbeat after the contender's look.
		seen := e.rvn(t, key)
		// Two leases pass on the contender's clock while the holder beats
		// at least once (event: the RVN in the table moved).
		clock.Advance(2 * lease)
		eventually(t, "a heartbeat", func() bool { return e.rvn(t, key) != seen })
		_, err = contender.Acquire(context.Background(), key, true)
		require.ErrorIs(t, err, lock.ErrAlreadyLocked, "round %d: a beating holder keeps the lock", round)
	}
	assert.True(t, holder.Valid())
	assert.NoError(t, holder.Context().Err())
	require.NoError(t, holder.Release(context.Background()))
	assert.Error(t, holder.Context().Err(), "released: the lock's context ends")
	assert.False(t, holder.Valid())
}

// TestDeadHolderIsTakenOverOnlyAfterTheLease: a holder that stopped
// heartbeating keeps its lock until the heir has watched the same RVN for a
// whole lease on its own clock, and not a nanosecond less.
func TestDeadHolderIsTakenOverOnlyAfterTheLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const lease, beat = 30 * time.Second, 20 * time.Millisecond
	key := "test:dead"
	dead, err := e.client("dead", lease, beat).Acquire(context.Background(), key, true)
	require.NoError(t, err)
	dead.Abandon() // the process died: no more heartbeats, no release

	clock := newManualClock()
	heir := e.clientAt("heir", lease, beat, clock)
	_, err = heir.Acquire(context.Background(), key, true)
	require.ErrorIs(t, err, lock.ErrAlreadyLocked, "fail-if-locked: the first sight only starts the watch")

	for _, step := range []time.Duration{lease / 2, lease/2 - time.Nanosecond} {
		clock.Advance(step)
		_, err = heir.Acquire(context.Background(), key, true)
		require.ErrorIs(t, err, lock.ErrAlreadyLocked, "less than a lease watched: still refused")
	}
	// A whole lease with the same RVN: the takeover succeeds.
	clock.Advance(time.Nanosecond)
	l, err := heir.Acquire(context.Background(), key, true)
	require.NoError(t, err)

	// The dead holder, were it to wake up, can no longer release it.
	assert.ErrorIs(t, dead.Release(context.Background()), lock.ErrNotOwner)
	require.NoError(t, l.Release(context.Background()))

	t.Run("a waiting acquire takes over by itself", func(t *testing.T) {
		d2, err := e.client("dead2", lease, beat).Acquire(context.Background(), key, true)
		require.NoError(t, err)
		d2.Abandon()
		clock := newManualClock()
		waiter := e.clientAt("waiter", lease, beat, clock)
		got := make(chan error, 1)
		var l *lock.Lock
		go func() {
			var err error
			l, err = waiter.Acquire(context.Background(), key, false)
			got <- err
		}()
		// It polls (each poll reads its clock) and keeps waiting while no
		// lease has passed on its clock.
		eventually(t, "three polls", func() bool { return clock.Reads() >= 3 })
		select {
		case err := <-got:
			t.Fatalf("took the lock before a lease had passed: %v", err)
		default:
		}
		clock.Advance(lease)
		select {
		case err := <-got:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Fatal("the waiting acquire did not take over")
		}
		require.NoError(t, l.Release(context.Background()))
	})
}

func TestNonOwnerCannotRelease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key := "test:owned"
	ownerClient := e.client("owner", 5*time.Second, time.Second)
	held, err := ownerClient.Acquire(context.Background(), key, true)
	require.NoError(t, err)

	intruder := e.client("intruder", 5*time.Second, time.Second)
	assert.ErrorIs(t, intruder.ReleaseRecord(context.Background(), key, held.RVN()), lock.ErrNotOwner,
		"another owner, even knowing the RVN")
	assert.ErrorIs(t, ownerClient.ReleaseRecord(context.Background(), key, "not-the-rvn"), lock.ErrNotOwner,
		"the right owner with a stale RVN")
	_, err = intruder.Acquire(context.Background(), key, true)
	assert.ErrorIs(t, err, lock.ErrAlreadyLocked, "the lock is still held")
	require.NoError(t, held.Release(context.Background()))
	assert.ErrorIs(t, held.Release(context.Background()), lock.ErrNotOwner, "a second release finds nothing")
}

func TestHolderNoticesALostLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key := "test:stolen"
	held, err := e.client("victim", 30*time.Second, 20*time.Millisecond).Acquire(context.Background(), key, true)
	require.NoError(t, err)
	// An operator deletes the record (the stuck-lock runbook): the next
	// heartbeat's condition fails and work under the lock is cancelled.
	_, err = e.db.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{
		TableName: aws.String(e.table),
		Key:       map[string]types.AttributeValue{"PartitionKey": &types.AttributeValueMemberS{Value: key}},
	})
	require.NoError(t, err)
	// The next heartbeat (20 ms) notices; the wait only bounds a broken run.
	select {
	case <-held.Context().Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the holder did not notice")
	}
	assert.False(t, held.Valid())
	assert.True(t, errors.Is(context.Cause(held.Context()), lock.ErrNotOwner))
	assert.ErrorIs(t, held.Release(context.Background()), lock.ErrNotOwner)
}

// slowAnswers is the holder's DynamoDB transport: the first request of op is
// executed by DynamoDB at once but its answer reaches the holder only after
// `delay` (the shared clock moves on while it travels; meanwhile a
// contender looks at the record), and every heartbeat after it is lost on
// the way (a partition): nothing more is written.
type slowAnswers struct {
	op      string
	delay   time.Duration
	clock   *manualClock
	watch   func() // the contender's look, made while the answer travels
	mu      sync.Mutex
	delayed bool
	watched chan struct{}
}

func (s *slowAnswers) RoundTrip(r *http.Request) (*http.Response, error) {
	target := r.Header.Get("X-Amz-Target")
	s.mu.Lock()
	first := !s.delayed && strings.HasSuffix(target, "."+s.op)
	if first {
		s.delayed = true
	}
	lost := !first && s.delayed && strings.HasSuffix(target, ".UpdateItem")
	s.mu.Unlock()
	if lost {
		return nil, errors.New("partition: the heartbeat never reached DynamoDB")
	}
	resp, err := http.DefaultTransport.RoundTrip(r)
	if first && err == nil {
		s.watch()
		s.clock.Advance(s.delay)
		close(s.watched)
	}
	return resp, err
}

// TestLeaseCountsFromTheWriteNotFromItsAnswer: a holder may act on its lock
// only while no one else can have taken it over. A contender takes over once
// it has watched the same RVN for a lease, and it can see that RVN as soon
// as DynamoDB wrote it; so the holder's lease runs from when it sent the
// write (acquire or heartbeat), not from when the answer came back. An
// answer that took 40 % of a lease to arrive must not extend the holder's
// validity past the contender's takeover.
func TestLeaseCountsFromTheWriteNotFromItsAnswer(t *testing.T) {
	t.Parallel()
	for _, op := range []string{"PutItem", "UpdateItem"} { // the acquire, a heartbeat
		t.Run(op, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			const lease, beat = 10 * time.Second, 20 * time.Millisecond
			key := "test:slow-answer-" + op
			clock := newManualClock()
			contender := e.clientAt("contender", lease, beat, clock)
			tr := &slowAnswers{op: op, delay: 4 * time.Second, clock: clock, watched: make(chan struct{})}
			tr.watch = func() {
				_, err := contender.Acquire(context.Background(), key, true)
				assert.ErrorIs(t, err, lock.ErrAlreadyLocked, "the contender's first look starts its watch")
			}
			db := dynamodb.New(e.db.Options(), func(o *dynamodb.Options) { o.HTTPClient = &http.Client{Transport: tr} })
			holderClient := lock.New(db, e.table, lock.Options{Owner: "holder", Lease: lease, Heartbeat: beat, Log: quiet, Now: clock.Now})
			held, err := holderClient.Acquire(context.Background(), key, true)
			require.NoError(t, err)
			defer held.Abandon()
			select {
			case <-tr.watched:
			case <-time.After(30 * time.Second):
				t.Fatal("the delayed write never happened")
			}
			// A lease after the contender first saw the RVN (which no
			// heartbeat replaced since): it takes over.
			clock.Advance(lease - tr.delay + time.Millisecond)
			taken, err := contender.Acquire(context.Background(), key, true)
			require.NoError(t, err, "the RVN stood still for a lease: taken over")
			defer func() { _ = taken.Release(context.Background()) }()
			assert.False(t, held.Valid(), "the holder must not believe it still holds a lock taken over")
		})
	}
}
