// Package safego starts the service's background goroutines so that a panic
// in one of them cannot end the process that also ingests webhooks: the
// panic is recovered, logged with its stack, counted, and the loop started
// again after a pause (Loop), or turned into an error of that one piece of
// work (Do: a clock advance fails, a batch is retried).
package safego

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"
)

// Observer is told of every recovered panic, by the name of the loop or
// work (a fixed label set: the code's names, never data).
type Observer interface {
	Panicked(name string)
}

// PanicError is the error Do returns for a panic.
type PanicError struct {
	Name  string
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("%s panicked: %v", e.Name, e.Value) }

// Starter starts goroutines. The zero value is not usable: call New.
type Starter struct {
	log     *slog.Logger
	obs     Observer
	restart time.Duration
}

// New returns a starter logging to log and counting on obs (either may be
// nil). A panicking loop is started again after restart (1 s when zero):
// a loop that panics at once on every start neither spins nor floods the
// log.
func New(log *slog.Logger, obs Observer, restart time.Duration) *Starter {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if restart <= 0 {
		restart = time.Second
	}
	return &Starter{log: log, obs: obs, restart: restart}
}

// OrDefault is s, or a starter that only logs to log when s is nil (a
// package used without one, as in a unit test).
func (s *Starter) OrDefault(log *slog.Logger) *Starter {
	if s != nil {
		return s
	}
	return New(log, nil, 0)
}

// Do runs f, turning a panic into a *PanicError (logged with its stack and
// counted).
func (s *Starter) Do(name string, f func() error) (err error) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		stack := debug.Stack()
		if s.obs != nil {
			s.obs.Panicked(name)
		}
		s.log.Error("background work panicked", "goroutine", name, "panic", fmt.Sprint(r), "stack", string(stack))
		err = &PanicError{Name: name, Value: r, Stack: stack}
	}()
	return f()
}

// Go runs loop in a new goroutine, counted in wg (when not nil): if loop
// panics it is started again after the restart pause, until ctx ends; when
// loop returns, the goroutine ends.
func (s *Starter) Go(ctx context.Context, wg *sync.WaitGroup, name string, loop func(ctx context.Context)) {
	if wg != nil {
		wg.Add(1)
	}
	go func() {
		if wg != nil {
			defer wg.Done()
		}
		s.Loop(ctx, name, loop)
	}()
}

// Loop runs loop in the calling goroutine, starting it again after a panic
// (see Go).
func (s *Starter) Loop(ctx context.Context, name string, loop func(ctx context.Context)) {
	for {
		err := s.Do(name, func() error { loop(ctx); return nil })
		if err == nil || ctx.Err() != nil {
			return
		}
		s.log.Warn("restarting background loop after a panic", "goroutine", name, "after", s.restart)
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.restart):
		}
	}
}
