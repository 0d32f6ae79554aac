package trigger

import (
	"context"
	"log/slog"
)

// Intake is the one way in for a trigger, from the queue or the API:
// record it, then wake the processor. Both sources give the same result
// because they go through here.
type Intake struct {
	Store *Store
	// Nudge wakes the processor (nil: it finds the trigger on its poll).
	Nudge    func()
	Observer Observer
	Log      *slog.Logger
}

// Accept records t from source (messageID: the EventBridge event's id).
// duplicate: its reference was recorded already, rec is that trigger and
// nothing new happens.
func (in *Intake) Accept(ctx context.Context, t Trigger, source, messageID string) (rec Record, duplicate bool, err error) {
	rec, duplicate, err = in.Store.Record(ctx, t, source, messageID)
	if err != nil {
		return rec, false, err
	}
	log := in.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if duplicate {
		log.Info("billing trigger: reference recorded already; nothing to do", "trigger_id", rec.ID,
			"account", t.AccountID, "kind", string(t.Kind), "source", source)
		if in.Observer != nil {
			in.Observer.Triggered(string(t.Kind), OutcomeDuplicate)
		}
		return rec, true, nil
	}
	log.Info("billing trigger recorded", "trigger_id", rec.ID, "account", t.AccountID, "kind", string(t.Kind), "source", source)
	if in.Nudge != nil {
		in.Nudge()
	}
	return rec, false, nil
}

// Get returns trigger id and what it did.
func (in *Intake) Get(ctx context.Context, id string) (Record, error) { return in.Store.Get(ctx, id) }
