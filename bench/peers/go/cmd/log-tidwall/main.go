// Driver of the `log` suite for github.com/tidwall/wal: one WriteBatch per batch
// (reused wal.Batch), NoSync for the no-sync mode and the default (fsync per
// write) for the sync mode; reads entry by entry with Read (it has no range read),
// NoCopy off (the default: Read returns a copy). Indexes start at 1. Concurrent
// appenders take a mutex around "next index + WriteBatch" (each write must carry
// the next index; the log has no group commit).
package main

import (
	"sync"

	"github.com/tidwall/wal"

	"mmapkit.local/logbench/driver"
)

type tidwall struct {
	log   *wal.Log
	mu    sync.Mutex
	syncs uint64
}

func open(a *driver.Args, create bool) (driver.Log, error) {
	opts := *wal.DefaultOptions
	opts.NoSync = !a.Sync
	l, err := wal.Open(a.Dir, &opts)
	if err != nil {
		return nil, err
	}
	return &tidwall{log: l}, nil
}

func (w *tidwall) AppendAll(a *driver.Args, data []byte) (uint64, error) {
	err := driver.Appenders(a, func(t int) error {
		var b wal.Batch
		for _, j := range a.BatchesOf(t) {
			w.mu.Lock()
			last, err := w.log.LastIndex()
			if err != nil {
				w.mu.Unlock()
				return err
			}
			b.Clear()
			for i := j * a.Batch; i < (j+1)*a.Batch; i++ {
				last++
				b.Write(last, data[i*a.Size:(i+1)*a.Size])
			}
			err = w.log.WriteBatch(&b)
			if a.Sync {
				w.syncs++
			}
			w.mu.Unlock()
			if err != nil {
				return err
			}
		}
		return nil
	})
	return w.syncs, err
}

func (w *tidwall) ReadRange(lo, hi int, out []byte) ([]byte, error) {
	for i := lo; i < hi; i++ {
		d, err := w.log.Read(uint64(i + 1))
		if err != nil {
			return out, err
		}
		out = append(out, d...)
	}
	return out, nil
}

func (w *tidwall) Close() error { return w.log.Close() }

func main() { driver.Main("tidwall/wal", open) }
