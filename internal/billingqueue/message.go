// Package billingqueue spreads a collection run's accounts over every
// replica through an SQS FIFO queue (docs/design.md §10 "Collections at
// scale"; docs/billing.md "Billing queue").
//
// The Enqueuer is handed the accounts a run found due (it pages nothing
// itself) and sends one message per account, ten to a SendMessageBatch.
// The Worker long-polls the queue on every replica and hands each message
// to an AccountCollector, which collects the account under its lock
// exactly as an in-process run does. A message is deleted only once the
// account's outcome is recorded in the RunStore; a locked account's
// message comes back after LockedDelay; a message that keeps failing
// reaches the queue's dead-letter queue after MaxReceives receives and is
// recorded as dead (an incident names its account).
//
// Deduplication: one run per (job, test clock, date) is open at a time
// (RunStore.Begin: a second replica starting the same run joins the open
// one instead of enqueuing again); inside a run the FIFO deduplication id
// is the run, the account and the part, so a batch the SDK resends is
// delivered once. The message group is the account: SQS hands out one
// message of an account at a time, and the account's lock still decides.
package billingqueue

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
)

// Entry is one index entry of the account, as the run read it: the worker
// acts on exactly what the run found, as the in-process run does.
type Entry struct {
	PK   string     `json:"pk"`
	SK   string     `json:"sk"`
	Date dates.Date `json:"date"`
	Kind int        `json:"kind"`
}

// Message is one account of a run (or one part of an account with more
// entries than fit in a message).
type Message struct {
	Run string `json:"run"`
	Job string `json:"job"`
	// Clock is the test clock of the run ("": real time) and ClockNow its
	// time during the run (the day the advance is at).
	Clock    string     `json:"clock,omitempty"`
	ClockNow time.Time  `json:"clock_now,omitzero"`
	Date     dates.Date `json:"date"`
	Account  string     `json:"account"`
	Part     int        `json:"part,omitempty"`
	Entries  []Entry    `json:"entries"`
}

// MaxEntriesPerMessage keeps a message far below SQS's 256 KiB: an entry
// is about 150 bytes of JSON. An account with more due entries is sent as
// several parts, each collected under the account's lock in turn.
const MaxEntriesPerMessage = 500

// errBadMessage: a body that is not a Message; it is never acted on.
var errBadMessage = errors.New("not a billing queue message")

// Decode parses and checks a message body.
func Decode(body string) (Message, error) {
	var m Message
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		return m, fmt.Errorf("%w: %w", errBadMessage, err)
	}
	if m.Run == "" || m.Account == "" || m.Date.IsZero() || m.Job == "" {
		return m, fmt.Errorf("%w: run, job, date and account are required", errBadMessage)
	}
	return m, nil
}

// groupID is the message group: the account, hashed because an account id
// may hold characters a group id may not.
func groupID(account string) string { return digest(account)[:40] }

// dedupID deduplicates a resent batch within the run: the run, the
// account and the part.
func dedupID(m Message) string {
	return digest(fmt.Sprintf("%s\x00%s\x00%d", m.Run, m.Account, m.Part))
}

func digest(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// split cuts one account's entries into the messages that carry them.
func split(base Message, entries []Entry) []Message {
	var out []Message
	for part := 0; part == 0 || len(entries) > 0; part++ {
		n := min(len(entries), MaxEntriesPerMessage)
		m := base
		m.Part, m.Entries = part, entries[:n:n]
		entries = entries[n:]
		out = append(out, m)
	}
	return out
}
