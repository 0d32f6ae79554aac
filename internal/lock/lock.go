// Package lock is a DynamoDB lease lock in the manner of the AWS DynamoDB
// lock client (and cirello.io/dynamolock, which cannot be fetched here):
//
//   - A lock is an item keyed by PartitionKey carrying the holder's owner
//     name, its lease duration and a record version number (RVN), a fresh
//     UUID on every write.
//   - Acquiring is a conditional put: the item must not exist.
//   - The holder heartbeats: every Heartbeat it replaces the RVN, on the
//     condition that owner and RVN are still its own. A failed condition
//     means the lock was taken over: the lock's context is cancelled.
//   - A lock whose holder died is taken over only after this client has
//     seen the same RVN for a whole lease duration, measured on its own
//     monotonic clock: a live holder would have changed the RVN meanwhile.
//     No wall clocks of different machines are ever compared. The takeover is
//     itself a conditional put on that RVN.
//   - Release deletes the item on the condition owner = holder AND RVN =
//     current, so nobody else can release it.
//
// Fail-if-locked acquisition returns ErrAlreadyLocked at once, but remembers
// what it saw, so a later attempt by the same Client can take over a dead
// holder's lock once a lease has passed.
package lock

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/uuid"

	"github.com/stripe-payments/stripe-payments/internal/safego"
)

// Errors of the lock vocabulary.
var (
	// ErrAlreadyLocked: another live holder has the lock.
	ErrAlreadyLocked = errors.New("lock already held")
	// ErrNotOwner: the lock is not (or no longer) held by this owner and RVN.
	ErrNotOwner = errors.New("lock not held by this owner")
)

// Options of a Client.
type Options struct {
	// Owner names this holder in lock records; default host-pid-random.
	Owner string
	// Lease is how long a lock stays valid without a heartbeat (default 60 s).
	Lease time.Duration
	// Heartbeat is the refresh period (default 1 s).
	Heartbeat time.Duration
	// Now is the clock: leases are measured with its monotonic readings.
	Now func() time.Time
	Log *slog.Logger
	// Safe recovers a panic in a heartbeat (nil: a starter that only
	// logs): the lock's holder may be moving money, and one bad beat must
	// end neither the process nor the heartbeat.
	Safe *safego.Starter
}

// Client acquires locks in one table.
type Client struct {
	db    *dynamodb.Client
	table string
	opts  Options

	mu   sync.Mutex
	seen map[string]observation
}

// observation: the RVN this client last saw on a key held by someone else,
// and since when (monotonic).
type observation struct {
	rvn   string
	since time.Time
}

// New returns a client for table.
func New(db *dynamodb.Client, table string, opts Options) *Client {
	if opts.Lease <= 0 {
		opts.Lease = 60 * time.Second
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	opts.Safe = opts.Safe.OrDefault(opts.Log)
	if opts.Owner == "" {
		host, _ := os.Hostname()
		opts.Owner = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), uuid.NewString()[:8])
	}
	return &Client{db: db, table: table, opts: opts, seen: map[string]observation{}}
}

// Owner is this client's owner name.
func (c *Client) Owner() string { return c.opts.Owner }

// Lease is the client's lease duration.
func (c *Client) Lease() time.Duration { return c.opts.Lease }

// record is the lock item.
type record struct {
	Key           string `dynamodbav:"PartitionKey"`
	Owner         string `dynamodbav:"owner"`
	RVN           string `dynamodbav:"recordVersionNumber"`
	LeaseDuration int64  `dynamodbav:"leaseDuration"` // milliseconds
	Data          []byte `dynamodbav:"data,omitempty"`
	DeleteOn      int64  `dynamodbav:"deleteOn"`
}

// deleteOn is a wall-clock TTL far beyond any lease: DynamoDB removes a
// record only long after its holder stopped heartbeating. It plays no part
// in deciding who holds the lock.
func (c *Client) deleteOn() int64 {
	return time.Now().Add(24*time.Hour + 10*c.opts.Lease).Unix()
}

// Acquire takes the lock on key. With failIfLocked it returns
// ErrAlreadyLocked when a live holder has it (or this client has not yet
// watched a dead holder's RVN for a whole lease); otherwise it waits, polling
// every heartbeat period, until it gets the lock or ctx ends.
func (c *Client) Acquire(ctx context.Context, key string, failIfLocked bool) (*Lock, error) {
	for {
		l, err := c.tryAcquire(ctx, key)
		if err == nil {
			return l, nil
		}
		if !errors.Is(err, ErrAlreadyLocked) || failIfLocked {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("acquire %s: %w", key, ctx.Err())
		case <-time.After(c.opts.Heartbeat):
		}
	}
}

func (c *Client) tryAcquire(ctx context.Context, key string) (*Lock, error) {
	rvn := uuid.NewString()
	cond := expression.AttributeNotExists(expression.Name("PartitionKey"))
	sent := c.opts.Now() // the lease runs from the write, however late its answer
	err := c.put(ctx, key, rvn, cond)
	if err == nil {
		return c.held(key, rvn, sent), nil
	}
	if !isConditionFailed(err) {
		return nil, fmt.Errorf("acquire %s: %w", key, err)
	}
	cur, found, err := c.get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("acquire %s: %w", key, err)
	}
	if !found {
		// Released between our put and get: try again at once.
		return c.tryAcquire(ctx, key)
	}
	now := c.opts.Now()
	c.mu.Lock()
	obs, ok := c.seen[key]
	if !ok || obs.rvn != cur.RVN {
		obs = observation{rvn: cur.RVN, since: now}
		c.seen[key] = obs
	}
	c.gcLocked(now)
	c.mu.Unlock()

	lease := time.Duration(cur.LeaseDuration) * time.Millisecond
	if lease <= 0 {
		lease = c.opts.Lease
	}
	if now.Sub(obs.since) < lease {
		return nil, fmt.Errorf("%s held by %s: %w", key, cur.Owner, ErrAlreadyLocked)
	}
	// The RVN has not moved for a whole lease: its holder is dead. Take over,
	// provided it still has not moved.
	takeover := expression.Name("recordVersionNumber").Equal(expression.Value(cur.RVN))
	sent = c.opts.Now()
	if err := c.put(ctx, key, rvn, takeover); err != nil {
		if isConditionFailed(err) {
			return nil, fmt.Errorf("%s changed hands: %w", key, ErrAlreadyLocked)
		}
		return nil, fmt.Errorf("take over %s: %w", key, err)
	}
	c.opts.Log.Warn("took over an expired lock", "lock_key", key, "previous_owner", cur.Owner,
		"unchanged_for", now.Sub(obs.since).String())
	return c.held(key, rvn, sent), nil
}

// gcLocked forgets observations old enough to be irrelevant (their key was
// released, or will be taken over on sight anyway).
func (c *Client) gcLocked(now time.Time) {
	if len(c.seen) < 1024 {
		return
	}
	for k, o := range c.seen {
		if now.Sub(o.since) > 10*c.opts.Lease {
			delete(c.seen, k)
		}
	}
}

func (c *Client) put(ctx context.Context, key, rvn string, cond expression.ConditionBuilder) error {
	data := make([]byte, 8)
	binary.BigEndian.PutUint64(data, uint64(time.Now().UnixNano()))
	item, err := attributevalue.MarshalMap(record{
		Key: key, Owner: c.opts.Owner, RVN: rvn, LeaseDuration: c.opts.Lease.Milliseconds(),
		Data: data, DeleteOn: c.deleteOn(),
	})
	if err != nil {
		return err
	}
	expr, err := expression.NewBuilder().WithCondition(cond).Build()
	if err != nil {
		return err
	}
	_, err = c.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                 aws.String(c.table),
		Item:                      item,
		ConditionExpression:       expr.Condition(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
	})
	return err
}

func (c *Client) get(ctx context.Context, key string) (record, bool, error) {
	out, err := c.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(c.table),
		Key:            map[string]types.AttributeValue{"PartitionKey": &types.AttributeValueMemberS{Value: key}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return record{}, false, err
	}
	if len(out.Item) == 0 {
		return record{}, false, nil
	}
	var r record
	if err := attributevalue.UnmarshalMap(out.Item, &r); err != nil {
		return record{}, false, fmt.Errorf("decode lock record: %w", err)
	}
	return r, true, nil
}

// ownedBy is the condition "this owner still holds it with this RVN".
func (c *Client) ownedBy(rvn string) expression.ConditionBuilder {
	return expression.Name("owner").Equal(expression.Value(c.opts.Owner)).
		And(expression.Name("recordVersionNumber").Equal(expression.Value(rvn)))
}

// heartbeat replaces the RVN of a held lock.
func (c *Client) heartbeat(ctx context.Context, key, rvn, next string) error {
	update := expression.Set(expression.Name("recordVersionNumber"), expression.Value(next)).
		Set(expression.Name("deleteOn"), expression.Value(c.deleteOn()))
	expr, err := expression.NewBuilder().WithCondition(c.ownedBy(rvn)).WithUpdate(update).Build()
	if err != nil {
		return err
	}
	_, err = c.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(c.table),
		Key:                       map[string]types.AttributeValue{"PartitionKey": &types.AttributeValueMemberS{Value: key}},
		UpdateExpression:          expr.Update(),
		ConditionExpression:       expr.Condition(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
	})
	if isConditionFailed(err) {
		return ErrNotOwner
	}
	return err
}

// ReleaseRecord deletes the lock on key if this client's owner holds it with
// rvn. Anyone else gets ErrNotOwner and the lock stays.
func (c *Client) ReleaseRecord(ctx context.Context, key, rvn string) error {
	expr, err := expression.NewBuilder().WithCondition(c.ownedBy(rvn)).Build()
	if err != nil {
		return err
	}
	_, err = c.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                 aws.String(c.table),
		Key:                       map[string]types.AttributeValue{"PartitionKey": &types.AttributeValueMemberS{Value: key}},
		ConditionExpression:       expr.Condition(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
	})
	if isConditionFailed(err) {
		return fmt.Errorf("release %s: %w", key, ErrNotOwner)
	}
	if err != nil {
		return fmt.Errorf("release %s: %w", key, err)
	}
	return nil
}

func isConditionFailed(err error) bool {
	var ccf *types.ConditionalCheckFailedException
	return errors.As(err, &ccf)
}

// held starts the heartbeat of a freshly acquired lock, written with a
// request sent at sent.
func (c *Client) held(key, rvn string, sent time.Time) *Lock {
	c.mu.Lock()
	delete(c.seen, key)
	c.mu.Unlock()
	ctx, cancel := context.WithCancelCause(context.Background())
	l := &Lock{c: c, key: key, rvn: rvn, lastBeat: sent, ctx: ctx, cancel: cancel,
		stop: make(chan struct{}), done: make(chan struct{})}
	go l.beat()
	return l
}

// Lock is a held lock. Its Context ends when the lease is lost or released.
type Lock struct {
	c      *Client
	key    string
	ctx    context.Context
	cancel context.CancelCauseFunc
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once

	mu       sync.Mutex
	rvn      string
	lastBeat time.Time
	lost     bool
}

// Key is the lock's key.
func (l *Lock) Key() string { return l.key }

// RVN is the current record version number.
func (l *Lock) RVN() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rvn
}

// Context is cancelled when the lock is lost or released: work done under
// the lock should stop.
func (l *Lock) Context() context.Context { return l.ctx }

// Valid reports whether the lease is certainly still ours: no takeover can
// happen before a lease has passed since our last successful heartbeat (or
// acquire) was sent, and a margin of two heartbeats covers the time a
// caller takes to act.
func (l *Lock) Valid() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	margin := 2 * l.c.opts.Heartbeat
	return !l.lost && l.ctx.Err() == nil && l.c.opts.Now().Sub(l.lastBeat) < l.c.opts.Lease-margin
}

func (l *Lock) beat() {
	defer close(l.done)
	t := time.NewTicker(l.c.opts.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		l.mu.Lock()
		cur := l.rvn
		l.mu.Unlock()
		next := uuid.NewString()
		var sent time.Time
		// A panic in one beat (logged with its stack and counted) is a
		// failed heartbeat: the next tick tries again, and the lease decides
		// as for any other failure.
		err := l.c.opts.Safe.Do("lock_heartbeat", func() error {
			ctx, cancel := context.WithTimeout(context.Background(), l.c.opts.Lease/2)
			defer cancel()
			// A contender may see the new RVN as soon as DynamoDB writes
			// it, which can be long before the answer arrives: the lease is
			// counted from the sending.
			sent = l.c.opts.Now()
			return l.c.heartbeat(ctx, l.key, cur, next)
		})
		l.mu.Lock()
		switch {
		case err == nil:
			l.rvn, l.lastBeat = next, sent
		case errors.Is(err, ErrNotOwner):
			l.lost = true
		default:
			l.c.opts.Log.Warn("lock heartbeat failed", "lock_key", l.key, "error", err)
			if l.c.opts.Now().Sub(l.lastBeat) >= l.c.opts.Lease {
				l.lost = true
			}
		}
		lost := l.lost
		l.mu.Unlock()
		if lost {
			l.c.opts.Log.Error("lock lost", "lock_key", l.key)
			l.cancel(fmt.Errorf("lock %s: %w", l.key, ErrNotOwner))
			return
		}
	}
}

// stopBeating ends the heartbeat goroutine and waits for it.
func (l *Lock) stopBeating() {
	l.once.Do(func() { close(l.stop) })
	<-l.done
}

// Release gives the lock up. ErrNotOwner means it had already been lost.
func (l *Lock) Release(ctx context.Context) error {
	l.stopBeating()
	defer l.cancel(errors.New("lock released"))
	l.mu.Lock()
	rvn, lost := l.rvn, l.lost
	l.mu.Unlock()
	if lost {
		return fmt.Errorf("release %s: %w", l.key, ErrNotOwner)
	}
	return l.c.ReleaseRecord(ctx, l.key, rvn)
}

// Abandon stops heartbeating without releasing, as a crashed holder would.
// For tests and crash simulations.
func (l *Lock) Abandon() {
	l.stopBeating()
	l.cancel(errors.New("lock abandoned"))
}

// String identifies the lock in logs.
func (l *Lock) String() string { return l.key + "@" + l.c.opts.Owner + "#" + strconv.Quote(l.RVN()) }
