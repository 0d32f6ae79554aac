package testenv

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/dispatch"
)

// Drop, as an answer, drops the connection without a response.
const Drop = 0

// Delivery is one POST a fake ACTIONS_URL received.
type Delivery struct {
	// N is its place among the receiver's deliveries, from 1.
	N int
	// Key is its Idempotency-Key header (the action id, docs/design.md §6).
	Key  string
	Body []byte
	// Signature is dispatch.Verify's verdict on X-Signature with the
	// receiver's secret (nil: signed right).
	Signature error
	// Valid: the body is a JSON action whose id is Key.
	Valid bool
	// Status is the answer (Drop: the connection was dropped).
	Status int
}

// Accepted reports a 2xx answer: the action counts as delivered.
func (d Delivery) Accepted() bool { return d.Status/100 == 2 }

// ActionReceiver is the tests' one fake ACTIONS_URL: it records every
// delivery and answers as Answer says (by default 401 for a bad signature,
// 400 for a body that is not an action under its Idempotency-Key, else 200),
// after Delay.
type ActionReceiver struct {
	URL    string
	secret string

	answer  atomic.Pointer[func(Delivery) int]
	observe atomic.Pointer[func(Delivery)]
	delay   atomic.Int64
	release chan struct{}
	once    sync.Once
	busy    atomic.Int32

	mu  sync.Mutex
	all []Delivery
}

// NewActionReceiver starts a receiver verifying signatures with secret
// (ACTIONS_SECRET); it stops when the test ends.
func NewActionReceiver(t testing.TB, secret string) *ActionReceiver {
	r := &ActionReceiver{secret: secret, release: make(chan struct{})}
	srv := httptest.NewServer(r)
	t.Cleanup(func() { r.Release(); srv.Close() })
	r.URL = srv.URL
	return r
}

// Answer makes f decide the answer to each delivery from now on (a status,
// or Drop); nil restores the default.
func (r *ActionReceiver) Answer(f func(Delivery) int) { r.answer.Store(&f) }

// AnswerAll answers every delivery with status from now on.
func (r *ActionReceiver) AnswerAll(status int) { r.Answer(func(Delivery) int { return status }) }

// Observe calls f with each delivery, once recorded, before it is answered
// (a test's own bookkeeping).
func (r *ActionReceiver) Observe(f func(Delivery)) { r.observe.Store(&f) }

// Delay makes each answer wait d first (until Release).
func (r *ActionReceiver) Delay(d time.Duration) { r.delay.Store(int64(d)) }

// Release ends every wait of Delay, now and later: register it with
// t.Cleanup after the program under test so a slow answer does not hold
// up its shutdown.
func (r *ActionReceiver) Release() { r.once.Do(func() { close(r.release) }) }

// Busy is how many deliveries are being answered right now.
func (r *ActionReceiver) Busy() int { return int(r.busy.Load()) }

// Deliveries returns every delivery so far, in order.
func (r *ActionReceiver) Deliveries() []Delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Delivery(nil), r.all...)
}

// Accepted counts the accepted deliveries per Idempotency-Key.
func (r *ActionReceiver) Accepted() map[string]int {
	out := map[string]int{}
	for _, d := range r.Deliveries() {
		if d.Accepted() {
			out[d.Key]++
		}
	}
	return out
}

func defaultAnswer(d Delivery) int {
	switch {
	case d.Signature != nil:
		return http.StatusUnauthorized
	case !d.Valid:
		return http.StatusBadRequest
	}
	return http.StatusOK
}

func (r *ActionReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.busy.Add(1)
	defer r.busy.Add(-1)
	body, _ := io.ReadAll(req.Body)
	d := Delivery{Key: req.Header.Get("Idempotency-Key"), Body: body,
		Signature: dispatch.Verify(req.Header.Get("X-Signature"), r.secret, body, 5*time.Minute, time.Now())}
	var head struct {
		ID string `json:"id"`
	}
	d.Valid = json.Unmarshal(body, &head) == nil && head.ID != "" && head.ID == d.Key
	if wait := time.Duration(r.delay.Load()); wait > 0 {
		select {
		case <-time.After(wait):
		case <-r.release:
		}
	}
	answer := defaultAnswer
	if f := r.answer.Load(); f != nil && *f != nil {
		answer = *f
	}
	r.mu.Lock()
	d.N = len(r.all) + 1
	d.Status = answer(d)
	r.all = append(r.all, d)
	r.mu.Unlock()
	if f := r.observe.Load(); f != nil && *f != nil {
		(*f)(d)
	}
	if d.Status == Drop {
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			_ = conn.Close()
		}
		return
	}
	w.WriteHeader(d.Status)
}
