package stripebudget

import (
	"sync/atomic"
	"time"
)

// Stats counts what became of the slots one replica leased: every slot the
// store granted was either used by a request or lost for one of the
// reasons below. With the rate and the run's length, the slots nobody
// leased (the schedule fell behind now) are the rest: rate × seconds −
// Leased summed over the replicas.
type Stats struct {
	Leases int64 // leases the store answered
	Leased int64 // slots the store granted
	Used   int64 // slots a request was sent on
	// Late: slots whose request woke more than Config.Late after them.
	Late int64
	// HandedLate: of those, slots the leaser handed out already that late
	// (the lease's answer, or the leaser, came late); the rest were the
	// requests' own late wake-ups.
	HandedLate int64
	// Paused: slots in hand when a 429 paused the budget.
	Paused int64
	// SpareExpired: spare charges slots too old when a charge came.
	SpareExpired int64
	// Unwanted: slots that came when nobody here waited and no spare
	// place was free.
	Unwanted int64
	// Woke counts the requests by how late they woke after their slot,
	// in requests' worth (1/rate): under 1, 1–2, 2–3, 3–5, 5–10, 10 and
	// more. Used and dropped slots both count.
	Woke [6]int64
}

// stats is Stats kept with atomics (the leaser and the requests update it).
type stats struct {
	leases, leased, used, late, handedLate, paused, spareExpired, unwanted atomic.Int64
	woke                                                                   [6]atomic.Int64
}

// wokeAfter counts a request that woke d after its slot.
func (s *stats) wokeAfter(d, interval time.Duration) {
	i := 0
	switch w := float64(d) / float64(interval); {
	case w >= 10:
		i = 5
	case w >= 5:
		i = 4
	case w >= 3:
		i = 3
	case w >= 2:
		i = 2
	case w >= 1:
		i = 1
	}
	s.woke[i].Add(1)
}

// Stats returns the counts since New.
func (b *Shared) Stats() Stats {
	s := &b.stats
	out := Stats{Leases: s.leases.Load(), Leased: s.leased.Load(), Used: s.used.Load(), Late: s.late.Load(), HandedLate: s.handedLate.Load(),
		Paused: s.paused.Load(), SpareExpired: s.spareExpired.Load(), Unwanted: s.unwanted.Load()}
	for i := range out.Woke {
		out.Woke[i] = s.woke[i].Load()
	}
	return out
}

// Add sums two replicas' counts.
func (s Stats) Add(o Stats) Stats {
	s.Leases += o.Leases
	s.Leased += o.Leased
	s.Used += o.Used
	s.Late += o.Late
	s.HandedLate += o.HandedLate
	s.Paused += o.Paused
	s.SpareExpired += o.SpareExpired
	s.Unwanted += o.Unwanted
	for i := range s.Woke {
		s.Woke[i] += o.Woke[i]
	}
	return s
}
