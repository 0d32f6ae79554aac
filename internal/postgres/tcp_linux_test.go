package postgres_test

import (
	"context"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/stripe-payments/stripe-payments/internal/postgres"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

func TestConnectionsCarryTCPUserTimeout(t *testing.T) {
	dbURL := testenv.DatabaseURL(t)
	pool, err := postgres.ConnectWith(context.Background(), dbURL, postgres.PoolLimits{TCPUserTimeout: 7 * time.Second})
	require.NoError(t, err)
	defer pool.Close()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	// The pool's own dialer, as every connection of the pool is dialled.
	c, err := pool.Config().ConnConfig.DialFunc(context.Background(), "tcp", u.Host)
	require.NoError(t, err)
	defer c.Close()
	raw, err := c.(*net.TCPConn).SyscallConn()
	require.NoError(t, err)
	var ms int
	var serr error
	require.NoError(t, raw.Control(func(fd uintptr) {
		ms, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT)
	}))
	require.NoError(t, serr)
	assert.Equal(t, 7000, ms)
}
