package jepsen

import (
	"bufio"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

func echoServer(t *testing.T, addr string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}

// dialFrom connects from node `from`'s IP to a proxy.
func dialFrom(fromIP, addr string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(fromIP)}, Timeout: 2 * time.Second}
	return d.Dial("tcp", addr)
}

// roundTrip sends a line and waits up to `wait` for its echo.
func roundTrip(c net.Conn, wait time.Duration) bool {
	_ = c.SetDeadline(time.Now().Add(wait))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && line == "ping\n"
}

func TestProxyCutsDirectedLinks(t *testing.T) {
	nw := NewNetwork(ClusterIPs)
	var proxies []*Proxy
	for i, ip := range ClusterIPs {
		backend := echoServer(t, ip+":0")
		p, err := nw.Listen(i+1, ip+":0", backend.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		proxies = append(proxies, p)
	}
	// A link that must forward gets a hang-breaker's wait (the echo ends it
	// at once); one that must not, a short one: a slow machine can only make
	// such a round trip fail more surely, never pass.
	const forwards, dropped = 30 * time.Second, 500 * time.Millisecond
	ok := func(from, to int, wait time.Duration) bool {
		c, err := dialFrom(ClusterIPs[from-1], proxies[to-1].Addr())
		if err != nil {
			return false
		}
		defer c.Close()
		return roundTrip(c, wait)
	}
	if !ok(1, 2, forwards) || !ok(2, 1, forwards) || !ok(3, 2, forwards) {
		t.Fatal("healthy network does not forward")
	}
	// An open connection 1->2 is closed by the cut.
	open, err := dialFrom(ClusterIPs[0], proxies[1].Addr())
	if err != nil || !roundTrip(open, forwards) {
		t.Fatal("no connection 1->2")
	}
	for _, mode := range []CutMode{Refuse, Blackhole} {
		nw.Cut(mode, Link{1, 2})
		if open != nil {
			if roundTrip(open, dropped) {
				t.Fatal("an open connection 1->2 still works after the cut")
			}
			open.Close()
			open = nil
		}
		counter := map[CutMode]*atomic.Int64{Refuse: &nw.Refused, Blackhole: &nw.Blackholed}[mode]
		before := counter.Load()
		if ok(1, 2, dropped) {
			t.Fatalf("%s: 1->2 forwards while cut", mode)
		}
		// Counted when the proxy's goroutine for it runs, which a loaded
		// machine can delay past the client's short wait: wait for that
		// (still cut) rather than for time.
		if !eventually(forwards, func() bool { return counter.Load() > before }) {
			t.Fatalf("%s: the proxy never counted the connection 1->2 while cut", mode)
		}
		if !ok(2, 1, forwards) || !ok(3, 2, forwards) || !ok(1, 3, forwards) {
			t.Fatalf("%s: links that are not cut do not forward", mode)
		}
		nw.Heal()
		if !ok(1, 2, forwards) {
			t.Fatalf("%s: 1->2 does not forward after healing", mode)
		}
	}
	if nw.Unattributed.Load() != 0 {
		t.Fatalf("unattributed %d", nw.Unattributed.Load())
	}
	// A connection from an IP that is no node's is counted (and forwarded:
	// its echo comes after the count).
	c, err := net.Dial("tcp", proxies[0].Addr())
	if err != nil || !roundTrip(c, forwards) {
		t.Fatalf("a connection from an unknown IP: %v", err)
	}
	c.Close()
	if nw.Unattributed.Load() != 1 {
		t.Fatalf("unattributed %d, want 1", nw.Unattributed.Load())
	}
}

// eventually polls cond until it holds or `limit` (a hang-breaker) passes.
func eventually(limit time.Duration, cond func() bool) bool {
	for end := time.Now().Add(limit); ; time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
	}
}
