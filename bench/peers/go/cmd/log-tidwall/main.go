// Driver of the `log` suite for github.com/tidwall/wal: one WriteBatch per batch
// (reused wal.Batch), NoSync for the no-sync mode and the default (fsync per
// write) for the sync mode; reads entry by entry with Read (it has no range read),
// NoCopy off (the default: Read returns a copy). Indexes start at 1. Concurrent
// appenders take a mutex around "next index + WriteBatch" (each write must carry
// the next index; the log has no group commit).
package main

import (
	"github.com/tidwall/wal"

	"mmapkit.local/logbench/driver"
)

type tidwall struct {
	log *wal.Log
	b   wal.Batch // used under driver.Serialized's lock
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
	return driver.Serialized(a, func(j int) error {
		last, err := w.log.LastIndex()
		if err != nil {
			return err
		}
		w.b.Clear()
		for i := j * a.Batch; i < (j+1)*a.Batch; i++ {
			last++
			w.b.Write(last, data[i*a.Size:(i+1)*a.Size])
		}
		return w.log.WriteBatch(&w.b)
	})
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
