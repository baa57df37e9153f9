package jepsen

import (
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

// CheckResult is the outcome of checking one history.
type CheckResult struct {
	Result   porcupine.CheckResult
	Duration time.Duration
	Ops      int
	// Path of the HTML visualization (written when the history is not
	// linearizable or the check timed out), else "".
	Visualization string
}

// Check checks a history with Porcupine; when it is not linearizable (or
// the check timed out) writes the visualization into a new temporary
// directory.
func Check(name string, recs []Record, timeout time.Duration) (CheckResult, error) {
	ops := Operations(recs)
	t0 := time.Now()
	res, info := porcupine.CheckOperationsVerbose(KvModel, ops, timeout)
	cr := CheckResult{Result: res, Duration: time.Since(t0), Ops: len(ops)}
	if res != porcupine.Ok {
		dir, err := os.MkdirTemp("", "mmapkit-jepsen-"+name+"-")
		if err != nil {
			return cr, err
		}
		cr.Visualization = filepath.Join(dir, "linearizability.html")
		if err := porcupine.VisualizePath(KvModel, info, cr.Visualization); err != nil {
			return cr, fmt.Errorf("writing the visualization: %w", err)
		}
	}
	return cr, nil
}
