package postgres

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// tcpUserTimeout sets TCP_USER_TIMEOUT on a dialled socket.
func tcpUserTimeout(d time.Duration) func(network, address string, c syscall.RawConn) error {
	return func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d.Milliseconds()))
		}); err != nil {
			return err
		}
		return serr
	}
}
