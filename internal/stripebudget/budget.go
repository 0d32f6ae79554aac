package stripebudget

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/stripe-payments/stripe-payments/internal/safego"
)

// Config of a Budget; zero fields take the defaults.
type Config struct {
	// Rate is the whole service's requests per second (STRIPE_RATE_LIMIT).
	Rate float64
	// Replicas is how many replicas are expected (STRIPE_EXPECTED_REPLICAS,
	// default 1): without its store, a replica spends Rate/Replicas alone.
	Replicas int
	// Ahead is how far ahead the charges class reserves slots at least
	// (default 100 ms, at least two requests' worth): a batch per lease.
	// The store answers "lease again half a horizon before your slots run
	// out", so the leaser widens the horizon to twice its recent lease lag
	// (the lease's round trip plus its own late wake-ups), up to MaxAhead
	// (default 250 ms): the batch is the rate times that lag, and the next
	// lease lands before the last slot of this one, as a token-bucket
	// client prefetches before its tokens run out.
	Ahead, MaxAhead time.Duration
	// FixedLease turns the lease's adaptation off (no widening to the
	// lag, no lead): the budget as first built, for benchmarks and tests
	// that compare.
	FixedLease bool
	// Shares are the floors of the lower classes: the part of Rate each
	// keeps while a higher class is waiting (defaults: hydration 0.04,
	// background 0.02; the charges' entry is ignored).
	Shares [numClasses]float64
	// StoreTimeout bounds one lease (default 500 ms); Probe is how often a
	// replica without its store tries it again (default 5 s).
	StoreTimeout, Probe time.Duration
	// Spare is how many slots the charges class leases beyond its waiting
	// requests (default 2; negative: none): the next charges take them
	// without a round trip to the store. A spare slot nobody takes in time
	// is lost, which costs nothing unless the budget is short, and then
	// requests wait and take every slot.
	Spare int
	// Late is how late a slot may still be used (default
	// DefaultLateRequests requests' worth, 3/Rate): a request that wakes
	// later drops its slot and takes another, so that stalled requests do
	// not bunch at Stripe. The tolerance is spent from Stripe's burst:
	// slots are 1/Rate apart and a request goes at most Late after its
	// slot, so any one-second window holds at most Late×Rate requests more
	// than the rate (plus one for the window's edge), and a token bucket
	// at Stripe needs a burst of Late×Rate+1. A dropped slot is lost for
	// good (nobody else can use a slot in the past), so a tolerance too
	// tight for the machine's wake-ups loses a share of the budget.
	Late time.Duration
	// Pause is how long a 429 without Retry-After stops every replica
	// (default 1 s); MaxPause caps a Retry-After (default 60 s).
	Pause, MaxPause time.Duration
	Log             *slog.Logger
	Observer        Observer
	// Safe recovers a panic in the leaser or the probe (nil: a starter
	// that only logs): every Stripe request of the replica waits on them.
	Safe *safego.Starter
}

// Budget is what a caller that does not go through Transport draws on
// before each Stripe request (thin-event hydration calls Stripe over its
// own HTTP client). *Shared, the fleet's budget, and Local, one process's,
// implement it.
type Budget interface {
	// Wait blocks until one request at priority p may go, or ctx ends.
	Wait(ctx context.Context, p Priority) error
	// Throttled tells the budget Stripe answered 429; retryAfter is its
	// Retry-After (0 when absent). Every caller slows down, not only the
	// one that was refused.
	Throttled(retryAfter time.Duration)
}

// Observer receives the budget's metrics (internal/metrics implements it).
type Observer interface {
	// Granted: a request of class c got its slot after waiting wait.
	Granted(c Class, wait time.Duration)
	// RateLimited: Stripe answered 429.
	RateLimited(c Class)
	// StoreError: a lease or a pause failed.
	StoreError()
	// Fallback: the replica spends its local share (true) or the shared
	// budget again (false).
	Fallback(on bool)
	// Replayed: Stripe answered a create with Idempotent-Replayed: true.
	Replayed(c Class)
	// Late: a slot came too late to use (a stalled process) and was
	// dropped; the request waits for another.
	Late(c Class)
}

// DefaultLateRequests is Config.Late's default in requests' worth. Three
// replicas at 100/s on a loaded 2-core machine dropped a fifth of their
// slots as late with one request's worth and 3–11 % with three, whose
// arrivals at the fake Stripe (burst 10) needed a burst of 8.5 at most;
// five needed 11 and drew 429s (BENCHMARKS.md, "Where the rest of the
// budget went").
const DefaultLateRequests = 3

type nopObserver struct{}

func (nopObserver) Granted(Class, time.Duration) {}
func (nopObserver) RateLimited(Class)            {}
func (nopObserver) StoreError()                  {}
func (nopObserver) Fallback(bool)                {}
func (nopObserver) Replayed(Class)               {}
func (nopObserver) Late(Class)                   {}

// Shared is one replica's view of the shared budget. Requests wait in one
// queue per class; a single leasing goroutine (running while anyone waits)
// leases slots for the highest class that waits and hands them out highest
// class first.
type Shared struct {
	store Store
	cfg   Config
	log   *slog.Logger
	obs   Observer

	interval time.Duration
	local    *rate.Limiter // the fallback: Rate/Replicas

	mu       sync.Mutex
	queues   [numClasses][]*waiter
	running  bool
	wake     chan struct{}
	sleepFor Class // the class the leaser sleeps for; a higher arrival wakes it
	paused   time.Time
	// spare are charges slots leased ahead of demand (Config.Spare).
	spare []time.Time
	// floorAsked is when each class last asked the store for its floor
	// (leaser only).
	floorAsked [numClasses]time.Time
	// lastLocal is when each class last got a slot (the local floors).
	lastLocal [numClasses]time.Time

	fallback  atomic.Bool
	probing   atomic.Bool
	nextProbe time.Time   // leaser goroutine only
	clock     clockOffset // leaser goroutine only
	lag       leaseLag    // leaser goroutine only
	back      leaseLag    // leaser goroutine only: the answers' way back

	safe  *safego.Starter
	stats stats
	// wakeAt sleeps until a slot (sleepUntil; tests stall it).
	wakeAt func(ctx context.Context, t time.Time) error
}

type waiter struct {
	class Class
	slot  chan time.Time
	gone  atomic.Bool
}

// New returns the budget over store.
func New(store Store, cfg Config) (*Shared, error) {
	if cfg.Rate <= 0 {
		return nil, errors.New("stripe budget: rate must be above 0")
	}
	if cfg.Replicas <= 0 {
		cfg.Replicas = 1
	}
	interval := time.Duration(float64(time.Second) / cfg.Rate)
	if cfg.Ahead == 0 {
		cfg.Ahead = 100 * time.Millisecond
	}
	cfg.Ahead = max(cfg.Ahead, 2*interval)
	if cfg.MaxAhead == 0 {
		cfg.MaxAhead = 250 * time.Millisecond
	}
	cfg.MaxAhead = max(cfg.MaxAhead, cfg.Ahead)
	if cfg.Late == 0 {
		cfg.Late = DefaultLateRequests * interval
	}
	if cfg.Spare == 0 {
		cfg.Spare = 2
	}
	cfg.Spare = max(cfg.Spare, 0)
	if cfg.Shares == [numClasses]float64{} {
		cfg.Shares = [numClasses]float64{0, 0.04, 0.02}
	}
	if cfg.StoreTimeout == 0 {
		cfg.StoreTimeout = 500 * time.Millisecond
	}
	if cfg.Probe == 0 {
		cfg.Probe = 5 * time.Second
	}
	if cfg.Pause == 0 {
		cfg.Pause = time.Second
	}
	if cfg.MaxPause == 0 {
		cfg.MaxPause = time.Minute
	}
	b := &Shared{store: store, cfg: cfg, log: cfg.Log, obs: cfg.Observer, interval: interval,
		local: rate.NewLimiter(rate.Limit(cfg.Rate/float64(cfg.Replicas)), 1), wake: make(chan struct{}, 1), wakeAt: sleepUntil}
	if b.log == nil {
		b.log = slog.Default()
	}
	b.log = b.log.With("component", "stripe-budget")
	if b.obs == nil {
		b.obs = nopObserver{}
	}
	b.safe = cfg.Safe.OrDefault(b.log)
	return b, nil
}

// Rate is the configured requests per second of the whole service.
func (b *Shared) Rate() float64 { return b.cfg.Rate }

// Fallback reports whether the replica spends its local share because the
// store is unreachable.
func (b *Shared) Fallback() bool { return b.fallback.Load() }

// Wait blocks until a request of class c may be sent, or ctx ends. A
// request of a lower class waits; it never fails for its class.
func (b *Shared) Wait(ctx context.Context, c Class) error {
	if !c.valid() {
		c = Hydration
	}
	start := time.Now()
	front := false
	for {
		w := &waiter{class: c, slot: make(chan time.Time, 1)}
		b.enqueue(w, front)
		select {
		case at := <-w.slot:
			if err := b.wakeAt(ctx, at); err != nil {
				return fmt.Errorf("stripe budget: %w", err)
			}
			b.stats.wokeAfter(time.Since(at), b.interval)
			// A slot used more than Late late (this goroutine or the
			// leaser woke late: a stalled machine) would bunch with the
			// next slots at Stripe beyond the burst Late allows; it is
			// dropped, and the request takes the next one, first in its
			// class.
			if time.Since(at) > b.cfg.Late {
				b.stats.late.Add(1)
				b.obs.Late(c)
				front = true
				continue
			}
			// Stripe answered 429 since the slot was handed out: this
			// replica pauses too, slots in hand included.
			if b.isPaused() {
				b.stats.paused.Add(1)
				front = true
				continue
			}
			b.stats.used.Add(1)
			b.obs.Granted(c, time.Since(start))
			return nil
		case <-ctx.Done():
			w.gone.Store(true)
			return fmt.Errorf("stripe budget: %w", ctx.Err())
		}
	}
}

func (b *Shared) isPaused() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return time.Now().Before(b.paused)
}

// enqueue adds w to its class's queue (at its front: a request whose slot
// was dropped) and makes sure the leaser runs.
func (b *Shared) enqueue(w *waiter, front bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if w.class == Charges {
		for len(b.spare) > 0 {
			at := b.spare[0]
			b.spare = b.spare[1:]
			if time.Since(at) <= b.cfg.Late {
				w.slot <- at
				return
			}
			b.stats.spareExpired.Add(1)
		}
	}
	if front {
		b.queues[w.class] = append([]*waiter{w}, b.queues[w.class]...)
	} else {
		b.queues[w.class] = append(b.queues[w.class], w)
	}
	if !b.running {
		b.running = true
		// A panic in the leaser restarts it after a pause (logged and
		// counted): running stays true only while a leaser will run, and
		// lease itself clears it when nobody waits.
		go b.safe.Loop(context.Background(), "stripe_budget_leaser", func(context.Context) { b.lease() })
		return
	}
	if w.class < b.sleepFor {
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}
}

// Throttled implements Budget for callers outside Transport: a 429 they
// got pauses every replica, as Transport's do (counted as hydration, the
// class of those callers).
func (b *Shared) Throttled(retryAfter time.Duration) {
	b.RateLimited(context.Background(), Hydration, retryAfter)
}

// RateLimited tells the budget Stripe answered 429: every replica pauses
// for retryAfter (Stripe's Retry-After; 0: Config.Pause).
func (b *Shared) RateLimited(ctx context.Context, c Class, retryAfter time.Duration) {
	b.obs.RateLimited(c)
	d := retryAfter
	if d <= 0 {
		d = b.cfg.Pause
	}
	d = min(d, b.cfg.MaxPause)
	b.mu.Lock()
	if until := time.Now().Add(d); until.After(b.paused) {
		b.paused = until
	}
	b.mu.Unlock()
	b.log.Warn("stripe answered 429: every replica pauses", "class", c.String(), "pause", d)
	if b.fallback.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.StoreTimeout)
	defer cancel()
	if err := b.store.Pause(ctx, d); err != nil {
		b.obs.StoreError()
		b.log.Warn("could not share the 429 pause with the other replicas", "error", err)
	}
}

// top is the highest class with live waiters and how many it has; b.mu is
// held.
func (b *Shared) top() (Class, int) {
	for c := Charges; c < numClasses; c++ {
		q := b.queues[c][:0]
		for _, w := range b.queues[c] {
			if !w.gone.Load() {
				q = append(q, w)
			}
		}
		clear(b.queues[c][len(q):])
		b.queues[c] = q
		if len(q) > 0 {
			return c, len(q)
		}
	}
	return 0, 0
}

// floorDue returns a class below c with waiters whose floor share is due
// to be asked for, and its waiters; 0 waiters when none is. Leaser only.
func (b *Shared) floorDue(c Class) (Class, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	for l := Class(numClasses - 1); l > c; l-- {
		s := b.cfg.Shares[l]
		if s <= 0 || len(b.queues[l]) == 0 {
			continue
		}
		if floor := time.Duration(float64(time.Second) / (s * b.cfg.Rate)); now.Sub(b.floorAsked[l]) >= floor {
			b.floorAsked[l] = now
			live := 0
			for _, w := range b.queues[l] {
				if !w.gone.Load() {
					live++
				}
			}
			if live > 0 {
				return l, live
			}
		}
	}
	return 0, 0
}

// keepSpare keeps a charges slot nobody waits for, for the next charge.
func (b *Shared) keepSpare(c Class, at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c == Charges && len(b.spare) < b.cfg.Spare {
		b.spare = append(b.spare, at)
		return
	}
	b.stats.unwanted.Add(1)
}

// give hands the slot at to a waiter of class prefer (the class it was
// leased for), else to the highest waiter; false when none waits.
func (b *Shared) give(at time.Time, prefer Class) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pop(prefer, at) {
		return true
	}
	for c := Charges; c < numClasses; c++ {
		if b.pop(c, at) {
			return true
		}
	}
	return false
}

// giveLocal is give for the local share, which keeps the lower classes'
// floors itself: a class whose floor is due takes the slot.
func (b *Shared) giveLocal(at time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for c := Class(numClasses - 1); c > Charges; c-- {
		if s := b.cfg.Shares[c]; s > 0 {
			floor := time.Duration(float64(time.Second) * float64(b.cfg.Replicas) / (s * b.cfg.Rate))
			if at.Sub(b.lastLocal[c]) >= floor && b.pop(c, at) {
				return true
			}
		}
	}
	for c := Charges; c < numClasses; c++ {
		if b.pop(c, at) {
			return true
		}
	}
	return false
}

// pop gives the slot at to class c's first live waiter; b.mu is held.
func (b *Shared) pop(c Class, at time.Time) bool {
	for len(b.queues[c]) > 0 {
		w := b.queues[c][0]
		b.queues[c][0] = nil
		b.queues[c] = b.queues[c][1:]
		if !w.gone.Load() {
			b.lastLocal[c] = at
			if time.Since(at) > b.cfg.Late {
				b.stats.handedLate.Add(1)
			}
			w.slot <- at
			return true
		}
	}
	return false
}

// lease runs while requests wait.
func (b *Shared) lease() {
	var next time.Time // when the store said to lease again (zero: now)
	for {
		b.mu.Lock()
		c, n := b.top()
		if n == 0 {
			b.running = false
			b.mu.Unlock()
			return
		}
		paused := b.paused
		b.mu.Unlock()
		if time.Now().Before(paused) {
			b.sleep(c, paused)
			next = time.Time{}
			continue
		}
		if b.fallback.Load() {
			if time.Now().After(b.nextProbe) && b.probing.CompareAndSwap(false, true) {
				b.nextProbe = time.Now().Add(b.cfg.Probe)
				// probe clears probing itself, also when it panics, so
				// the next probe comes Probe later.
				go func() { _ = b.safe.Do("stripe_budget_probe", func() error { b.probe(); return nil }) }()
			}
			b.serveLocally(c)
			next = time.Time{}
			continue
		}
		// A lower class waiting behind this replica's own higher classes
		// asks for its floor share now and then (the store decides).
		if l, m := b.floorDue(c); m > 0 {
			c, n = l, m
		}
		due := time.Now()
		if !next.IsZero() {
			b.sleep(c, next)
			due = next
		}
		next = b.leaseShared(c, n, due)
	}
}

// leaseShared leases up to n slots for class c and hands them out; due is
// when the lease was meant to start (its lag is measured from there). It
// returns when to lease again (zero: at once).
func (b *Shared) leaseShared(c Class, n int, due time.Time) time.Time {
	want := n
	if c == Charges {
		b.mu.Lock()
		want += max(b.cfg.Spare-len(b.spare), 0)
		b.mu.Unlock()
	}
	// The first slot is no earlier than the answer can be here (the recent
	// answers' usual way back): a slot granted at the store's now would
	// arrive late, be dropped, and cost the request another lease. The
	// median, not the high mark: a lead also leaves the schedule's time
	// before it unused when the schedule is less than a lead ahead, so one
	// slow answer must not widen every lease's.
	req := LeaseRequest{Class: c, Want: want, Interval: b.interval, Ahead: b.interval,
		DemandTTL: 2*b.cfg.Ahead + 100*time.Millisecond, Lead: b.back.median()}
	if c == Charges {
		req.Ahead = min(max(b.cfg.Ahead, 2*(b.lag.high()+b.interval)), b.cfg.MaxAhead)
	}
	if b.cfg.FixedLease {
		req.Lead = 0
		if c == Charges {
			req.Ahead = b.cfg.Ahead
		}
	}
	if s := b.cfg.Shares[c]; c != Charges && s > 0 {
		req.Floor = time.Duration(float64(time.Second) / (s * b.cfg.Rate))
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.StoreTimeout)
	sent := time.Now()
	l, err := b.store.Lease(ctx, req)
	received := time.Now()
	cancel()
	if due.After(sent) {
		due = sent
	}
	b.lag.add(received.Sub(due))
	if err != nil {
		b.obs.StoreError()
		b.nextProbe = time.Now().Add(b.cfg.Probe)
		if !b.fallback.Swap(true) {
			b.obs.Fallback(true)
			b.log.Error("stripe budget store unreachable: this replica falls back to its local share",
				"error", err, "local_rate", b.cfg.Rate/float64(b.cfg.Replicas), "expected_replicas", b.cfg.Replicas)
		}
		return time.Time{}
	}
	b.stats.leases.Add(1)
	b.stats.leased.Add(int64(l.Granted))
	offset := b.clock.offset(sent, received, l.Now)
	b.back.add(received.Sub(l.Now.Add(offset)))
	for i := 0; i < l.Granted; i++ {
		at := l.First.Add(time.Duration(i) * b.interval).Add(offset)
		if !b.give(at, c) {
			b.keepSpare(c, at)
		}
	}
	if l.Granted > 0 {
		return time.Time{} // more may wait: top decides
	}
	next := l.NextTry.Add(offset)
	if floor := received.Add(time.Millisecond); next.Before(floor) {
		next = floor
	}
	return next
}

// probe asks the store for nothing, in the background while the replica
// spends its local share; an answer ends the fallback.
func (b *Shared) probe() {
	defer b.probing.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.StoreTimeout)
	defer cancel()
	if _, err := b.store.Lease(ctx, LeaseRequest{Class: Background, Interval: b.interval}); err != nil {
		b.obs.StoreError()
		return
	}
	if b.fallback.Swap(false) {
		b.obs.Fallback(false)
		b.log.Info("stripe budget store reachable again: this replica spends the shared budget")
	}
}

// serveLocally hands out one slot of the local share (Rate/Replicas), to
// the highest class waiting when the slot comes.
func (b *Shared) serveLocally(c Class) {
	r := b.local.Reserve()
	at := time.Now().Add(r.Delay())
	b.sleep(c, at)
	if time.Now().Before(at) { // woken by a higher class: ask again
		r.Cancel()
		return
	}
	if !b.giveLocal(time.Now()) {
		r.Cancel()
	}
}

// sleep waits until t, or until a waiter of a class above c arrives.
func (b *Shared) sleep(c Class, t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	d = min(d, time.Second)
	b.mu.Lock()
	if h, n := b.top(); n > 0 && h < c {
		b.mu.Unlock()
		return // one arrived since the leaser looked
	}
	b.sleepFor = c
	b.mu.Unlock()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-b.wake:
	}
	b.mu.Lock()
	b.sleepFor = Charges // no wake-ups while awake: the loop looks itself
	b.mu.Unlock()
	select { // drop a wake-up that came too late to matter
	case <-b.wake:
	default:
	}
}

func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// clockOffset estimates our clock minus the store's, the way NTP does: the
// store read its clock between our send and our receipt, so each lease
// bounds the offset to [sent-now, received-now]; the estimate is the middle
// of the bounds' intersection over the recent leases. A single lease's
// middle would be off by half its wait for the row's lock, or by a late
// wake-up of this goroutine, and slots handed out off by that much bunch
// with other replicas' slots.
type clockOffset struct {
	lo, hi [32]time.Duration
	n      int
}

func (c *clockOffset) offset(sent, received, storeNow time.Time) time.Duration {
	c.lo[c.n%len(c.lo)], c.hi[c.n%len(c.hi)] = sent.Sub(storeNow), received.Sub(storeNow)
	c.n++
	lo, hi := c.lo[0], c.hi[0]
	for i := 1; i < min(c.n, len(c.lo)); i++ {
		lo, hi = max(lo, c.lo[i]), min(hi, c.hi[i])
	}
	if lo > hi { // the clocks drifted: trust this lease alone
		c.lo[0], c.hi[0], c.n = sent.Sub(storeNow), received.Sub(storeNow), 1
		lo, hi = c.lo[0], c.hi[0]
	}
	return lo + (hi-lo)/2
}

// leaseLag keeps the recent leases' lags (the last 16). Two are kept:
// from when a lease was due (the store's next_try, or the arrival of a
// request) to its answer, that is the leaser's late wake-up plus the round
// trip to the store (plus a request's worth, how long before the leased
// slots run out the next lease must start); and from the store's decision
// to the answer's arrival (its median is the lead a first slot needs).
type leaseLag struct {
	d [16]time.Duration
	n int
}

func (l *leaseLag) add(d time.Duration) {
	l.d[l.n%len(l.d)] = max(d, 0)
	l.n++
}

func (l *leaseLag) median() time.Duration {
	d := append([]time.Duration(nil), l.d[:min(l.n, len(l.d))]...)
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[len(d)/2]
}

func (l *leaseLag) high() time.Duration {
	var h time.Duration
	for _, d := range l.d[:min(l.n, len(l.d))] {
		h = max(h, d)
	}
	return h
}
