package testenv

import (
	"errors"
	"net"
	"sync"
	"testing"
)

// FaultProxy is a TCP proxy in front of a real component (Postgres,
// DynamoDB Local). It fails the component in two ways:
//
//   - Cut: unreachable the way a crash does: open connections are reset and
//     new ones are closed at once. Clients learn it immediately.
//   - BlackHole: unreachable the way a network partition or a failover does:
//     nothing is closed, but every byte sent either way is silently dropped
//     and new connections are accepted and never answered. Clients learn it
//     only from their own timeouts.
//
// Restore lets traffic through again.
type FaultProxy struct {
	target   string
	listener net.Listener
	mu       sync.Mutex
	mode     faultMode
	conns    map[net.Conn]struct{}
}

type faultMode int

const (
	forwarding faultMode = iota
	cut
	blackHoled
)

// NewFaultProxy proxies 127.0.0.1:<random> to target until the test ends.
func NewFaultProxy(t testing.TB, target string) *FaultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("fault proxy: %v", err)
	}
	p := &FaultProxy{target: target, listener: ln, conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		p.Cut()
	})
	return p
}

// Addr is the proxy's address.
func (p *FaultProxy) Addr() string { return p.listener.Addr().String() }

// Cut resets every open connection and refuses new ones.
func (p *FaultProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = cut
	for c := range p.conns {
		if tcp, ok := c.(*net.TCPConn); ok {
			_ = tcp.SetLinger(0) // RST, as a dead peer would
		}
		_ = c.Close()
		delete(p.conns, c)
	}
}

// BlackHole stops forwarding without closing anything: from now on, bytes
// read on open connections (either way) are dropped, and new connections are
// accepted, never connected to the target, and never answered (they stay
// dead after Restore, like a connection attempt lost in a partition).
func (p *FaultProxy) BlackHole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = blackHoled
}

// Restore lets connections through again.
func (p *FaultProxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = forwarding
}

// Conns is the number of connections open through the proxy (both sides).
func (p *FaultProxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

func (p *FaultProxy) current() faultMode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// track registers c and returns the mode it was accepted in; a cut proxy
// does not register it.
func (p *FaultProxy) track(c net.Conn) faultMode {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mode != cut {
		p.conns[c] = struct{}{}
	}
	return p.mode
}

func (p *FaultProxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

func (p *FaultProxy) serve() {
	for {
		client, err := p.listener.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		go p.pipe(client)
	}
}

func (p *FaultProxy) pipe(client net.Conn) {
	switch p.track(client) {
	case cut:
		_ = client.Close()
		return
	case blackHoled:
		// Accepted but lost: read and drop until the client gives up.
		defer p.untrack(client)
		p.drain(client)
		return
	}
	defer p.untrack(client)
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = client.Close()
		return
	}
	if p.track(server) == cut {
		_ = server.Close()
		_ = client.Close()
		return
	}
	defer p.untrack(server)
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		p.forward(dst, src)
		_ = dst.Close()
		_ = src.Close()
		done <- struct{}{}
	}
	go cp(server, client)
	go cp(client, server)
	<-done
	<-done
}

// forward copies src to dst, dropping what it reads while black-holed.
func (p *FaultProxy) forward(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && p.current() == forwarding {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *FaultProxy) drain(c net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		if _, err := c.Read(buf); err != nil {
			_ = c.Close()
			return
		}
	}
}
