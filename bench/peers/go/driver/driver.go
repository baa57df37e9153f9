// Package driver is the shared part of the Go drivers of the `log` benchmark suite;
// the protocol (arguments, data, timing, JSON output) is the one described in
// bench/peers/rust/src/lib.rs, so that the suite runs every driver alike.
package driver

import (
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"hash/crc32"
	"os"
	"sync"
	"time"
)

// Term of every entry, where a log stores terms.
const Term = 1

// Args are the command line of a driver.
type Args struct {
	Append    bool // else read
	Dir       string
	Entries   int
	Size      int
	Batch     int
	Sync      bool
	Appenders int
	Seed      uint64
}

// Batches is the number of batches of the run.
func (a *Args) Batches() int { return a.Entries / a.Batch }

// Log is what a driver implements for its commit log.
type Log interface {
	// AppendAll appends every batch (from a.Appenders goroutines) and returns the
	// number of syncs performed.
	AppendAll(a *Args, data []byte) (uint64, error)
	// ReadRange appends entries [lo, hi) (0-based positions) to out.
	ReadRange(lo, hi int, out []byte) ([]byte, error)
	Close() error
}

// Open creates (create) or opens a log.
type Open func(a *Args, create bool) (Log, error)

// Report is the JSON printed on stdout.
type Report struct {
	Driver   string  `json:"driver"`
	AppendS  float64 `json:"append_s"`
	OpenS    float64 `json:"open_s"`
	ReadS    float64 `json:"read_s"`
	Syncs    uint64  `json:"syncs"`
	Batches  uint64  `json:"batches"`
	Entries  uint64  `json:"entries"`
	Bytes    uint64  `json:"bytes"`
	Crc      uint32  `json:"crc"`
	BatchSum uint64  `json:"batch_sum"`
}

// Generate returns the entries' bytes: entry i is data[i*size:(i+1)*size].
func Generate(seed uint64, n int) []byte {
	const gold = 0x9E3779B97F4A7C15
	words := (n + 7) / 8
	out := make([]byte, words*8)
	for k := 0; k < words; k++ {
		z := seed + uint64(k+1)*gold
		z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
		z = (z ^ (z >> 27)) * 0x94D049BB133111EB
		z ^= z >> 31
		binary.LittleEndian.PutUint64(out[k*8:], z)
	}
	return out[:n]
}

// Appenders runs f(t) for every appender t, each in its own goroutine.
func Appenders(a *Args, f func(t int) error) error {
	if a.Appenders == 1 {
		return f(0)
	}
	var wg sync.WaitGroup
	errs := make([]error, a.Appenders)
	for t := 0; t < a.Appenders; t++ {
		wg.Add(1)
		go func(t int) {
			defer wg.Done()
			errs[t] = f(t)
		}(t)
	}
	wg.Wait()
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// Serialized appends every batch from a.Appenders goroutines, one batch at a time:
// write(j) appends batch j under a mutex (for logs whose writes must each carry the
// next index and that have no group commit). It returns the number of syncs: one per
// batch in sync mode (the log syncs every write itself).
func Serialized(a *Args, write func(j int) error) (uint64, error) {
	var mu sync.Mutex
	var syncs uint64
	err := Appenders(a, func(t int) error {
		for _, j := range a.BatchesOf(t) {
			mu.Lock()
			err := write(j)
			if a.Sync {
				syncs++
			}
			mu.Unlock()
			if err != nil {
				return err
			}
		}
		return nil
	})
	return syncs, err
}

// BatchesOf lists the batches appender t appends, in order.
func (a *Args) BatchesOf(t int) []int {
	var bs []int
	for b := t; b < a.Batches(); b += a.Appenders {
		bs = append(bs, b)
	}
	return bs
}

func parse() *Args {
	if len(os.Args) < 2 || (os.Args[1] != "append" && os.Args[1] != "read") {
		fmt.Fprintf(os.Stderr, "usage: %s append|read --dir D --entries N --size S [--batch B] [--sync none|batch] [--appenders K] [--seed X]\n", os.Args[0])
		os.Exit(2)
	}
	a := &Args{Append: os.Args[1] == "append"}
	fs := flag.NewFlagSet(os.Args[0], flag.ExitOnError)
	fs.StringVar(&a.Dir, "dir", "", "log directory")
	fs.IntVar(&a.Entries, "entries", 0, "number of entries")
	fs.IntVar(&a.Size, "size", 0, "bytes per entry")
	fs.IntVar(&a.Batch, "batch", 10, "entries per batch")
	fs.IntVar(&a.Appenders, "appenders", 1, "concurrent appenders")
	fs.Uint64Var(&a.Seed, "seed", 1, "data seed")
	syncMode := fs.String("sync", "none", "none or batch")
	fs.Parse(os.Args[2:])
	a.Sync = *syncMode == "batch"
	if a.Dir == "" || a.Entries <= 0 || a.Size <= 0 || a.Batch <= 0 || a.Entries%a.Batch != 0 ||
		a.Appenders < 1 || (*syncMode != "none" && *syncMode != "batch") {
		fmt.Fprintln(os.Stderr, "bad arguments")
		os.Exit(2)
	}
	return a
}

func readBack(log Log, a *Args, rep *Report) error {
	// The sink's pages are touched before the clock starts, as in the Rust
	// drivers (src/lib.rs, Sink::new): its first-touch faults are no log's.
	out := make([]byte, a.Entries*a.Size)
	for i := range out {
		out[i] = 0xA5
	}
	out = out[:0]
	t := time.Now()
	var err error
	for lo := 0; lo < a.Entries; lo += a.Batch {
		if out, err = log.ReadRange(lo, lo+a.Batch, out); err != nil {
			return err
		}
	}
	rep.ReadS = time.Since(t).Seconds()
	if len(out) != a.Entries*a.Size {
		return fmt.Errorf("read back %d bytes, expected %d", len(out), a.Entries*a.Size)
	}
	rep.Entries, rep.Bytes = uint64(a.Entries), uint64(len(out))
	rep.Crc = crc32.ChecksumIEEE(out)
	for p := 0; p < len(out); p += a.Batch * a.Size {
		rep.BatchSum += uint64(crc32.ChecksumIEEE(out[p : p+a.Batch*a.Size]))
	}
	return nil
}

// Main runs the driver named name over the log opened by open.
func Main(name string, open Open) {
	a := parse()
	rep := Report{Driver: name, Batches: uint64(a.Batches())}
	run := func() error {
		if a.Append {
			if ents, err := os.ReadDir(a.Dir); err == nil && len(ents) > 0 {
				return fmt.Errorf("not empty")
			}
			data := Generate(a.Seed, a.Entries*a.Size)
			t := time.Now()
			log, err := open(a, true)
			if err != nil {
				return err
			}
			if rep.Syncs, err = log.AppendAll(a, data); err != nil {
				return err
			}
			rep.AppendS = time.Since(t).Seconds()
			if err := readBack(log, a, &rep); err != nil {
				return err
			}
			rep.ReadS = 0
			return log.Close()
		}
		t := time.Now()
		log, err := open(a, false)
		if err != nil {
			return err
		}
		rep.OpenS = time.Since(t).Seconds()
		if err := readBack(log, a, &rep); err != nil {
			return err
		}
		return log.Close()
	}
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %s: %v\n", name, a.Dir, err)
		os.Exit(1)
	}
	b, _ := json.Marshal(rep)
	fmt.Println(string(b))
}
