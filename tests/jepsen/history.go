package jepsen

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Record is one operation as a client saw it.
type Record struct {
	Client int
	In     Input
	Out    Output
	Call   int64 // nanoseconds since the history's start (monotonic)
	Return int64
}

// History is a concurrent recorder of operations.
type History struct {
	start time.Time
	mu    sync.Mutex
	recs  []Record
}

// NewHistory starts a history now.
func NewHistory() *History { return &History{start: time.Now()} }

// Now is the time since the history's start (monotonic clock).
func (h *History) Now() int64 { return int64(time.Since(h.start)) }

// Add records an operation.
func (h *History) Add(r Record) {
	h.mu.Lock()
	h.recs = append(h.recs, r)
	h.mu.Unlock()
}

// Records is a copy of what was recorded.
func (h *History) Records() []Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Record(nil), h.recs...)
}

// Operations is the history for Porcupine: operations that definitely did
// not happen (Fail) and reads of unknown outcome are left out; writes of
// unknown outcome return at the end of the history (after every other
// operation), so they may take effect at any point after their call, or
// never.
func Operations(recs []Record) []porcupine.Operation {
	var end int64
	for _, r := range recs {
		if r.Return > end {
			end = r.Return
		}
	}
	end++
	ops := make([]porcupine.Operation, 0, len(recs))
	for _, r := range recs {
		if r.Out.Outcome == Fail || (r.Out.Outcome == Unknown && r.In.Kind == OpGet) {
			continue
		}
		ret := r.Return
		if r.Out.Outcome == Unknown {
			ret = end
		}
		ops = append(ops, porcupine.Operation{ClientId: r.Client, Input: r.In, Call: r.Call, Output: r.Out, Return: ret})
	}
	return ops
}

// Counts tallies operations by "kind/outcome".
func Counts(recs []Record) map[string]int {
	c := map[string]int{}
	for _, r := range recs {
		k := r.In.Kind.String()
		if r.In.Stale {
			k += "(stale)"
		}
		c[k+"/"+r.Out.Outcome.String()]++
	}
	return c
}

// UnknownCauses tallies why operations had an unknown outcome.
func UnknownCauses(recs []Record) map[string]int {
	c := map[string]int{}
	for _, r := range recs {
		if r.Out.Outcome != Unknown {
			continue
		}
		why := r.Out.Err
		if i := strings.Index(why, ":"); strings.HasPrefix(why, "HTTP ") && i > 0 {
			rest := strings.TrimSpace(why[i+1:])
			if j := strings.IndexAny(rest, ":("); j > 0 {
				rest = rest[:j]
			}
			why = why[:i] + " " + strings.TrimSpace(rest)
		}
		c[strings.ReplaceAll(why, " ", "_")]++
	}
	return c
}

// Keys is the set of keys a history touches, sorted.
func Keys(recs []Record) []string {
	set := map[string]bool{}
	for _, r := range recs {
		set[r.In.Key] = true
	}
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// FormatCounts prints a tally as "a=1 b=2" in key order.
func FormatCounts(c map[string]int) string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", k, c[k])
	}
	return b.String()
}

// SaveHistory writes the records as JSON (one array) to path.
func SaveHistory(path string, recs []Record) error {
	b, err := json.Marshal(recs)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// LoadHistory reads what SaveHistory wrote.
func LoadHistory(path string) ([]Record, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var recs []Record
	return recs, json.Unmarshal(b, &recs)
}

// denseClients renumbers the client ids of one key's operations 0..n-1
// in their order (the visualization draws client i at height i).
func denseClients(ops []porcupine.Operation) {
	ids := map[int]int{}
	for _, op := range ops {
		ids[op.ClientId] = 0
	}
	sorted := make([]int, 0, len(ids))
	for id := range ids {
		sorted = append(sorted, id)
	}
	sort.Ints(sorted)
	for i, id := range sorted {
		ids[id] = i
	}
	for i := range ops {
		ops[i].ClientId = ids[ops[i].ClientId]
	}
}

// CheckBudget bounds the time Check spends on one history.
var CheckBudget = 6 * time.Minute

// CheckResult is the outcome of checking a history, one key at a time.
type CheckResult struct {
	Result   porcupine.CheckResult // Illegal if any key's is; else Unknown if any timed out
	Duration time.Duration
	Ops      int // operations checked (failed ones and unknown reads left out)
	Keys     int // per-key histories checked
	// The slowest key and its check time.
	Slowest     string
	SlowestTime time.Duration
	// Keys whose history is not linearizable / whose check timed out.
	Illegal, TimedOut []string
	// Path of the HTML visualization of the first such key, else "".
	Visualization string
}

// Check checks a history with Porcupine (CheckOperationsVerbose, the
// model partitioned by key), each key's history on its own with its own
// timeout (and all of them within CheckBudget); writes the visualization of the first key that is not
// linearizable (or timed out) into a new temporary directory.
func Check(name string, recs []Record, timeoutPerKey time.Duration) (CheckResult, error) {
	budgetEnd := time.Now().Add(CheckBudget)
	ops := Operations(recs)
	byKey := KvModel.Partition(ops)
	cr := CheckResult{Result: porcupine.Ok, Ops: len(ops), Keys: len(byKey)}
	t0 := time.Now()
	var bad *porcupine.LinearizationInfo
	for _, part := range byKey {
		key := part[0].Input.(Input).Key
		denseClients(part)
		t1 := time.Now()
		timeout := timeoutPerKey
		if left := time.Until(budgetEnd); left < timeout {
			timeout = max(left, time.Millisecond)
		}
		res, info := porcupine.CheckOperationsVerbose(KvModel, part, timeout)
		if d := time.Since(t1); d > cr.SlowestTime {
			cr.Slowest, cr.SlowestTime = key, d
		}
		switch res {
		case porcupine.Illegal:
			cr.Illegal = append(cr.Illegal, key)
			cr.Result = porcupine.Illegal
		case porcupine.Unknown:
			cr.TimedOut = append(cr.TimedOut, key)
			if cr.Result == porcupine.Ok {
				cr.Result = porcupine.Unknown
			}
		}
		if res != porcupine.Ok && (bad == nil || (res == porcupine.Illegal && len(cr.Illegal) == 1)) {
			i := info
			bad = &i
		}
	}
	cr.Duration = time.Since(t0)
	if bad != nil {
		dir, err := os.MkdirTemp("", "mmapkit-jepsen-"+name+"-")
		if err != nil {
			return cr, err
		}
		cr.Visualization = filepath.Join(dir, "linearizability.html")
		if err := porcupine.VisualizePath(KvModel, *bad, cr.Visualization); err != nil {
			return cr, fmt.Errorf("writing the visualization: %w", err)
		}
		if err := SaveHistory(filepath.Join(dir, "history.json"), recs); err != nil {
			return cr, err
		}
	}
	return cr, nil
}
