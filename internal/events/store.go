package events

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
)

// item is the DynamoDB shape of a Record (docs/design.md §5, Contract), for
// decoding; writes build their attributes by hand (attributes in batch.go).
type item struct {
	ID            string `dynamodbav:"id"`
	Type          string `dynamodbav:"type"`
	StripeAccount string `dynamodbav:"stripe_account"`
	Timestamp     string `dynamodbav:"timestamp"`
	Date          string `dynamodbav:"date"`
	Time          string `dynamodbav:"time"`
	Expiration    int64  `dynamodbav:"expiration"`
	Subscription  string `dynamodbav:"subscription,omitempty"`
	APIVersion    string `dynamodbav:"api_version,omitempty"`
	Livemode      bool   `dynamodbav:"livemode"`
	Status        string `dynamodbav:"status"`
	ReceivedAt    string `dynamodbav:"received_at"`
	ProcessedAt   string `dynamodbav:"processed_at,omitempty"`
	Source        string `dynamodbav:"source"`
	Attempts      int    `dynamodbav:"attempts"`
	LastError     string `dynamodbav:"last_error,omitempty"`
	Payload       []byte `dynamodbav:"payload,omitempty"`
	PayloadKind   string `dynamodbav:"payload_kind,omitempty"`
	SnapshotEvent string `dynamodbav:"snapshot_event,omitempty"`
	Hydration     string `dynamodbav:"hydration,omitempty"`
	RelatedObject string `dynamodbav:"related_object,omitempty"`
	Severity      string `dynamodbav:"severity,omitempty"`
}

const bookkeepingTimeLayout = time.RFC3339Nano

func fromItem(it item) (Record, error) {
	created, err := time.ParseInLocation(TimestampLayout, it.Timestamp, time.UTC)
	if err != nil {
		return Record{}, fmt.Errorf("event %s: bad timestamp %q: %w", it.ID, it.Timestamp, err)
	}
	r := Record{
		ID: it.ID, Type: it.Type, StripeAccount: it.StripeAccount, Created: created,
		Expiration: time.Unix(it.Expiration, 0).UTC(), Subscription: it.Subscription,
		APIVersion: it.APIVersion, Livemode: it.Livemode, Status: Status(it.Status),
		Source: stripeevent.Source(it.Source), Attempts: it.Attempts, LastError: it.LastError,
		PayloadKind: stripeevent.PayloadKind(it.PayloadKind), SnapshotEvent: it.SnapshotEvent,
		Hydration: it.Hydration, RelatedObject: it.RelatedObject, Severity: it.Severity,
	}
	r.ReceivedAt, _ = time.Parse(bookkeepingTimeLayout, it.ReceivedAt)
	if it.ProcessedAt != "" {
		r.ProcessedAt, _ = time.Parse(bookkeepingTimeLayout, it.ProcessedAt)
	}
	if len(it.Payload) > 0 {
		if r.Payload, err = Decompress(it.Payload); err != nil {
			return Record{}, fmt.Errorf("event %s: %w", it.ID, err)
		}
	}
	return r, nil
}

// Store reads and writes event records in the events table.
type Store struct {
	client  *dynamodb.Client
	table   string
	ttl     time.Duration
	now     func() time.Time
	pending Pending
	marker  Marker // see WithMarker; else pending, when it is a Marker
	// itemPuts: IfAbsent records are written with one conditional PutItem
	// each instead of in transactions (see WithItemPuts).
	itemPuts bool
}

// WithItemPuts returns a store that writes IfAbsent records with one
// conditional PutItem each, in parallel, instead of TransactWriteItems of
// up to 100. On AWS a transactional write costs twice the write capacity
// of a plain one; on DynamoDB Local the transactions cost less CPU per
// record (BENCHMARKS.md). INGEST_RECORD_FRESH_WRITE chooses.
func (s *Store) WithItemPuts() *Store {
	c := *s
	c.itemPuts = true
	return &c
}

// Pending holds records acknowledged but not yet written to the table (the
// handler's write-behind, package recordq).
type Pending interface {
	Lookup(ctx context.Context, ids []string) (map[string]Record, error)
	// Settled waits until every record pending when it is called is in
	// the table.
	Settled(ctx context.Context) error
}

// Marker is a Pending that must be told, before a record is written to the
// table outside it (a failure, a rejection, a tool's Put), which events it
// is about to write: its writer then reads those records before writing a
// processed one over them, so an earlier attempt's bookkeeping is kept.
// Mark commits before it returns.
type Marker interface {
	Mark(ctx context.Context, ids []string) error
}

// WithMarker returns a store that marks with m (see Marker) whatever its
// Pending is: a Pending that joins several (the write-behind's and
// another queue's) need not pass Mark on.
func (s *Store) WithMarker(m Marker) *Store {
	c := *s
	c.marker = m
	return &c
}

// mark tells the store's Marker, if any, about ids.
func (s *Store) mark(ctx context.Context, ids []string) error {
	m := s.marker
	if m == nil {
		m, _ = s.pending.(Marker)
	}
	if m == nil || len(ids) == 0 {
		return nil
	}
	return m.Mark(ctx, ids)
}

// WithPending returns a store whose Get and BatchGet also find the records
// still pending in p: an acknowledged event is never absent. Reads check
// the table, then p for what the table lacks, then the table again for what
// p lacks too, since a pending record leaves p only after it is in the
// table and may have moved between the first two reads.
func (s *Store) WithPending(p Pending) *Store {
	c := *s
	c.pending = p
	return &c
}

// NewStore returns a store over table. ttl is EVENT_TTL: queries skip index
// entries older than it, since those records are expired.
func NewStore(client *dynamodb.Client, table string, ttl time.Duration, now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{client: client, table: table, ttl: ttl, now: now}
}

// Table is the name of the events table.
func (s *Store) Table() string { return s.table }

// Put writes r as it is, unconditionally: for tools and tests that need a
// record in a given state. The handler uses PutProcessed and RecordFailure.
func (s *Store) Put(ctx context.Context, r Record) error {
	av, err := attributes(r)
	if err != nil {
		return err
	}
	if err := s.mark(ctx, []string{r.ID}); err != nil {
		return fmt.Errorf("put event %s: %w", r.ID, err)
	}
	if _, err := s.client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.table), Item: av}); err != nil {
		return fmt.Errorf("put event %s: %w", r.ID, err)
	}
	return nil
}

func (s *Store) update(ctx context.Context, id string, update expression.UpdateBuilder, cond expression.ConditionBuilder, tolerateCondition bool) error {
	expr, err := expression.NewBuilder().WithUpdate(update).WithCondition(cond).Build()
	if err != nil {
		return fmt.Errorf("build update: %w", err)
	}
	_, err = s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.table),
		Key:                       key(id),
		UpdateExpression:          expr.Update(),
		ConditionExpression:       expr.Condition(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
	})
	if isConditionFailed(err) {
		if tolerateCondition {
			return nil
		}
		return notFound(id)
	}
	if err != nil {
		return fmt.Errorf("update event %s: %w", id, err)
	}
	return nil
}

// Final reports whether r is the last record its event will have: processed,
// and not rejected (a rejected event's replay, once its cause is fixed,
// applies it and replaces the record).
func (r Record) Final() bool { return r.Status == StatusProcessed && r.LastError == "" }

// Covers reports whether prev, in the table, makes next, a processed record
// waiting to be written, moot: prev is final, or it is next itself, written
// before (a lost delete of the pending row, another replica's sweep) — a
// rejection included, which must not count as one more attempt.
func Covers(prev, next Record) bool {
	return prev.Final() || (prev.Status == StatusProcessed && prev.ProcessedAt.Equal(next.ProcessedAt) && prev.LastError == next.LastError)
}

// Get reads one record with its payload, strongly consistent. Expired records
// are reported as apperr.ErrNotFound.
func (s *Store) Get(ctx context.Context, id string) (Record, error) {
	r, err := s.get(ctx, id)
	if s.pending == nil || (err == nil && r.Final()) {
		return r, err
	}
	// Absent from the table, not processed there yet, or the table failed
	// (a pending record is still readable during an outage of the table).
	found, perr := s.pending.Lookup(ctx, []string{id})
	if perr != nil {
		if err == nil {
			return r, nil
		}
		// Not apperr.ErrNotFound: the record may be pending (a 5xx, never a 404).
		return Record{}, fmt.Errorf("get event %s: %w", id, perr)
	}
	if p, ok := found[id]; ok {
		if p.Expired(s.now()) {
			return Record{}, notFound(id)
		}
		if err == nil {
			if Covers(r, p) {
				return r, nil
			}
			p = Supersede(r, p)
		}
		return p, nil
	}
	if err != nil && !errors.Is(err, apperr.ErrNotFound) {
		return r, err
	}
	// Not pending (any more): a writer may have moved the record to the
	// table since the first read, over a failed one.
	return s.get(ctx, id)
}

// Supersede is next, a processed record about to replace prev in the
// table, with the bookkeeping of the first attempt kept: the first
// received_at and its source, and one more attempt. prev is usually the
// earlier attempt; it is a later one when a redelivery failed after next
// was acknowledged and before the write-behind wrote it.
func Supersede(prev, next Record) Record {
	if next.ReceivedAt.IsZero() || prev.ReceivedAt.Before(next.ReceivedAt) {
		next.ReceivedAt, next.Source = prev.ReceivedAt, prev.Source
	}
	next.Attempts = prev.Attempts + 1
	return next
}

func (s *Store) get(ctx context.Context, id string) (Record, error) {
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(s.table),
		Key:            key(id),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return Record{}, fmt.Errorf("get event %s: %w", id, err)
	}
	if out.Item == nil {
		return Record{}, notFound(id)
	}
	r, err := decode(out.Item)
	if err != nil {
		return Record{}, err
	}
	if r.Expired(s.now()) {
		return Record{}, notFound(id)
	}
	return r, nil
}

// BatchGet reads the records of ids (without payloads, strongly consistent),
// skipping absent and expired ones. It issues one BatchGetItem per 100 ids and retries
// unprocessed keys.
func (s *Store) BatchGet(ctx context.Context, ids []string) (map[string]Record, error) {
	found, err := s.batchGet(ctx, ids)
	if err != nil || s.pending == nil {
		return found, err
	}
	// Absent, or recorded but not finally: a processed record may be
	// pending for them.
	var check []string
	for _, id := range ids {
		if r, ok := found[id]; !ok || !r.Final() {
			check = append(check, id)
		}
	}
	if len(check) == 0 {
		return found, nil
	}
	pending, err := s.pending.Lookup(ctx, check)
	if err != nil {
		return nil, fmt.Errorf("batch get events: %w", err)
	}
	var again []string
	for _, id := range check {
		p, ok := pending[id]
		prev, recorded := found[id]
		switch {
		case ok && !p.Expired(s.now()):
			p.Payload = nil // BatchGet reads no payloads
			switch {
			case recorded && Covers(prev, p):
				// prev is kept
			case recorded:
				found[id] = Supersede(prev, p)
			default:
				found[id] = p
			}
		case !ok:
			// Not pending (any more): a writer may have moved it to the
			// table since the first read.
			again = append(again, id)
		}
	}
	if len(again) == 0 {
		return found, nil
	}
	landed, err := s.batchGet(ctx, again)
	if err != nil {
		return nil, err
	}
	for id, r := range landed {
		found[id] = r
	}
	return found, nil
}

func (s *Store) batchGet(ctx context.Context, ids []string) (map[string]Record, error) {
	found := make(map[string]Record, len(ids))
	proj := expression.NamesList(expression.Name("id"), expression.Name("type"), expression.Name("stripe_account"),
		expression.Name("timestamp"), expression.Name("expiration"), expression.Name("subscription"),
		expression.Name("api_version"), expression.Name("livemode"), expression.Name("status"),
		expression.Name("received_at"), expression.Name("processed_at"), expression.Name("source"),
		expression.Name("attempts"), expression.Name("last_error"), expression.Name("payload_kind"),
		expression.Name("snapshot_event"), expression.Name("hydration"), expression.Name("related_object"))
	expr, err := expression.NewBuilder().WithProjection(proj).Build()
	if err != nil {
		return nil, fmt.Errorf("build projection: %w", err)
	}
	seen := map[string]bool{}
	for start := 0; start < len(ids); start += 100 {
		end := min(start+100, len(ids))
		var keys []map[string]types.AttributeValue
		for _, id := range ids[start:end] {
			if !seen[id] {
				seen[id] = true
				keys = append(keys, key(id))
			}
		}
		request := map[string]types.KeysAndAttributes{s.table: {
			Keys: keys, ProjectionExpression: expr.Projection(), ExpressionAttributeNames: expr.Names(),
			ConsistentRead: aws.Bool(true),
		}}
		for attempt := 0; len(request) > 0 && len(request[s.table].Keys) > 0; attempt++ {
			out, err := s.client.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: request})
			if err != nil {
				return nil, fmt.Errorf("batch get events: %w", err)
			}
			for _, raw := range out.Responses[s.table] {
				r, err := decode(raw)
				if err != nil {
					return nil, err
				}
				if !r.Expired(s.now()) {
					found[r.ID] = r
				}
			}
			request = out.UnprocessedKeys
			if len(request) > 0 {
				if err := sleep(ctx, backoff(attempt)); err != nil {
					return nil, err
				}
			}
		}
	}
	return found, nil
}

func decode(raw map[string]types.AttributeValue) (Record, error) {
	var it item
	if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
		return Record{}, fmt.Errorf("decode event item: %w", err)
	}
	return fromItem(it)
}

func key(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: id}}
}

func isConditionFailed(err error) bool {
	var ccf *types.ConditionalCheckFailedException
	return errors.As(err, &ccf)
}

func backoff(attempt int) time.Duration {
	d := time.Duration(1<<min(attempt, 6)) * 20 * time.Millisecond
	return d
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// JoinPending reads through several Pending in turn (the write-behind's
// records, the queued thin notifications'); the first that has a record wins.
func JoinPending(ps ...Pending) Pending { return pendings(ps) }

type pendings []Pending

func (ps pendings) Lookup(ctx context.Context, ids []string) (map[string]Record, error) {
	found := map[string]Record{}
	for _, p := range ps {
		m, err := p.Lookup(ctx, ids)
		if err != nil {
			return nil, err
		}
		for id, r := range m {
			if _, ok := found[id]; !ok {
				found[id] = r
			}
		}
	}
	return found, nil
}

func (ps pendings) Settled(ctx context.Context) error {
	for _, p := range ps {
		if err := p.Settled(ctx); err != nil {
			return err
		}
	}
	return nil
}
