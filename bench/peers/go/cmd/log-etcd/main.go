// Driver of the `log` suite for etcd's write-ahead log (go.etcd.io/etcd/server/v3,
// package storage/wal): Create, then one Save(HardState, entries) per batch (Save
// fdatasyncs whenever it has entries; SetUnsafeNoFsync for the no-sync mode, what
// etcd's --unsafe-no-fsync does). The WAL has no random access: it is replayed
// with ReadAll on open (what etcd does at start; the entries then live in memory,
// in raft's MemoryStorage), so for this log "read" = Open + ReadAll + copying the
// entries out 10 at a time, all timed as read_s. Concurrent appenders take a mutex
// around "next index + Save" (no group commit in the WAL itself).
package main

import (
	"fmt"

	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/etcd/server/v3/storage/wal/walpb"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"mmapkit.local/logbench/driver"
)

type etcd struct {
	a    *driver.Args
	w    *wal.WAL
	next uint64 // the next entry's index (under driver.Serialized's lock)
	ents []*raftpb.Entry
}

func open(a *driver.Args, create bool) (driver.Log, error) {
	lg := zap.NewNop()
	if create {
		w, err := wal.Create(lg, a.Dir, nil)
		if err != nil {
			return nil, err
		}
		if !a.Sync {
			w.SetUnsafeNoFsync()
		}
		return &etcd{a: a, w: w, next: 1}, nil
	}
	// reading is replaying: done in ReadRange's first call, inside the timed read
	return &etcd{a: a}, nil
}

func (e *etcd) AppendAll(a *driver.Args, data []byte) (uint64, error) {
	ents := make([]*raftpb.Entry, a.Batch)
	return driver.Serialized(a, func(j int) error {
		for k := range ents {
			i := j*a.Batch + k
			ents[k] = &raftpb.Entry{Term: proto.Uint64(driver.Term), Index: proto.Uint64(e.next),
				Type: raftpb.EntryType_EntryNormal.Enum(), Data: data[i*a.Size : (i+1)*a.Size]}
			e.next++
		}
		return e.w.Save(&raftpb.HardState{Term: proto.Uint64(driver.Term), Commit: proto.Uint64(e.next - 1)}, ents)
	})
}

func (e *etcd) replay() error {
	if e.w != nil {
		// after appending: reopen the WAL to read it (it cannot be read while open for writing)
		if err := e.w.Close(); err != nil {
			return err
		}
	}
	w, err := wal.Open(zap.NewNop(), e.a.Dir, &walpb.Snapshot{})
	if err != nil {
		return err
	}
	_, _, ents, err := w.ReadAll()
	if err != nil {
		return err
	}
	e.w, e.ents = w, ents
	if len(ents) != e.a.Entries {
		return fmt.Errorf("replayed %d entries, expected %d", len(ents), e.a.Entries)
	}
	return nil
}

func (e *etcd) ReadRange(lo, hi int, out []byte) ([]byte, error) {
	if e.ents == nil {
		if err := e.replay(); err != nil {
			return out, err
		}
	}
	for i := lo; i < hi; i++ {
		out = append(out, e.ents[i].GetData()...)
	}
	return out, nil
}

func (e *etcd) Close() error { return e.w.Close() }

func main() { driver.Main("etcd/wal", open) }
