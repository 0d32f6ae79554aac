package lock_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
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

func TestKey(t *testing.T) {
	assert.Equal(t, "subscription-billing:user_id:u-42", lock.Key("u-42"))
}

func TestContentionOnlyOneOfNWins(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 8
	key := lock.Key("contended")
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

func TestHeartbeatKeepsTheLockPastItsLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const lease, beat = 300 * time.Millisecond, 40 * time.Millisecond
	key := lock.Key("kept")
	holder, err := e.client("holder", lease, beat).Acquire(context.Background(), key, true)
	require.NoError(t, err)
	first := e.rvn(t, key)

	// A waiting contender polls for four leases and never gets it.
	ctx, cancel := context.WithTimeout(context.Background(), 4*lease)
	defer cancel()
	_, err = e.client("contender", lease, beat).Acquire(ctx, key, false)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.True(t, holder.Valid())
	assert.NoError(t, holder.Context().Err())
	assert.NotEqual(t, first, e.rvn(t, key), "the heartbeat replaces the record version number")
	require.NoError(t, holder.Release(context.Background()))
	assert.Error(t, holder.Context().Err(), "released: the lock's context ends")
}

func TestDeadHolderIsTakenOverOnlyAfterTheLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const lease, beat = 400 * time.Millisecond, 50 * time.Millisecond
	key := lock.Key("dead")
	dead, err := e.client("dead", lease, beat).Acquire(context.Background(), key, true)
	require.NoError(t, err)
	dead.Abandon() // the process died: no more heartbeats, no release

	heir := e.client("heir", lease, beat)
	start := time.Now()
	_, err = heir.Acquire(context.Background(), key, true)
	require.ErrorIs(t, err, lock.ErrAlreadyLocked, "fail-if-locked: the first sight only starts the watch")

	// Fail-if-locked again before a lease has passed: still refused.
	time.Sleep(lease / 2)
	_, err = heir.Acquire(context.Background(), key, true)
	require.ErrorIs(t, err, lock.ErrAlreadyLocked)

	// After a whole lease with the same RVN, the takeover succeeds.
	time.Sleep(lease/2 + 20*time.Millisecond)
	l, err := heir.Acquire(context.Background(), key, true)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(start), lease)

	// The dead holder, were it to wake up, can no longer release it.
	assert.ErrorIs(t, dead.Release(context.Background()), lock.ErrNotOwner)
	require.NoError(t, l.Release(context.Background()))

	t.Run("a waiting acquire takes over by itself", func(t *testing.T) {
		d2, err := e.client("dead2", lease, beat).Acquire(context.Background(), key, true)
		require.NoError(t, err)
		d2.Abandon()
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 5*lease)
		defer cancel()
		l, err := e.client("waiter", lease, beat).Acquire(ctx, key, false)
		require.NoError(t, err)
		assert.GreaterOrEqual(t, time.Since(start), lease)
		require.NoError(t, l.Release(context.Background()))
	})
}

func TestNonOwnerCannotRelease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key := lock.Key("owned")
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
	key := lock.Key("stolen")
	held, err := e.client("victim", 2*time.Second, 30*time.Millisecond).Acquire(context.Background(), key, true)
	require.NoError(t, err)
	// An operator deletes the record (the stuck-lock runbook): the next
	// heartbeat's condition fails and work under the lock is cancelled.
	_, err = e.db.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{
		TableName: aws.String(e.table),
		Key:       map[string]types.AttributeValue{"PartitionKey": &types.AttributeValueMemberS{Value: key}},
	})
	require.NoError(t, err)
	select {
	case <-held.Context().Done():
	case <-time.After(2 * time.Second):
		t.Fatal("the holder did not notice")
	}
	assert.False(t, held.Valid())
	assert.True(t, errors.Is(context.Cause(held.Context()), lock.ErrNotOwner))
	assert.ErrorIs(t, held.Release(context.Background()), lock.ErrNotOwner)
}
