package jepsen

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// Environment:
//
//	MMAPKIT_KV              the mmapkit-kv binary (default ../../target/debug/mmapkit-kv)
//	MMAPKIT_CRASHFS         crashfs-mount, the nodes' crash file systems (default ../../target/debug/crashfs-mount; needs FUSE, as root)
//	MMAPKIT_JEPSEN_SECONDS  seconds of workload and faults in TestLinearizable (default 70)
//	MMAPKIT_JEPSEN_SEED     the seed (default: from the clock; printed)
const (
	clientTimeout  = 10 * time.Second
	checkTimeout   = 2 * time.Minute // per key
	leaderPatience = 60 * time.Second
)

type config struct {
	bin     string
	crash   string
	seed    int64
	seconds int
}

// binary is the absolute path of a built binary: $env, else def (relative
// to tests/jepsen); the test fails, saying how to build it, when it is not there.
func binary(t *testing.T, env, def, pkg string) string {
	t.Helper()
	bin := os.Getenv(env)
	if bin == "" {
		bin = def
	}
	abs, err := filepath.Abs(bin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(abs); err != nil {
		name := filepath.Base(def)
		t.Fatalf("the %s binary %s: %v (build it with `cargo build -p %s --bin %s`, or set %s)", name, abs, err, pkg, name, env)
	}
	return abs
}

func loadConfig(t *testing.T) config {
	t.Helper()
	cfg := config{
		bin:     binary(t, "MMAPKIT_KV", "../../target/debug/mmapkit-kv", "mmapkit-raft"),
		crash:   binary(t, "MMAPKIT_CRASHFS", "../../target/debug/crashfs-mount", "mmapkit-crashfs"),
		seed:    time.Now().UnixNano() % 1_000_000_000,
		seconds: 70,
	}
	var err error
	if s := os.Getenv("MMAPKIT_JEPSEN_SEED"); s != "" {
		if cfg.seed, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatalf("MMAPKIT_JEPSEN_SEED=%q: %v", s, err)
		}
	}
	if s := os.Getenv("MMAPKIT_JEPSEN_SECONDS"); s != "" {
		if cfg.seconds, err = strconv.Atoi(s); err != nil || cfg.seconds < 1 {
			t.Fatalf("MMAPKIT_JEPSEN_SECONDS=%q: want a positive number of seconds", s)
		}
	}
	t.Logf("seed %d (replay: MMAPKIT_JEPSEN_SEED=%d)", cfg.seed, cfg.seed)
	return cfg
}

// startCluster starts a cluster in a new temporary directory; it is
// killed when the test ends, and the directory (logs, data) removed
// unless the test failed.
func startCluster(t *testing.T, cfg config) *Cluster {
	t.Helper()
	dir, err := os.MkdirTemp("", "mmapkit-jepsen-cluster-")
	if err != nil {
		t.Fatal(err)
	}
	token := fmt.Sprintf("jepsen-%x", rand.New(rand.NewSource(cfg.seed)).Int63())
	c, err := StartCluster(cfg.bin, cfg.crash, dir, token)
	t.Cleanup(func() {
		if c != nil {
			c.Close()
		}
		if t.Failed() {
			t.Logf("node logs and data kept in %s", dir)
		} else {
			_ = os.RemoveAll(dir)
		}
	})
	if err != nil {
		t.Fatalf("starting the cluster: %v", err)
	}
	if c.WaitLeader(leaderPatience) == nil {
		t.Fatalf("no leader within %v of initializing", leaderPatience)
	}
	return c
}

func keysWithPrefix(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%sk%d", prefix, i)
	}
	return keys
}

// reportAnomalies fails the test on answers outside the API (and notes
// the deviations accepted with MMAPKIT_JEPSEN_ACCEPT_OPENRAFT_RESULT=1).
func reportAnomalies(t *testing.T, cl *Client) {
	t.Helper()
	a, d := cl.TakeAnomalies()
	for _, k := range sortedKeys(d) {
		t.Logf("NOTE: accepted deviation from the KV API (%d times): %s", d[k], k)
	}
	for _, k := range sortedKeys(a) {
		t.Errorf("answer outside the KV API (%d times): %s", a[k], k)
	}
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// reportNetwork fails the test when peer connections could not be told
// apart by source IP (then partitions are not per link).
func reportNetwork(t *testing.T, c *Cluster) {
	t.Helper()
	if u := c.Net.Unattributed.Load(); u > 0 {
		t.Errorf("%d peer connections came from an IP that is no node's bind IP (last from %v): "+
			"nodes must bind their peer connections to their own IP", u, c.Net.LastUnknown.Load())
	}
	t.Logf("proxies: %d connections forwarded, %d refused, %d blackholed",
		c.Net.Accepted.Load(), c.Net.Refused.Load(), c.Net.Blackholed.Load())
}

// TestLinearizable: clients, a nemesis, a Porcupine check; then the three
// nodes must converge on one state, agreeing with final reads.
func TestLinearizable(t *testing.T) {
	cfg := loadConfig(t)
	t0 := time.Now()
	c := startCluster(t, cfg)
	cl := c.NewClient(clientTimeout)
	h := NewHistory()
	const clients, slots, period = 8, 5, 10 * time.Second
	deadline := time.Now().Add(time.Duration(cfg.seconds) * time.Second)
	gen := RotatingOps(slots, period, time.Now(), len(c.Nodes), func(slot, g int) string { return fmt.Sprintf("g%d-k%d", g, slot) })

	nm := NewNemesis(c, cfg.seed, func(f string, a ...any) { t.Logf("%6.1fs "+f, append([]any{time.Since(t0).Seconds()}, a...)...) })
	nm.LeaderPatience = leaderPatience
	var nemErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		nemErr = nm.Run(deadline)
	}()
	RunClients(cl, h, cfg.seed, clients, gen, deadline)
	wg.Wait()
	keys := Keys(h.Records())
	if nemErr != nil {
		t.Errorf("nemesis: %v", nemErr)
	}

	// Heal everything; the cluster must recover and converge.
	if err := c.HealAll(); err != nil {
		t.Fatalf("healing: %v", err)
	}
	if c.WaitLeader(leaderPatience) == nil {
		t.Fatalf("no leader within %v after the faults healed", leaderPatience)
	}
	final, err := FinalReads(cl, h, 1_000_000, keys, len(c.Nodes), leaderPatience)
	if err != nil {
		t.Errorf("%v", err)
	}
	states, agree := c.WaitConverged(leaderPatience)
	if !agree {
		for _, s := range states {
			t.Logf("node %d: last_applied %s, %d keys: %v", s.ID, s.LastApplied, len(s.Data), s.Data)
		}
		t.Errorf("the nodes did not converge on one applied state within %v after the faults healed", leaderPatience)
	} else {
		for _, k := range keys {
			v, ok := states[0].Data[k]
			want := Absent
			if ok {
				want = Some(v)
			}
			for n, got := range final[k] {
				if got != want {
					t.Errorf("key %s: node %d's final linearizable read %v, but the converged state has %v", k, n+1, got, want)
				}
			}
		}
	}
	reportAnomalies(t, cl)
	reportNetwork(t, c)

	recs := h.Records()
	t.Logf("operations: %d: %s", len(recs), FormatCounts(Counts(recs)))
	t.Logf("unknown outcomes by cause: %s", FormatCounts(UnknownCauses(recs)))
	t.Logf("faults: %d: %s", sum(nm.Faults), FormatCounts(nm.Faults))
	for _, k := range FirstKinds {
		if nm.Faults[k] == 0 {
			t.Errorf("no %s fault was injected (faults: %s)", k, FormatCounts(nm.Faults))
		}
	}
	if err := SaveHistory(filepath.Join(c.Dir, "history.json"), recs); err != nil {
		t.Errorf("saving the history: %v", err)
	}
	res, err := Check("linearizable", recs, checkTimeout)
	if err != nil {
		t.Errorf("check: %v", err)
	}
	t.Logf("histories checked: %d (one per key; %d keys at a time, replaced every %v; %d operations after dropping failed ones and unknown reads); "+
		"check time %v (slowest key %s: %v); result %s",
		res.Keys, slots, period, res.Ops, res.Duration.Round(time.Millisecond), res.Slowest, res.SlowestTime.Round(time.Millisecond), resultName(res.Result))
	switch res.Result {
	case porcupine.Illegal:
		t.Errorf("the history is NOT linearizable (seed %d): keys %v; Porcupine's visualization (first key): %s; history: %s",
			cfg.seed, res.Illegal, res.Visualization, filepath.Join(filepath.Dir(res.Visualization), "history.json"))
	case porcupine.Unknown:
		t.Errorf("the linearizability check of keys %v timed out after %v each (seed %d); partial visualization: %s",
			res.TimedOut, checkTimeout, cfg.seed, res.Visualization)
	}
	t.Logf("total %v", time.Since(t0).Round(time.Millisecond))
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func resultName(r porcupine.CheckResult) string {
	switch r {
	case porcupine.Ok:
		return "linearizable"
	case porcupine.Illegal:
		return "NOT linearizable"
	}
	return "unknown (timed out)"
}

// TestStaleReadsAreCaught is the negative control: writes go to the
// leader while reads use stale=true on followers, one of which is cut off
// at a time; the checker must reject the history. A run in which no stale
// read happened is retried (new keys), up to `attempts` times: a count, not
// a wall-clock budget, so a loaded machine (fewer operations per attempt)
// gets as many chances as a quiet one.
func TestStaleReadsAreCaught(t *testing.T) {
	cfg := loadConfig(t)
	t0 := time.Now()
	const attempts = 8
	c := startCluster(t, cfg)
	cl := c.NewClient(clientTimeout)
	rng := rand.New(rand.NewSource(cfg.seed + 1))
	checked, keysChecked := 0, 0
	var checkTime time.Duration
	for attempt := 1; attempt <= attempts; attempt++ {
		leader := c.WaitLeader(leaderPatience)
		if leader == nil {
			t.Fatalf("no leader within %v", leaderPatience)
		}
		var followers []*Node
		for _, n := range c.Nodes {
			if n != leader {
				followers = append(followers, n)
			}
		}
		keys := keysWithPrefix(fmt.Sprintf("a%d-", attempt), 3)
		gen := func(r *rand.Rand, client, seq int, _ map[string]Val) Input {
			in := Input{Key: keys[r.Intn(len(keys))]}
			if client < 2 {
				in.Kind, in.Value, in.Node = OpPut, Some(fmt.Sprintf("c%d-%d", client, seq)), leader.ID
			} else {
				in.Kind, in.Stale, in.Node = OpGet, true, followers[r.Intn(len(followers))].ID
			}
			return in
		}
		h := NewHistory()
		phase := 4 * time.Second
		deadline := time.Now().Add(2*phase + 2*time.Second)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each follower in turn is cut off from the others for a
			// while, writes continuing on the majority side.
			for _, f := range followers {
				sleepUntil(500*time.Millisecond, deadline)
				var links []Link
				for _, o := range c.Nodes {
					if o != f {
						links = append(links, Link{f.ID, o.ID}, Link{o.ID, f.ID})
					}
				}
				mode := CutMode(rng.Intn(2))
				t.Logf("%6.1fs attempt %d: isolate follower %d (%s) for %v", time.Since(t0).Seconds(), attempt, f.ID, mode, phase-time.Second)
				c.Net.Cut(mode, links...)
				sleepUntil(phase-time.Second, deadline)
				c.Net.Heal()
			}
		}()
		RunClients(cl, h, cfg.seed+int64(attempt), 6, gen, deadline)
		wg.Wait()
		c.Net.Heal()
		recs := h.Records()
		res, err := Check("stale", recs, checkTimeout)
		if err != nil {
			t.Fatalf("check: %v", err)
		}
		checked++
		keysChecked += res.Keys
		checkTime += res.Duration
		t.Logf("attempt %d: %d operations: %s; check time %v; result %s", attempt, len(recs),
			FormatCounts(Counts(recs)), res.Duration.Round(time.Millisecond), resultName(res.Result))
		if res.Result == porcupine.Illegal {
			t.Logf("stale reads caught: Porcupine rejects the history (as it must)")
			// The expected rejection: its visualization is not kept.
			_ = os.RemoveAll(filepath.Dir(res.Visualization))
			t.Logf("histories checked: %d (%d per-key histories, illegal: %v); check time %v; total %v",
				checked, keysChecked, res.Illegal, checkTime.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
			reportAnomalies(t, cl)
			reportNetwork(t, c)
			return
		}
		if res.Result == porcupine.Unknown {
			t.Logf("attempt %d: the check timed out; retrying", attempt)
		}
	}
	t.Errorf("after %d histories, none was rejected: stale reads from cut-off followers were not caught (seed %d)", checked, cfg.seed)
}

// TestCheckSavedHistory checks a history saved by a run (history.json in
// the kept cluster directory or beside a visualization):
// MMAPKIT_JEPSEN_CHECK=path go test -run TestCheckSavedHistory -v
func TestCheckSavedHistory(t *testing.T) {
	path := os.Getenv("MMAPKIT_JEPSEN_CHECK")
	if path == "" {
		t.Skip("set MMAPKIT_JEPSEN_CHECK to a saved history.json")
	}
	recs, err := LoadHistory(path)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Check("saved", recs, checkTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d records, %d keys, %d ops checked in %v (slowest %s: %v): %s; illegal %v, timed out %v; visualization %s",
		len(recs), res.Keys, res.Ops, res.Duration, res.Slowest, res.SlowestTime, resultName(res.Result), res.Illegal, res.TimedOut, res.Visualization)
}

// ----- unit tests of the model, the recorder and the proxy (no cluster) -----

func rec(client int, in Input, out Output, call, ret int64) Record {
	return Record{Client: client, In: in, Out: out, Call: call, Return: ret}
}

func TestModelAcceptsAndRejects(t *testing.T) {
	put := func(v string) Input { return Input{Kind: OpPut, Key: "k", Value: Some(v)} }
	get := Input{Kind: OpGet, Key: "k"}
	cas := func(e, v Val) Input { return Input{Kind: OpCas, Key: "k", Expected: e, Value: v} }
	okv := func(v Val) Output { return Output{Outcome: Ok, Value: v} }
	cases := []struct {
		name string
		h    []Record
		want porcupine.CheckResult
	}{
		{"sequential", []Record{
			rec(0, put("a"), okv(Absent), 0, 1),
			rec(0, get, okv(Some("a")), 2, 3),
			rec(0, cas(Some("a"), Some("b")), Output{Outcome: Ok, Value: Some("a"), CasOk: true}, 4, 5),
			rec(0, cas(Some("a"), Some("c")), Output{Outcome: Ok, Value: Some("b"), CasOk: false}, 6, 7),
			rec(0, Input{Kind: OpDelete, Key: "k"}, okv(Some("b")), 8, 9),
			rec(0, get, okv(Absent), 10, 11),
		}, porcupine.Ok},
		{"stale read", []Record{
			rec(0, put("a"), okv(Absent), 0, 1),
			rec(0, put("b"), okv(Some("a")), 2, 3),
			rec(1, get, okv(Some("a")), 4, 5),
		}, porcupine.Illegal},
		{"concurrent read may see either", []Record{
			rec(0, put("a"), okv(Absent), 0, 1),
			rec(0, put("b"), okv(Some("a")), 2, 6),
			rec(1, get, okv(Some("a")), 3, 4),
			rec(2, get, okv(Some("b")), 5, 7),
		}, porcupine.Ok},
		{"wrong previous value", []Record{
			rec(0, put("a"), okv(Absent), 0, 1),
			rec(0, put("b"), okv(Absent), 2, 3),
		}, porcupine.Illegal},
		{"cas answered true but did not match", []Record{
			rec(0, put("a"), okv(Absent), 0, 1),
			rec(0, cas(Some("x"), Some("b")), Output{Outcome: Ok, Value: Some("a"), CasOk: true}, 2, 3),
		}, porcupine.Illegal},
		{"unknown write applied later", []Record{
			rec(0, put("a"), Output{Outcome: Unknown}, 0, 1),
			rec(1, get, okv(Absent), 2, 3),
			rec(1, get, okv(Some("a")), 4, 5),
		}, porcupine.Ok},
		{"unknown write never applied", []Record{
			rec(0, put("a"), Output{Outcome: Unknown}, 0, 1),
			rec(1, get, okv(Absent), 2, 3),
		}, porcupine.Ok},
		{"unknown write cannot be seen before its call", []Record{
			rec(1, get, okv(Some("a")), 0, 1),
			rec(0, put("a"), Output{Outcome: Unknown}, 2, 3),
		}, porcupine.Illegal},
		{"failed write has no effect", []Record{
			rec(0, put("a"), Output{Outcome: Fail}, 0, 1),
			rec(1, get, okv(Some("a")), 2, 3),
		}, porcupine.Illegal},
		{"unknown cas that matched", []Record{
			rec(0, put("a"), okv(Absent), 0, 1),
			rec(0, cas(Some("a"), Absent), Output{Outcome: Unknown}, 2, 3),
			rec(1, get, okv(Absent), 4, 5),
		}, porcupine.Ok},
		{"unknown cas that could not match", []Record{
			rec(0, put("a"), okv(Absent), 0, 1),
			rec(0, cas(Some("z"), Absent), Output{Outcome: Unknown}, 2, 3),
			rec(1, get, okv(Absent), 4, 5),
		}, porcupine.Illegal},
		{"keys are independent", []Record{
			rec(0, put("a"), okv(Absent), 0, 1),
			rec(1, Input{Kind: OpGet, Key: "other"}, okv(Absent), 2, 3),
		}, porcupine.Ok},
	}
	for _, tc := range cases {
		res, err := Check("unit", tc.h, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if res.Result != tc.want {
			t.Errorf("%s: got %s, want %s", tc.name, resultName(res.Result), resultName(tc.want))
		}
		if res.Visualization != "" {
			_ = os.RemoveAll(filepath.Dir(res.Visualization))
		}
	}
}

func TestOperationsDropsAndExtends(t *testing.T) {
	recs := []Record{
		rec(0, Input{Kind: OpPut, Key: "k", Value: Some("a")}, Output{Outcome: Unknown}, 0, 5),
		rec(1, Input{Kind: OpGet, Key: "k"}, Output{Outcome: Unknown}, 1, 2),
		rec(2, Input{Kind: OpPut, Key: "k", Value: Some("b")}, Output{Outcome: Fail}, 1, 2),
		rec(3, Input{Kind: OpGet, Key: "k"}, Output{Outcome: Ok}, 3, 9),
	}
	ops := Operations(recs)
	if len(ops) != 2 || ops[0].Return != 10 || ops[1].Return != 9 {
		t.Fatalf("got %+v", ops)
	}
	if got := FormatCounts(Counts(recs)); !strings.Contains(got, "put/unknown=1") || !strings.Contains(got, "get/ok=1") {
		t.Fatalf("counts %s", got)
	}
}
