package testenv

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
)

// FaultProxy is a TCP proxy in front of a real component (Postgres,
// DynamoDB Local). Cut makes the component unreachable the way a crash or a
// network partition does: open connections are reset and new ones are
// closed at once. Restore lets traffic through again.
type FaultProxy struct {
	target   string
	listener net.Listener
	mu       sync.Mutex
	cut      bool
	conns    map[net.Conn]struct{}
}

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
	p.cut = true
	for c := range p.conns {
		if tcp, ok := c.(*net.TCPConn); ok {
			_ = tcp.SetLinger(0) // RST, as a dead peer would
		}
		_ = c.Close()
		delete(p.conns, c)
	}
}

// Restore lets connections through again.
func (p *FaultProxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

func (p *FaultProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	p.conns[c] = struct{}{}
	return true
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
	if !p.track(client) {
		_ = client.Close()
		return
	}
	defer p.untrack(client)
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = client.Close()
		return
	}
	if !p.track(server) {
		_ = server.Close()
		_ = client.Close()
		return
	}
	defer p.untrack(server)
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		_ = dst.Close()
		_ = src.Close()
		done <- struct{}{}
	}
	go cp(server, client)
	go cp(client, server)
	<-done
	<-done
}
