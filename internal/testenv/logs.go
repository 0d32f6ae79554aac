package testenv

import (
	"strings"
	"sync"
)

// Logs is a log sink safe for the goroutines of the program under test,
// which the test reads (String) while they may still write.
type Logs struct {
	mu sync.Mutex
	b  strings.Builder
}

// Write appends p.
func (l *Logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is everything written so far.
func (l *Logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
