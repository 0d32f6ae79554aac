package safego_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/safego"
)

type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) Panicked(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[name]++
}

func (c *counter) get(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[name]
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func TestDo(t *testing.T) {
	sentinel := errors.New("plain failure")
	tests := []struct {
		name      string
		f         func() error
		wantErr   error
		wantPanic bool
	}{
		{name: "returns nil", f: func() error { return nil }},
		{name: "returns an error", f: func() error { return sentinel }, wantErr: sentinel},
		{name: "panics with a value", f: func() error { panic("boom") }, wantPanic: true},
		{name: "panics with an error", f: func() error { panic(sentinel) }, wantPanic: true},
		{name: "nil map write", f: func() error { var m map[string]int; m["x"] = 1; return nil }, wantPanic: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var log syncBuf
			c := &counter{}
			s := safego.New(slog.New(slog.NewJSONHandler(&log, nil)), c, time.Millisecond)
			err := s.Do("work", tc.f)
			if !tc.wantPanic {
				require.ErrorIs(t, err, tc.wantErr)
				require.Zero(t, c.get("work"))
				require.Empty(t, log.String())
				return
			}
			var pe *safego.PanicError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, "work", pe.Name)
			require.Equal(t, 1, c.get("work"))
			require.Contains(t, log.String(), `"goroutine":"work"`)
			require.Contains(t, log.String(), "safego_test.go", "the log carries the stack")
		})
	}
}

// TestGoRestartsAPanickingLoop: a loop that panics on its first two runs is
// started again each time and its third run goes on; each panic is counted
// and logged with its stack; the process survives.
func TestGoRestartsAPanickingLoop(t *testing.T) {
	var log syncBuf
	c := &counter{}
	s := safego.New(slog.New(slog.NewJSONHandler(&log, nil)), c, time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var runs atomic.Int32
	reached := make(chan struct{})
	var wg sync.WaitGroup
	s.Go(ctx, &wg, "ticker", func(ctx context.Context) {
		if runs.Add(1) <= 2 {
			panic("tick failed")
		}
		close(reached)
		<-ctx.Done()
	})
	select {
	case <-reached:
	case <-time.After(5 * time.Second):
		t.Fatal("the loop was not restarted after its panics")
	}
	require.Equal(t, 2, c.get("ticker"))
	require.Equal(t, 2, strings.Count(log.String(), "background work panicked"))
	cancel()
	wg.Wait()
	require.EqualValues(t, 3, runs.Load())
}

// TestGoStopsWithContext: a loop panicking forever is not restarted once
// ctx ends, and one that returns is not restarted at all.
func TestGoStopsWithContext(t *testing.T) {
	c := &counter{}
	s := safego.New(nil, c, time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	s.Go(ctx, &wg, "always", func(context.Context) { panic("again") })
	require.Eventually(t, func() bool { return c.get("always") >= 3 }, 5*time.Second, time.Millisecond)
	cancel()
	wg.Wait()

	var returned atomic.Int32
	s.Go(context.Background(), &wg, "once", func(context.Context) { returned.Add(1) })
	wg.Wait()
	require.EqualValues(t, 1, returned.Load())
}
