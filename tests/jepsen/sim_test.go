package jepsen

import (
	"math/rand"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// simStore is an in-process register map: linearizable, except that with
// lag > 0 reads marked stale see a copy of the map that is `lag` writes old.
type simStore struct {
	mu   sync.Mutex
	data map[string]Val
	old  []map[string]Val
	lag  int
}

func (s *simStore) do(in Input) Output {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.data[in.Key]
	switch in.Kind {
	case OpGet:
		if in.Stale && s.lag > 0 && len(s.old) >= s.lag {
			return Output{Outcome: Ok, Value: s.old[len(s.old)-s.lag][in.Key]}
		}
		return Output{Outcome: Ok, Value: cur}
	}
	snap := map[string]Val{}
	for k, v := range s.data {
		snap[k] = v
	}
	s.old = append(s.old, snap)
	out := Output{Outcome: Ok, Value: cur, CasOk: true}
	switch in.Kind {
	case OpPut:
		s.data[in.Key] = in.Value
	case OpDelete:
		s.data[in.Key] = Absent
	case OpCas:
		out.CasOk = cur == in.Expected
		if out.CasOk {
			s.data[in.Key] = in.Value
		}
	}
	return out
}

// simulate runs the main workload's generator against a simStore; some
// operations get an unknown outcome (applied or not, answer lost).
func simulate(seed int64, clients, opsPer int, keys []string, lag int, stale bool) []Record {
	s := &simStore{data: map[string]Val{}, lag: lag}
	h := NewHistory()
	gen := RandomOps(keys, 3)
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(seed + int64(i)))
			seen := map[string]Val{}
			id := i
			for seq := 0; seq < opsPer; seq++ {
				in := gen(rng, i, seq, seen)
				in.Stale = stale && in.Kind == OpGet
				call := h.Now()
				time.Sleep(time.Duration(rng.Intn(200)) * time.Microsecond)
				var out Output
				switch u := rng.Float64(); {
				case u < 0.02: // lost answer after applying
					s.do(in)
					out = Output{Outcome: Unknown, Err: "sim"}
				case u < 0.04: // never applied, outcome unknown
					out = Output{Outcome: Unknown, Err: "sim"}
				default:
					out = s.do(in)
				}
				time.Sleep(time.Duration(rng.Intn(200)) * time.Microsecond)
				h.Add(Record{Client: id, In: in, Out: out, Call: call, Return: h.Now()})
				if out.Outcome == Unknown {
					id += 1000
				} else if in.Kind == OpGet {
					seen[in.Key] = out.Value
				}
			}
		}(i)
	}
	wg.Wait()
	return h.Records()
}

// The checker accepts a large linearizable history with unknown outcomes
// quickly, and rejects one with stale reads.
func TestCheckerOnSimulatedHistories(t *testing.T) {
	keys := keysWithPrefix("", 4)
	recs := simulate(1, 8, 1000, keys, 0, false)
	res, err := Check("sim", recs, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("linearizable simulation: %d ops (%s), check %v: %s", len(recs), FormatCounts(Counts(recs)), res.Duration, resultName(res.Result))
	if res.Result != porcupine.Ok {
		t.Fatalf("a linearizable history was judged %s: %s", resultName(res.Result), res.Visualization)
	}
	recs = simulate(2, 8, 300, keys, 3, true)
	res, err = Check("sim-stale", recs, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stale simulation: %d ops, check %v: %s", len(recs), res.Duration, resultName(res.Result))
	if res.Visualization != "" {
		_ = os.RemoveAll(filepath.Dir(res.Visualization))
	}
	if res.Result != porcupine.Illegal {
		t.Fatalf("a history with stale reads was judged %s", resultName(res.Result))
	}
}
