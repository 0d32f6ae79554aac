package localstripe

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// The state file keeps a local Stripe across a restart of `make run`, as
// Stripe keeps an account: the fake's objects, charges, idempotency keys
// and events (v1 and v2), each event's delivery, the bank debits still
// settling and the actions received. It is written after every change (at
// most one write per saveGap, the latest state wins) and on Close, to a
// temporary file renamed over the old one, so a crash leaves the last
// complete state. Open reads it and resumes what was under way: deliveries
// still pending are sent again (the receiver dedupes by event id, as with
// Stripe's retries), settlements run when due.

// stateVersion changes when the file's shape does; another version is
// refused rather than misread.
const stateVersion = 1

// saveGap is the least time between two writes of the state file.
const saveGap = 50 * time.Millisecond

type fileState struct {
	Version     int                        `json:"version"`
	Saved       time.Time                  `json:"saved"`
	Stripe      json.RawMessage            `json:"stripe"`
	Deliveries  []Delivery                 `json:"deliveries"` // oldest first
	Payloads    map[string]json.RawMessage `json:"payloads"`
	Settlements []settlement               `json:"settlements"`
	Actions     []ReceivedAction           `json:"actions,omitempty"`
}

// saver writes the state file after changes, one write at a time.
type saver struct {
	path  string
	dirty chan struct{}
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
}

// Open is New with the state of cfg.StatePath (none yet: an empty local
// Stripe), kept there from now on; without StatePath it is New.
func Open(cfg Config) (*Server, error) {
	s := New(cfg)
	if cfg.StatePath == "" {
		return s, nil
	}
	b, err := os.ReadFile(cfg.StatePath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("read local Stripe state %s: %w", cfg.StatePath, err)
	default:
		if err := s.restore(b); err != nil {
			return nil, fmt.Errorf("local Stripe state %s (make reset starts afresh): %w", cfg.StatePath, err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(cfg.StatePath), 0o755); err != nil {
		return nil, fmt.Errorf("local Stripe state directory: %w", err)
	}
	s.saver = &saver{path: cfg.StatePath, dirty: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go s.saveLoop()
	s.resume()
	if err := s.save(); err != nil { // fail now, not at the first change
		s.Close()
		return nil, err
	}
	return s, nil
}

// changed asks for the state to be written.
func (s *Server) changed() {
	if s.saver == nil {
		return
	}
	select {
	case s.saver.dirty <- struct{}{}:
	default: // a write is already asked for; it will see this change
	}
}

func (s *Server) saveLoop() {
	defer close(s.saver.done)
	for {
		select {
		case <-s.saver.stop:
			return
		case <-s.saver.dirty:
			if err := s.save(); err != nil {
				s.cfg.Log.Error("local Stripe state not saved", "path", s.saver.path, "error", err)
			}
			// The changes of the next moment make one write, not one each
			// (a test clock's run charges many periods at once).
			select {
			case <-s.saver.stop:
				return
			case <-time.After(saveGap):
			}
		}
	}
}

// stopSaving ends the writer and writes the final state (Close).
func (s *Server) stopSaving() {
	if s.saver == nil {
		return
	}
	s.saver.once.Do(func() {
		close(s.saver.stop)
		<-s.saver.done
		if err := s.save(); err != nil {
			s.cfg.Log.Error("local Stripe state not saved", "path", s.saver.path, "error", err)
		}
	})
}

// State renders the whole state as the file holds it.
func (s *Server) State() ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	stripe, err := s.fake.State()
	if err != nil {
		return nil, err
	}
	st := fileState{Version: stateVersion, Saved: time.Now().UTC(), Stripe: stripe,
		Payloads: make(map[string]json.RawMessage, len(s.payloads))}
	for _, id := range s.order {
		st.Deliveries = append(st.Deliveries, *s.deliveries[id])
	}
	for id, p := range s.payloads {
		st.Payloads[id] = p
	}
	for _, x := range s.settlements {
		st.Settlements = append(st.Settlements, x)
	}
	if s.cfg.Actions != nil {
		st.Actions = s.cfg.Actions.list("")
	}
	b, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("render local Stripe state: %w", err)
	}
	return b, nil
}

// save writes the state file atomically.
func (s *Server) save() error {
	b, err := s.State()
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(s.saver.path), ".state-*.json")
	if err != nil {
		return fmt.Errorf("write local Stripe state: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename, nothing is there
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("write local Stripe state: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write local Stripe state: %w", err)
	}
	if err := os.Rename(tmp.Name(), s.saver.path); err != nil {
		return fmt.Errorf("write local Stripe state: %w", err)
	}
	return nil
}

// restore puts a saved state back (before serving).
func (s *Server) restore(b []byte) error {
	var st fileState
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if st.Version != stateVersion {
		return fmt.Errorf("version %d, this local Stripe reads %d", st.Version, stateVersion)
	}
	if err := s.fake.Restore(st.Stripe); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deliveries, s.order, s.payloads = map[string]*Delivery{}, nil, map[string][]byte{}
	for i := range st.Deliveries {
		d := st.Deliveries[i]
		s.deliveries[d.EventID] = &d
		s.order = append(s.order, d.EventID)
	}
	for id, p := range st.Payloads {
		s.payloads[id] = p
	}
	// The fake's Events API learns again which deliveries succeeded
	// (delivery_success).
	for _, id := range s.order {
		if d := s.deliveries[id]; d.Kind != "thin" && s.delivered(id) {
			s.fake.Delivered(d.Account, true, id)
		}
	}
	s.settlements = map[string]settlement{}
	for _, x := range st.Settlements {
		s.settlements[x.ID] = x
	}
	if s.cfg.Actions != nil {
		s.cfg.Actions.restore(st.Actions)
	}
	return nil
}

// resume restarts what the stop interrupted: pending deliveries (the next
// attempt after RetryBase, or at once if none was made) and settlements.
func (s *Server) resume() {
	type retry struct {
		d       Delivery
		payload []byte
	}
	s.mu.Lock()
	var pending []retry
	for _, id := range s.order {
		if d := s.deliveries[id]; d.Status == "pending" {
			pending = append(pending, retry{*d, s.payloads[id]})
		}
	}
	settlements := make([]settlement, 0, len(s.settlements))
	for _, x := range s.settlements {
		settlements = append(settlements, x)
	}
	s.mu.Unlock()
	for _, r := range pending {
		if s.webhookURL() == "" { // deliveries are off now
			s.setStatus(r.d.EventID, "none", 0, "")
			continue
		}
		id, payload, next := r.d.EventID, r.payload, r.d.Attempts+1
		wait := time.Duration(0)
		if r.d.Attempts > 0 {
			wait = s.cfg.RetryBase
		}
		s.after(wait, func() { s.deliver(id, payload, next) })
	}
	for _, x := range settlements {
		s.scheduleSettlement(x)
	}
}
