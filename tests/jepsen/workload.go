package jepsen

import (
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"time"
)

// Generator draws a client's next operation (Node: 1-based).
type Generator func(rng *rand.Rand, client int, seq int, seen map[string]Val) Input

// RandomOps is the main workload: gets, puts, deletes and compare-and-sets
// on `keys`, each sent to a random node. Values are unique ("c<client>-<seq>");
// a CAS expects the value this client saw last for the key (or absent).
func RandomOps(keys []string, nodes int) Generator {
	return RotatingOps(len(keys), 0, time.Time{}, nodes, func(slot, _ int) string { return keys[slot] })
}

// RotatingOps is RandomOps on `slots` keys that are replaced by fresh ones
// every `period` (generation g = time since start / period; key
// name(slot, g)), as Jepsen's independent checker does: each key's history
// stays short, so operations of unknown outcome (pending until the end of
// their key's history) stay few per key and the check fast.
func RotatingOps(slots int, period time.Duration, start time.Time, nodes int, name func(slot, gen int) string) Generator {
	return func(rng *rand.Rand, client, seq int, seen map[string]Val) Input {
		gen := 0
		if period > 0 {
			gen = int(time.Since(start) / period)
		}
		in := Input{Key: name(rng.Intn(slots), gen), Node: 1 + rng.Intn(nodes)}
		val := Some(fmt.Sprintf("c%d-%d", client, seq))
		r, e := rng.Float64(), rng.Float64()
		switch {
		case r < 0.45:
			in.Kind = OpGet
		case r < 0.70:
			in.Kind, in.Value = OpPut, val
		case r < 0.75:
			in.Kind = OpDelete
		default:
			in.Kind, in.Value = OpCas, val
			if e < 0.7 {
				in.Expected = seen[in.Key]
			}
			if e > 0.9 {
				in.Value = Absent
			}
		}
		return in
	}
}

// RunClients runs `n` clients until the deadline, recording into h. A
// client whose operation's outcome is unknown continues under a new
// Porcupine client id (as Jepsen's crashed processes do).
func RunClients(cl *Client, h *History, seed int64, n int, gen Generator, deadline time.Time) {
	var nextID atomic.Int64
	nextID.Store(int64(n))
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(seed*1_000_003 + int64(i)))
			id := i
			seen := map[string]Val{}
			for seq := 0; time.Now().Before(deadline); seq++ {
				in := gen(rng, i, seq, seen)
				call := h.Now()
				out := cl.Do(in)
				ret := h.Now()
				h.Add(Record{Client: id, In: in, Out: out, Call: call, Return: ret})
				if out.Outcome == Ok {
					switch in.Kind {
					case OpGet:
						seen[in.Key] = out.Value
					case OpPut:
						seen[in.Key] = in.Value
					case OpDelete:
						seen[in.Key] = Absent
					case OpCas:
						if out.CasOk {
							seen[in.Key] = in.Value
						} else {
							seen[in.Key] = out.Value
						}
					}
				}
				pause := time.Duration(10+rng.Intn(30)) * time.Millisecond
				switch out.Outcome {
				case Unknown:
					id = int(nextID.Add(1)) - 1
					// Back off: each unknown write stays pending to the end
					// of its key's history, and the check's cost grows
					// exponentially with how many are pending at once.
					pause = time.Duration(500+rng.Intn(1000)) * time.Millisecond
				case Fail:
					pause = time.Duration(100+rng.Intn(200)) * time.Millisecond
				}
				time.Sleep(pause)
			}
		}(i)
	}
	wg.Wait()
}

// FinalReads reads every key through every node (linearizable reads,
// retried while refused or without quorum, up to `patience`), recorded
// into h; returns the value each node read per key.
func FinalReads(cl *Client, h *History, client int, keys []string, nodes int, patience time.Duration) (map[string][]Val, error) {
	res := map[string][]Val{}
	deadline := time.Now().Add(patience)
	for _, k := range keys {
		for n := 1; n <= nodes; n++ {
			for {
				in := Input{Kind: OpGet, Key: k, Node: n}
				call := h.Now()
				out := cl.Do(in)
				h.Add(Record{Client: client, In: in, Out: out, Call: call, Return: h.Now()})
				if out.Outcome == Ok {
					res[k] = append(res[k], out.Value)
					break
				}
				if out.Outcome == Unknown {
					client++
				}
				if time.Now().After(deadline) {
					return res, fmt.Errorf("final read of %s on node %d: no answer within %v (last: %s)", k, n, patience, out.Err)
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
	}
	return res, nil
}
