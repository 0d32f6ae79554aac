package config

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// LoopbackAddr checks that addr (host:port) binds to the loopback interface
// only: a loopback IP address or localhost. An empty host, 0.0.0.0 or [::]
// would listen on every interface.
func LoopbackAddr(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port", addr)
	}
	if strings.EqualFold(host, "localhost") {
		return nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.IsLoopback() {
		return fmt.Errorf("%q is not a loopback address (127.0.0.1, [::1] or localhost)", addr)
	}
	return nil
}
