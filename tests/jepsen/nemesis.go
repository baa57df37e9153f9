package jepsen

import (
	"fmt"
	"math/rand"
	"time"
)

// FaultKinds the nemesis injects, in the order its schedule draws them.
var FaultKinds = []string{
	"kill",              // SIGKILL a random node, restart it after 0.5-3 s
	"kill-leader",       // the same, the leader
	"pause",             // SIGSTOP a random node for 1-5 s, then SIGCONT
	"pause-leader",      // the same, the leader
	"isolate",           // cut every link to and from a random node (majority/minority split) for 2-6 s
	"isolate-leader",    // the same, the leader
	"bridge",            // cut both links between two nodes; the third still reaches both
	"leader-one-way",    // cut the leader's links to the others (it still receives)
	"wipe",              // SIGKILL a random node, delete its data directory, restart it empty; the operator's replacement: member remove, add, promote
	"grow-shrink",       // 3 -> 5 -> 3 voters under load: two new nodes added as learners and promoted, then removed and stopped
	"power-loss-leader", // the leader loses power: its disk keeps what it synced and a seeded random part of the rest (crashfs); restarted after 0.5-3 s
	"power-loss",        // the same, a random node
}

// FirstKinds are dealt first (and TestLinearizable fails without them).
var FirstKinds = []string{"wipe", "grow-shrink", "power-loss-leader"}

// Nemesis injects faults on a seeded schedule: each round waits for a
// leader, stays quiet 1-3 s, injects one fault, heals it.
type Nemesis struct {
	C      *Cluster
	Rng    *rand.Rand
	Kinds  []string
	Faults map[string]int
	Logf   func(format string, args ...any)
	// Patience for a leader after each heal.
	LeaderPatience time.Duration
	// Kinds still to draw this cycle (see nextKind).
	deck  []string
	dealt int
}

// nextKind deals the kinds from a seeded shuffled deck, so every kind
// comes once per len(Kinds) rounds; the first deck deals "wipe" and
// "grow-shrink" and "power-loss-leader" first (those that are kinds), so
// even a short run replaces a lost disk, changes the membership and cuts
// a leader's power.
func (nm *Nemesis) nextKind() string {
	if len(nm.deck) == 0 {
		first := nm.dealt == 0
		for _, i := range nm.Rng.Perm(len(nm.Kinds)) {
			nm.deck = append(nm.deck, nm.Kinds[i])
		}
		if first {
			at := 0
			for _, want := range FirstKinds {
				for i, k := range nm.deck {
					if k == want {
						nm.deck[at], nm.deck[i] = nm.deck[i], nm.deck[at]
						at++
						break
					}
				}
			}
		}
	}
	k := nm.deck[0]
	nm.deck = nm.deck[1:]
	nm.dealt++
	return k
}

// NewNemesis with a seed.
func NewNemesis(c *Cluster, seed int64, logf func(string, ...any)) *Nemesis {
	return &Nemesis{C: c, Rng: rand.New(rand.NewSource(seed)), Kinds: FaultKinds, Faults: map[string]int{}, Logf: logf, LeaderPatience: 60 * time.Second}
}

func sleepUntil(d time.Duration, deadline time.Time) {
	if r := time.Until(deadline); r < d {
		d = r
	}
	if d > 0 {
		time.Sleep(d)
	}
}

func uniform(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int63n(int64(hi-lo)+1))
}

// Run injects faults until the deadline; every fault is healed before it
// returns. An error means the cluster did not recover (no leader within
// the patience after a heal, or a node that does not restart).
func (nm *Nemesis) Run(deadline time.Time) error {
	c := nm.C
	for round := 1; ; round++ {
		leader := c.WaitLeader(nm.LeaderPatience)
		if leader == nil {
			return fmt.Errorf("no leader within %v after healing (round %d)", nm.LeaderPatience, round)
		}
		// Every draw is made every round, whatever the fault: the
		// schedule is a function of the seed alone.
		quiet := uniform(nm.Rng, 1*time.Second, 3*time.Second)
		kind := nm.nextKind()
		pick := nm.Rng.Intn(len(c.Nodes))
		other := nm.Rng.Intn(len(c.Nodes) - 1)
		mode := CutMode(nm.Rng.Intn(2))
		downFor := uniform(nm.Rng, 500*time.Millisecond, 3*time.Second)
		pauseFor := uniform(nm.Rng, 1*time.Second, 5*time.Second)
		cutFor := uniform(nm.Rng, 2*time.Second, 6*time.Second)
		crashSeed := nm.Rng.Int63()

		sleepUntil(quiet, deadline)
		if time.Now().After(deadline) {
			return nil
		}
		// Re-read the leader after the quiet time (it may have changed).
		if l := c.Leader(); l != nil {
			leader = l
		}
		target := c.Nodes[pick]
		if kind == "wipe" && nm.Rng.Intn(2) == 0 {
			target = leader
		}
		if kind == "kill-leader" || kind == "pause-leader" || kind == "isolate-leader" || kind == "leader-one-way" || kind == "power-loss-leader" {
			target = leader
		}
		var others []*Node
		for _, n := range c.Nodes {
			if n != target {
				others = append(others, n)
			}
		}
		nm.Faults[kind]++
		switch kind {
		case "kill", "kill-leader":
			nm.Logf("nemesis: %s node %d (down %v)", kind, target.ID, downFor.Round(time.Millisecond))
			c.Kill(target)
			sleepUntil(downFor, deadline.Add(downFor))
			if err := c.Restart(target); err != nil {
				return fmt.Errorf("restarting node %d after SIGKILL: %w", target.ID, err)
			}
		case "power-loss", "power-loss-leader":
			nm.Logf("nemesis: %s node %d (crash seed %d, down %v)", kind, target.ID, crashSeed, downFor.Round(time.Millisecond))
			if err := c.PowerLoss(target, crashSeed); err != nil {
				return fmt.Errorf("power loss of node %d: %w", target.ID, err)
			}
			sleepUntil(downFor, deadline.Add(downFor))
			if err := c.Restart(target); err != nil {
				return fmt.Errorf("restarting node %d after its power loss: %w", target.ID, err)
			}
		case "wipe":
			nm.Logf("nemesis: wipe node %d (leader: %v), replace it as a new member", target.ID, target == leader)
			if err := c.Replace(target); err != nil {
				return fmt.Errorf("replacing wiped node %d: %w", target.ID, err)
			}
		case "grow-shrink":
			nm.Logf("nemesis: grow-shrink: add and promote two nodes, then remove them (for %v between)", cutFor.Round(time.Millisecond))
			var added []*Node
			for i := 0; i < 2; i++ {
				n, err := c.Grow()
				if n != nil {
					added = append(added, n)
				}
				if err != nil {
					return fmt.Errorf("growing the cluster: %w", err)
				}
			}
			sleepUntil(cutFor, deadline.Add(cutFor))
			for _, n := range added {
				if err := c.Shrink(n); err != nil {
					return fmt.Errorf("shrinking the cluster: %w", err)
				}
			}
		case "pause", "pause-leader":
			nm.Logf("nemesis: %s node %d (for %v)", kind, target.ID, pauseFor.Round(time.Millisecond))
			c.Pause(target)
			sleepUntil(pauseFor, deadline.Add(pauseFor))
			c.Resume(target)
		case "isolate", "isolate-leader":
			nm.Logf("nemesis: %s node %d (%s, for %v)", kind, target.ID, mode, cutFor.Round(time.Millisecond))
			var links []Link
			for _, o := range others {
				links = append(links, Link{target.ID, o.ID}, Link{o.ID, target.ID})
			}
			c.Net.Cut(mode, links...)
			sleepUntil(cutFor, deadline.Add(cutFor))
			c.Net.Heal()
		case "bridge":
			a, b := target, others[other]
			nm.Logf("nemesis: bridge: cut %d<->%d (%s, for %v)", a.ID, b.ID, mode, cutFor.Round(time.Millisecond))
			c.Net.Cut(mode, Link{a.ID, b.ID}, Link{b.ID, a.ID})
			sleepUntil(cutFor, deadline.Add(cutFor))
			c.Net.Heal()
		case "leader-one-way":
			nm.Logf("nemesis: leader-one-way: cut %d->others (%s, for %v)", target.ID, mode, cutFor.Round(time.Millisecond))
			var links []Link
			for _, o := range others {
				links = append(links, Link{target.ID, o.ID})
			}
			c.Net.Cut(mode, links...)
			sleepUntil(cutFor, deadline.Add(cutFor))
			c.Net.Heal()
		}
	}
}
