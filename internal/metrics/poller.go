package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Poller holds the poller's collectors (docs/design.md §7). None is
// labelled by account: a platform with many merchants would make one
// series per account and metric. The per-account figures are kept here in
// memory instead (Accounts), for the console.
type Poller struct {
	EventsListed   prometheus.Counter
	EventsReplayed prometheus.Counter
	EventsFailed   prometheus.Counter
	WebhookGaps    prometheus.Counter
	// OldestCheckpointAge is the age of the oldest account checkpoint at
	// the end of its account's last run; SilentAccounts counts the accounts
	// whose last full listing found events no delivery brought while not
	// one of its events came by webhook or EventBridge.
	OldestCheckpointAge prometheus.Gauge
	SilentAccounts      prometheus.Gauge

	mu       sync.Mutex
	accounts map[string]PollerAccount
}

// PollerAccount is what this instance's poller found about one account
// since the instance started.
type PollerAccount struct {
	// WebhookGap counts the events the Events API listed that no delivery
	// had recorded.
	WebhookGap int
	// CheckpointAge is the checkpoint's age at the end of the last run
	// (zero: no checkpoint yet).
	CheckpointAge time.Duration
	// Silent: the last full listing found a webhook gap and no event of
	// the account recorded from a webhook or EventBridge delivery.
	Silent bool
}

// NewPoller registers the poller's collectors on reg (the instance's
// Metrics.Registry).
func NewPoller(reg prometheus.Registerer) *Poller {
	p := &Poller{
		EventsListed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stripe_payments_poller_events_listed_total",
			Help: "Events the Stripe Events API listed to the poller.",
		}),
		EventsReplayed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stripe_payments_poller_events_replayed_total",
			Help: "Events the poller replayed (missing or unprocessed) that are now processed.",
		}),
		EventsFailed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stripe_payments_poller_events_failed_total",
			Help: "Events the poller could not replay; each holds its account's checkpoint back.",
		}),
		WebhookGaps: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stripe_payments_poller_webhook_gap_total",
			Help: "Events the Events API listed that the events table never recorded (the webhook never arrived).",
		}),
		OldestCheckpointAge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stripe_payments_poller_checkpoint_age_seconds",
			Help: "Age of the oldest account checkpoint, each taken at the end of its account's last run (per account: /ops/).",
		}),
		SilentAccounts: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stripe_payments_poller_silent_accounts",
			Help: "Accounts whose last full listing found events no delivery brought and none delivered by webhook or EventBridge (which ones: /ops/).",
		}),
		accounts: map[string]PollerAccount{},
	}
	reg.MustRegister(p.EventsListed, p.EventsReplayed, p.EventsFailed, p.WebhookGaps, p.OldestCheckpointAge, p.SilentAccounts)
	return p
}

// Accounts implements poller.Observer: the accounts a run reconciles. The
// figures of an account no longer among them are dropped, so that a
// removed account neither holds the oldest checkpoint age nor stays silent.
func (p *Poller) Accounts(ids []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	keep := make(map[string]bool, len(ids))
	for _, id := range ids {
		keep[id] = true
		if _, ok := p.accounts[id]; !ok {
			p.accounts[id] = PollerAccount{}
		}
	}
	for id := range p.accounts {
		if !keep[id] {
			delete(p.accounts, id)
		}
	}
	p.updateLocked()
}

// Listed implements poller.Observer.
func (p *Poller) Listed(_ string, n int) { p.EventsListed.Add(float64(n)) }

// Replayed implements poller.Observer.
func (p *Poller) Replayed(_ string, n int) { p.EventsReplayed.Add(float64(n)) }

// Failed implements poller.Observer.
func (p *Poller) Failed(_ string, n int) { p.EventsFailed.Add(float64(n)) }

// WebhookGap implements poller.Observer.
func (p *Poller) WebhookGap(account string, n int) {
	p.WebhookGaps.Add(float64(n))
	p.mu.Lock()
	defer p.mu.Unlock()
	a := p.accounts[account]
	a.WebhookGap += n
	p.accounts[account] = a
}

// CheckpointAge implements poller.Observer.
func (p *Poller) CheckpointAge(account string, age time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := p.accounts[account]
	a.CheckpointAge = age
	p.accounts[account] = a
	p.updateLocked()
}

// Silent implements poller.Observer.
func (p *Poller) Silent(account string, silent bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := p.accounts[account]
	a.Silent = silent
	p.accounts[account] = a
	p.updateLocked()
}

// updateLocked sets the gauges from the per-account figures (p.mu held).
func (p *Poller) updateLocked() {
	var oldest time.Duration
	silent := 0
	for _, a := range p.accounts {
		oldest = max(oldest, a.CheckpointAge)
		if a.Silent {
			silent++
		}
	}
	p.OldestCheckpointAge.Set(oldest.Seconds())
	p.SilentAccounts.Set(float64(silent))
}

// Account returns what this instance's poller found about account (false:
// nothing since the instance started, or no poller runs here).
func (p *Poller) Account(account string) (PollerAccount, bool) {
	if p == nil {
		return PollerAccount{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	a, ok := p.accounts[account]
	return a, ok
}
