package dbtest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy forwards TCP connections to a database and can be cut and restored,
// to play a database outage without touching the database itself.
type Proxy struct {
	t      testing.TB
	target string
	addr   string
	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
}

// NewProxy listens on a free port of 127.0.0.1 and forwards to target
// (host:port) until the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p := &Proxy{t: t, target: target}
	p.listen("127.0.0.1:0")
	t.Cleanup(p.Cut)
	return p
}

// Addr is the proxy's host:port, to put in a database URL.
func (p *Proxy) Addr() string { return p.addr }

func (p *Proxy) listen(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		p.t.Fatalf("proxy listening on %s: %v", addr, err)
	}
	p.mu.Lock()
	p.ln, p.addr = ln, ln.Addr().String()
	p.mu.Unlock()
	go p.serve(ln)
}

func (p *Proxy) serve(ln net.Listener) {
	for {
		in, err := ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(out, in); out.Close() }()
		go func() { _, _ = io.Copy(in, out); in.Close() }()
	}
}

// Cut stops accepting and closes every forwarded connection: the database
// looks down.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// Restore listens again on the same address: the database is back.
func (p *Proxy) Restore() { p.listen(p.addr) }
