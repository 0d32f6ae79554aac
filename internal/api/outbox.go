package api

import (
	"context"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/outbox"
)

// OutboxAdmin is the part of outbox.Store the internal API drives: dead
// letters, their re-drive, and backlog figures.
type OutboxAdmin interface {
	ListDead(ctx context.Context, topic string, after outbox.DeadCursor, limit int) ([]outbox.DeadLetter, *outbox.DeadCursor, error)
	Redrive(ctx context.Context, id uuid.UUID) error
	RedriveMany(ctx context.Context, ids []uuid.UUID) ([]uuid.UUID, error)
	RedriveTopic(ctx context.Context, topic string) ([]uuid.UUID, error)
	Stats(ctx context.Context) ([]outbox.TopicStats, error)
}

// DeadLetterJSON is a dead letter as the API shows it (never the payload).
type DeadLetterJSON struct {
	ID        string `json:"id"`
	Topic     string `json:"topic"`
	Type      string `json:"type"`
	DedupeKey string `json:"dedupe_key"`
	Attempts  int    `json:"attempts"`
	Redrives  int    `json:"redrives"`
	CreatedAt string `json:"created_at"`
	DeadAt    string `json:"dead_at"`
	LastError string `json:"last_error"`
}

// TopicStatsJSON is one topic's backlog figures.
type TopicStatsJSON struct {
	Topic                string  `json:"topic"`
	Pending              int     `json:"pending"`
	OldestPendingSeconds float64 `json:"oldest_pending_seconds"`
	Dead                 int     `json:"dead"`
}

// RedriveResult lists the messages made due again.
type RedriveResult struct {
	Redriven []string `json:"redriven"`
}

// maxRedriveIDs bounds one many-message re-drive.
const maxRedriveIDs = 1000

type outboxRoutes struct{ store OutboxAdmin }

func registerOutbox(g router, store OutboxAdmin) {
	if store == nil {
		return
	}
	r := outboxRoutes{store: store}
	g.GET("/outbox/dead", r.listDead)
	g.GET("/outbox/stats", r.stats)
	g.POST("/outbox/redrive", r.redriveMany)
	g.POST("/outbox/:id/redrive", r.redriveOne)
}

func (r outboxRoutes) listDead(c echo.Context) error {
	q, err := requestParams(c, "topic", "limit", "cursor")
	if err != nil {
		return err
	}
	limit, after, err := pageOf(q, decodeDeadCursor)
	if err != nil {
		return err
	}
	topic, given := q["topic"]
	if given && !validTopic(topic) {
		return apperr.Invalid("topic: lowercase letters, 1 to 64")
	}
	items, next, err := r.store.ListDead(c.Request().Context(), topic, after, int(limit))
	if err != nil {
		return apperr.Wrap(err, apperr.CodeUnavailable, "could not list dead letters")
	}
	cursor := ""
	if next != nil {
		cursor = encodeDeadCursor(*next)
	}
	return c.JSON(http.StatusOK, listOf(items, cursor, func(d outbox.DeadLetter) DeadLetterJSON {
		return DeadLetterJSON{ID: d.ID.String(), Topic: d.Topic, Type: d.Type, DedupeKey: d.DedupeKey,
			Attempts: d.Attempts, Redrives: d.Redrives, CreatedAt: d.CreatedAt.UTC().Format(time.RFC3339Nano),
			DeadAt: d.DeadAt.UTC().Format(time.RFC3339Nano), LastError: d.LastError}
	}))
}

func (r outboxRoutes) stats(c echo.Context) error {
	if _, err := requestParams(c); err != nil {
		return err
	}
	st, err := r.store.Stats(c.Request().Context())
	if err != nil {
		return apperr.Wrap(err, apperr.CodeUnavailable, "could not read outbox figures")
	}
	return c.JSON(http.StatusOK, listOf(st, "", func(s outbox.TopicStats) TopicStatsJSON {
		return TopicStatsJSON{Topic: s.Topic, Pending: s.Pending, OldestPendingSeconds: s.OldestPending.Seconds(), Dead: s.Dead}
	}))
}

func (r outboxRoutes) redriveOne(c echo.Context) error {
	if _, err := requestParams(c); err != nil {
		return err
	}
	id, err := uuid.Parse(c.Param("id"))
	if err != nil {
		return apperr.Invalid("id: a message UUID")
	}
	err = r.store.Redrive(c.Request().Context(), id)
	if err != nil {
		return apperr.Ensure(err, apperr.CodeUnavailable, "could not re-drive %s", id)
	}
	return c.JSON(http.StatusOK, RedriveResult{Redriven: []string{id.String()}})
}

type redriveRequest struct {
	IDs   []string `json:"ids"`
	Topic string   `json:"topic"`
}

func (r outboxRoutes) redriveMany(c echo.Context) error {
	var req redriveRequest
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	if (len(req.IDs) == 0) == (req.Topic == "") {
		return apperr.Invalid("give either ids (1 to %d) or a topic", maxRedriveIDs)
	}
	var ids []uuid.UUID
	var err error
	if req.Topic != "" {
		if !validTopic(req.Topic) {
			return apperr.Invalid("topic: lowercase letters, 1 to 64")
		}
		ids, err = r.store.RedriveTopic(c.Request().Context(), req.Topic)
	} else {
		if len(req.IDs) > maxRedriveIDs {
			return apperr.Invalid("at most %d ids", maxRedriveIDs)
		}
		want := make([]uuid.UUID, len(req.IDs))
		for i, s := range req.IDs {
			if want[i], err = uuid.Parse(s); err != nil {
				return apperr.Invalid("ids[%d]: a message UUID", i)
			}
		}
		ids, err = r.store.RedriveMany(c.Request().Context(), want)
	}
	if err != nil {
		return apperr.Wrap(err, apperr.CodeUnavailable, "could not re-drive")
	}
	out := RedriveResult{Redriven: make([]string, len(ids))}
	for i, id := range ids {
		out.Redriven[i] = id.String()
	}
	return c.JSON(http.StatusOK, out)
}

func validTopic(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && r != '_' && r != '-' {
			return false
		}
	}
	return true
}

// The dead-letter cursor: "<dead_at unix nanoseconds>.<id>", base64url.
func encodeDeadCursor(c outbox.DeadCursor) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.DeadAt.UnixNano(), 10) + "." + c.ID.String()))
}

func decodeDeadCursor(s string) (outbox.DeadCursor, error) {
	bad := apperr.Invalid("invalid cursor")
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(s) > 256 {
		return outbox.DeadCursor{}, bad
	}
	ns, id, ok := strings.Cut(string(raw), ".")
	if !ok {
		return outbox.DeadCursor{}, bad
	}
	n, err := strconv.ParseInt(ns, 10, 64)
	if err != nil || n <= 0 {
		return outbox.DeadCursor{}, bad
	}
	u, err := uuid.Parse(id)
	if err != nil {
		return outbox.DeadCursor{}, bad
	}
	return outbox.DeadCursor{DeadAt: time.Unix(0, n), ID: u}, nil
}
