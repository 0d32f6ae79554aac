//go:build !linux

package postgres

import (
	"syscall"
	"time"
)

// tcpUserTimeout is Linux only; elsewhere the context deadlines and
// statement_timeout still bound every call.
func tcpUserTimeout(time.Duration) func(network, address string, c syscall.RawConn) error {
	return nil
}
