package localstripe

import (
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/dispatch"
)

// Actions is a stand-in for ACTIONS_URL under `make run`: it verifies each
// delivery's X-Signature with the actions secret (401 otherwise), keeps it,
// and lists what arrived, so the walk-through can watch a fulfil action
// arrive. GET lists them, oldest first; ?type= filters.
type Actions struct {
	secret string
	mu     sync.Mutex
	got    []ReceivedAction
	// changed is told of each action kept (the state file, when the
	// local Stripe keeps Actions in it).
	changed func()
}

// ReceivedAction is one delivery to Actions.
type ReceivedAction struct {
	Received    time.Time       `json:"received"`
	Idempotency string          `json:"idempotency_key"`
	Type        string          `json:"type"`
	Action      json.RawMessage `json:"action"`
}

// NewActions verifies deliveries with secret (ACTIONS_SECRET).
func NewActions(secret string) *Actions { return &Actions{secret: secret} }

func (a *Actions) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost:
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, "read body", http.StatusBadRequest)
			return
		}
		if err := dispatch.Verify(r.Header.Get("X-Signature"), a.secret, body, 5*time.Minute, time.Now()); err != nil {
			http.Error(w, "bad signature: "+err.Error(), http.StatusUnauthorized)
			return
		}
		var head struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(body, &head) != nil {
			http.Error(w, "not JSON", http.StatusBadRequest)
			return
		}
		a.mu.Lock()
		a.got = append(a.got, ReceivedAction{Received: time.Now().UTC(), Idempotency: r.Header.Get("Idempotency-Key"),
			Type: head.Type, Action: body})
		changed := a.changed
		a.mu.Unlock()
		if changed != nil {
			changed()
		}
		w.WriteHeader(http.StatusOK)
	case http.MethodGet:
		writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": a.list(r.URL.Query().Get("type"))})
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}

// list returns the actions of type typ ("" all), oldest first.
func (a *Actions) list(typ string) []ReceivedAction {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := []ReceivedAction{}
	for _, x := range a.got {
		if typ == "" || x.Type == typ {
			out = append(out, x)
		}
	}
	return out
}

func (a *Actions) restore(got []ReceivedAction) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.got = append([]ReceivedAction(nil), got...)
}

func (a *Actions) notify(changed func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.changed = changed
}

// LocalHandler serves the local Stripe's own routes, beside Stripe's API:
// /_local/webhooks (every event's delivery state), /_local/dashboard/{id}
// (a Dashboard change without its event) and /_local/actions
// (the actions sink, when actions is not nil).
func (s *Server) LocalHandler(actions *Actions) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /_local/webhooks", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": s.Deliveries()})
	})
	// A change made in Stripe's Dashboard, with no event sent: only the
	// reconciliation (docs/design.md §11) can find it. Form: status.
	mux.HandleFunc("POST /_local/dashboard/{id}", func(w http.ResponseWriter, r *http.Request) {
		obj, err := s.fake.DashboardChange(r.PathValue("id"), r.FormValue("status"))
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		s.changed()
		writeJSON(w, http.StatusOK, obj)
	})
	if actions != nil {
		mux.Handle("/_local/actions", actions)
	}
	mux.Handle("/", s.Handler())
	return mux
}
