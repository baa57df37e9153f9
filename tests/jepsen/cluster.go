package jepsen

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"time"
)

// NodeState is what the nemesis did to a node.
type NodeState uint8

const (
	Running NodeState = iota
	Paused
	Dead
)

// Node is one mmapkit-kv process.
type Node struct {
	ID    int
	IP    string
	Dir   string
	Proxy *Proxy

	// The crash file system under its data directory (nil: a plain
	// directory, for the nodes grow-shrink adds).
	disk *CrashFS

	mu     sync.Mutex
	addr   string // ip:port it serves on now
	cmd    *exec.Cmd
	state  NodeState
	exited chan struct{}
	starts int
}

// Addr is where the node serves now (clients talk to it directly).
func (n *Node) Addr() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.addr
}

// dataDir is the node's --dir.
func (n *Node) dataDir() string {
	if n.disk != nil {
		return filepath.Join(n.disk.Path, "data")
	}
	return filepath.Join(n.Dir, "data")
}

// State is what the nemesis did to the node.
func (n *Node) State() NodeState {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.state
}

// Cluster is three nodes, each behind a proxy that carries the raft traffic.
type Cluster struct {
	Bin string
	// CrashBin is crates/mmapkit-crashfs's crashfs-mount, which the three
	// nodes' data directories are mounted with (see PowerLoss).
	CrashBin string
	Token    string
	Dir      string
	Nodes    []*Node
	// Extra are members added by the grow-shrink nemesis (not used by
	// the clients), until it removes them.
	Extra  []*Node
	nextID int
	Net    *Network
	http   *http.Client
}

// ClusterIPs are the nodes' loopback addresses.
var ClusterIPs = []string{"127.0.0.11", "127.0.0.12", "127.0.0.13"}

// StartCluster starts the nodes and their proxies and initializes the
// cluster with the proxies' addresses. On error, whatever started is stopped.
func StartCluster(bin, crashBin, dir, token string) (c *Cluster, err error) {
	c = &Cluster{Bin: bin, CrashBin: crashBin, Token: token, Dir: dir, Net: NewNetwork(ClusterIPs),
		http: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	var members []string
	for i, ip := range ClusterIPs {
		n := &Node{ID: i + 1, IP: ip, Dir: filepath.Join(dir, fmt.Sprintf("n%d", i+1)), state: Dead}
		c.Nodes = append(c.Nodes, n)
		backing := filepath.Join(n.Dir, "disk")
		if err := os.MkdirAll(backing, 0o755); err != nil {
			return c, err
		}
		if n.disk, err = MountCrashFS(crashBin, backing); err != nil {
			return c, err
		}
		if err := c.start(n); err != nil {
			return c, err
		}
		p, err := c.Net.Listen(n.ID, ip+":0", n.Addr())
		if err != nil {
			return c, fmt.Errorf("proxy of node %d: %w", n.ID, err)
		}
		n.Proxy = p
		members = append(members, fmt.Sprintf("%d=%s", n.ID, p.Addr()))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := []string{"init", "--nodes", strings.Join(members, ",")}
	if token != "" {
		args = append(args, "--token", token)
	}
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		return c, fmt.Errorf("mmapkit-kv init: %v: %s", err, out)
	}
	// `init` itself reached node 1 through its proxy from 127.0.0.1: only
	// connections after it must come from a node's IP.
	c.Net.Unattributed.Store(0)
	return c, nil
}

// start runs the node's process and waits (up to 60 s) for its
// "listening on" line; the proxy then forwards to the new address.
func (c *Cluster) start(n *Node) error {
	n.mu.Lock()
	n.starts++
	logPath := filepath.Join(n.Dir, fmt.Sprintf("node-%d.log", n.starts))
	n.mu.Unlock()
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	args := []string{"serve", "--id", fmt.Sprint(n.ID), "--dir", n.dataDir(), "--bind", n.IP + ":0",
		// Small snapshot intervals: restarted and cut-off nodes catch up by snapshot too.
		"--snapshot-every", "500", "--keep", "100"}
	if c.Token != "" {
		args = append(args, "--token", c.Token)
	}
	cmd := exec.Command(c.Bin, args...)
	cmd.Stderr = logf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return err
	}
	// The node dies with the test process, even when that is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	listening := make(chan string, 1)
	exited := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logf, line)
			if i := strings.Index(line, " listening on "); i >= 0 {
				select {
				case listening <- strings.TrimSpace(line[i+len(" listening on "):]):
				default:
				}
			}
		}
		_, _ = io.Copy(logf, stdout)
		_ = cmd.Wait()
		logf.Close()
		close(exited)
	}()
	select {
	case addr := <-listening:
		n.mu.Lock()
		n.addr, n.cmd, n.exited, n.state = addr, cmd, exited, Running
		n.mu.Unlock()
		if n.Proxy != nil {
			n.Proxy.SetTarget(addr)
		}
		return nil
	case <-exited:
		return fmt.Errorf("node %d exited before listening (%v); log: %s", n.ID, cmd.ProcessState, logPath)
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		return fmt.Errorf("node %d printed no 'listening on' line within 60 s; log: %s", n.ID, logPath)
	}
}

// Kill SIGKILLs the node and waits for it to be gone.
func (c *Cluster) Kill(n *Node) {
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.state = Dead
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

// Restart starts a dead node again (same directory and IP).
func (c *Cluster) Restart(n *Node) error { return c.start(n) }

// Admin runs `mmapkit-kv ARGS --nodes <every node's address>` (with the
// token), as an operator would.
func (c *Cluster) Admin(args ...string) error {
	var addrs []string
	for _, n := range c.Nodes {
		addrs = append(addrs, n.Addr())
	}
	args = append(args, "--nodes", strings.Join(addrs, ","))
	if c.Token != "" {
		args = append(args, "--token", c.Token)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, c.Bin, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("mmapkit-kv %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// Replace kills the node, deletes its data directory and restarts it on
// an empty one (same id and IP): a lost disk. The node must take no part
// as the member it was; the operator's procedure makes it one again:
// `member remove ID`, `member add ID ADDR` (the proxy's address, which
// peers use), `member promote ID`.
func (c *Cluster) Replace(n *Node) error {
	c.Kill(n)
	if err := os.RemoveAll(n.dataDir()); err != nil {
		return err
	}
	if err := c.Restart(n); err != nil {
		return err
	}
	id := fmt.Sprint(n.ID)
	if err := c.Admin("member", "remove", id); err != nil {
		return err
	}
	if err := c.Admin("member", "add", id, n.Proxy.Addr()); err != nil {
		return err
	}
	return c.Admin("member", "promote", id)
}

// Grow starts a node on a new directory and IP, behind a proxy of its
// own, and adds it as an operator would: `member add ID ADDR`, `member
// promote ID`. The node is returned (to stop) even when adding failed.
func (c *Cluster) Grow() (*Node, error) {
	if c.nextID == 0 {
		c.nextID = len(c.Nodes) + 1
	}
	id := c.nextID
	c.nextID++
	ip := fmt.Sprintf("127.0.0.%d", 10+id)
	n := &Node{ID: id, IP: ip, Dir: filepath.Join(c.Dir, fmt.Sprintf("n%d", id)), state: Dead}
	if err := os.MkdirAll(n.Dir, 0o755); err != nil {
		return nil, err
	}
	c.Net.AddNode(id, ip)
	if err := c.start(n); err != nil {
		return nil, err
	}
	c.Extra = append(c.Extra, n)
	p, err := c.Net.Listen(n.ID, ip+":0", n.Addr())
	if err != nil {
		return n, err
	}
	n.Proxy = p
	if err := c.Admin("member", "add", fmt.Sprint(id), p.Addr()); err != nil {
		return n, err
	}
	return n, c.Admin("member", "promote", fmt.Sprint(id))
}

// Shrink removes a node Grow added (`member remove ID`), then stops it.
func (c *Cluster) Shrink(n *Node) error {
	err := c.Admin("member", "remove", fmt.Sprint(n.ID))
	c.Kill(n)
	if n.Proxy != nil {
		n.Proxy.Close()
	}
	for i, e := range c.Extra {
		if e == n {
			c.Extra = append(c.Extra[:i], c.Extra[i+1:]...)
			break
		}
	}
	return err
}

// PowerLoss cuts the node's power: its file system freezes (nothing more
// it writes or syncs happens), it is SIGKILLed, and its disk keeps what
// it had synced and a seeded random part of what it had not (torn and
// reordered sectors; crates/mmapkit-crashfs). The node stays down (Restart
// it) on a fresh mount of what survived.
func (c *Cluster) PowerLoss(n *Node, seed int64) error {
	if n.disk == nil {
		return fmt.Errorf("node %d has no crash file system", n.ID)
	}
	if err := n.disk.Freeze(); err != nil {
		return err
	}
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.state = Dead
	n.mu.Unlock()
	// Killed while frozen: it can neither sync nor answer anything more.
	_ = cmd.Process.Signal(syscall.SIGKILL)
	err := n.disk.Crash(seed)
	<-exited
	if err != nil {
		return err
	}
	n.disk, err = MountCrashFS(c.CrashBin, n.disk.backing)
	return err
}

// Pause SIGSTOPs the node.
func (c *Cluster) Pause(n *Node) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil && n.state == Running {
		_ = n.cmd.Process.Signal(syscall.SIGSTOP)
		n.state = Paused
	}
}

// Resume SIGCONTs the node.
func (c *Cluster) Resume(n *Node) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil && n.state == Paused {
		_ = n.cmd.Process.Signal(syscall.SIGCONT)
		n.state = Running
	}
}

// HealAll resumes paused nodes, restarts dead ones and heals the network.
func (c *Cluster) HealAll() error {
	c.Net.Heal()
	for _, n := range c.Nodes {
		switch n.State() {
		case Paused:
			c.Resume(n)
		case Dead:
			if err := c.Restart(n); err != nil {
				return err
			}
		}
	}
	return nil
}

// Close kills every node (resuming paused ones first) and stops the proxies.
func (c *Cluster) Close() {
	for _, n := range append(append([]*Node{}, c.Nodes...), c.Extra...) {
		n.mu.Lock()
		cmd, exited := n.cmd, n.exited
		n.mu.Unlock()
		if cmd != nil {
			_ = cmd.Process.Signal(syscall.SIGCONT)
			_ = cmd.Process.Signal(syscall.SIGKILL)
			<-exited
		}
		if n.Proxy != nil {
			n.Proxy.Close()
		}
		if n.disk != nil {
			n.disk.Unmount()
		}
	}
}

func (c *Cluster) get(ctx context.Context, n *Node, route string, into any) error {
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+n.Addr()+route, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET %s on node %d: HTTP %d: %.200s", route, n.ID, resp.StatusCode, body)
	}
	return json.Unmarshal(body, into)
}

// Metrics is the part of openraft's RaftMetrics the test uses.
type Metrics struct {
	ID            int             `json:"id"`
	State         string          `json:"state"`
	CurrentTerm   uint64          `json:"current_term"`
	CurrentLeader *int            `json:"current_leader"`
	LastApplied   json.RawMessage `json:"last_applied"`
}

// Metrics of one node (2 s timeout).
func (c *Cluster) Metrics(n *Node) (Metrics, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var m Metrics
	err := c.get(ctx, n, "/metrics", &m)
	return m, err
}

// Leader is the node that says it is the leader, when every other running
// node that answers names it too; nil when there is none (an election, a
// partition).
func (c *Cluster) Leader() *Node {
	var leader *Node
	var named []int
	for _, n := range c.Nodes {
		if n.State() != Running {
			continue
		}
		m, err := c.Metrics(n)
		if err != nil {
			continue
		}
		if m.State == "Leader" {
			if leader != nil {
				return nil // two nodes say so (different terms): not settled
			}
			leader = n
		}
		if m.CurrentLeader != nil {
			named = append(named, *m.CurrentLeader)
		}
	}
	if leader == nil {
		return nil
	}
	for _, id := range named {
		if id != leader.ID {
			return nil
		}
	}
	return leader
}

// WaitLeader waits up to `patience` for a leader (polling).
func (c *Cluster) WaitLeader(patience time.Duration) *Node {
	deadline := time.Now().Add(patience)
	for {
		if l := c.Leader(); l != nil {
			return l
		}
		if time.Now().After(deadline) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// KvState is a node's GET /kv/state.
type KvState struct {
	ID          int               `json:"id"`
	LastApplied json.RawMessage   `json:"last_applied"`
	Data        map[string]string `json:"data"`
	// Next is the start of the next page (nil: the last); the test's few
	// keys fit in one page of 10 000.
	Next *string `json:"next"`
}

// WaitConverged waits up to `patience` for every node to have applied the
// same log position and map; returns the states last seen and whether they agree.
func (c *Cluster) WaitConverged(patience time.Duration) ([]KvState, bool) {
	deadline := time.Now().Add(patience)
	for {
		states := make([]KvState, len(c.Nodes))
		agree := true
		for i, n := range c.Nodes {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := c.get(ctx, n, "/kv/state?limit=10000", &states[i])
			cancel()
			if err == nil && states[i].Next != nil {
				err = fmt.Errorf("%s: more than one page of state", n.Addr())
			}
			if err != nil {
				agree = false
				continue
			}
			if i > 0 && (string(states[i].LastApplied) != string(states[0].LastApplied) ||
				!reflect.DeepEqual(normData(states[i].Data), normData(states[0].Data))) {
				agree = false
			}
		}
		if agree || time.Now().After(deadline) {
			return states, agree
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func normData(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
