package jepsen

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Link is a directed link: connections that node From opens to node To.
type Link struct{ From, To int }

// CutMode is what a cut link does with new connections.
type CutMode uint8

const (
	// Refuse closes new connections at once.
	Refuse CutMode = iota
	// Blackhole accepts them and discards what they send (until healed).
	Blackhole
)

func (m CutMode) String() string { return [...]string{"refuse", "blackhole"}[m] }

// Network is the set of proxies in front of the nodes and which directed
// links are cut. Proxy j tells which node a connection comes from by its
// source IP (each node binds its peer connections to its own IP).
type Network struct {
	mu      sync.Mutex
	ipNode  map[string]int
	cut     map[Link]CutMode
	conns   map[Link]map[net.Conn]struct{} // both ends of each proxied connection
	proxies map[int]*Proxy

	Accepted     atomic.Int64
	Refused      atomic.Int64
	Blackholed   atomic.Int64
	Unattributed atomic.Int64 // connections from an IP that is no node's
	LastUnknown  atomic.Value // string: the last such source address
}

// NewNetwork with nodeIPs[i] the IP of node i+1.
func NewNetwork(nodeIPs []string) *Network {
	n := &Network{ipNode: map[string]int{}, cut: map[Link]CutMode{}, conns: map[Link]map[net.Conn]struct{}{}, proxies: map[int]*Proxy{}}
	for i, ip := range nodeIPs {
		n.ipNode[ip] = i + 1
	}
	return n
}

// AddNode makes connections from ip count as node id's.
func (n *Network) AddNode(id int, ip string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.ipNode[ip] = id
}

// Cut cuts the given links: closes their open connections; new ones are
// refused or blackholed.
func (n *Network) Cut(mode CutMode, links ...Link) {
	n.mu.Lock()
	var toClose []net.Conn
	for _, l := range links {
		n.cut[l] = mode
		for c := range n.conns[l] {
			toClose = append(toClose, c)
		}
		delete(n.conns, l)
	}
	n.mu.Unlock()
	for _, c := range toClose {
		_ = c.Close()
	}
}

// Heal restores every link (blackholed connections are closed: their
// owners reconnect).
func (n *Network) Heal() {
	n.mu.Lock()
	n.cut = map[Link]CutMode{}
	var toClose []net.Conn
	for _, cs := range n.conns {
		for c := range cs {
			if _, ok := c.(blackholed); ok {
				toClose = append(toClose, c)
				delete(cs, c)
			}
		}
	}
	n.mu.Unlock()
	for _, c := range toClose {
		_ = c.Close()
	}
}

// IsCut tells whether a link is cut.
func (n *Network) IsCut(l Link) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, ok := n.cut[l]
	return ok
}

// blackholed marks a connection held by a cut link.
type blackholed struct{ net.Conn }

func (n *Network) track(l Link, c net.Conn) {
	if n.conns[l] == nil {
		n.conns[l] = map[net.Conn]struct{}{}
	}
	n.conns[l][c] = struct{}{}
}

func (n *Network) untrack(l Link, cs ...net.Conn) {
	n.mu.Lock()
	for _, c := range cs {
		delete(n.conns[l], c)
	}
	n.mu.Unlock()
}

// Proxy forwards connections to node To's current address.
type Proxy struct {
	To     int
	net    *Network
	ln     net.Listener
	target atomic.Value // string host:port
	done   chan struct{}
}

// Listen starts the proxy of node `to` on addr (loopback), forwarding to target.
func (n *Network) Listen(to int, addr, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &Proxy{To: to, net: n, ln: ln, done: make(chan struct{})}
	p.target.Store(target)
	n.mu.Lock()
	n.proxies[to] = p
	n.mu.Unlock()
	go p.serve()
	return p, nil
}

// Addr is where the proxy listens.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetTarget changes where new connections go (a restarted node's port).
func (p *Proxy) SetTarget(t string) { p.target.Store(t) }

// Close stops accepting and closes every connection of this proxy.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	<-p.done
	n := p.net
	n.mu.Lock()
	var toClose []net.Conn
	for l, cs := range n.conns {
		if l.To == p.To {
			for c := range cs {
				toClose = append(toClose, c)
			}
			delete(n.conns, l)
		}
	}
	n.mu.Unlock()
	for _, c := range toClose {
		_ = c.Close()
	}
}

func (p *Proxy) serve() {
	defer close(p.done)
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.handle(c)
	}
}

func (p *Proxy) handle(c net.Conn) {
	n := p.net
	host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
	n.mu.Lock()
	from, known := n.ipNode[host]
	l := Link{From: from, To: p.To}
	mode, isCut := n.cut[l]
	if isCut && mode == Blackhole {
		n.track(l, blackholed{c})
	}
	n.mu.Unlock()
	if !known {
		n.Unattributed.Add(1)
		n.LastUnknown.Store(c.RemoteAddr().String())
	}
	if isCut {
		if mode == Refuse {
			n.Refused.Add(1)
			_ = c.Close()
			return
		}
		n.Blackholed.Add(1)
		_, _ = io.Copy(io.Discard, c)
		n.untrack(l, blackholed{c})
		_ = c.Close()
		return
	}
	up, err := net.DialTimeout("tcp", p.target.Load().(string), 5*time.Second)
	if err != nil {
		_ = c.Close()
		return
	}
	n.mu.Lock()
	if _, nowCut := n.cut[l]; nowCut {
		// Cut while dialing.
		n.mu.Unlock()
		_ = c.Close()
		_ = up.Close()
		return
	}
	n.track(l, c)
	n.track(l, up)
	n.mu.Unlock()
	n.Accepted.Add(1)
	var wg sync.WaitGroup
	wg.Add(2)
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		// Either side closing ends both.
		_ = dst.Close()
		_ = src.Close()
	}
	go pipe(up, c)
	go pipe(c, up)
	wg.Wait()
	n.untrack(l, c, up)
}
