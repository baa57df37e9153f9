// Package jepsen is a Jepsen-style linearizability test of mmapkit-kv: a
// three-node cluster behind fault-injecting proxies, concurrent clients, a
// seeded nemesis, and a Porcupine check of the recorded history.
package jepsen

import (
	"fmt"
	"sort"
	"strconv"

	"github.com/anishathalye/porcupine"
)

// Val is a key's value or its absence (JSON null).
type Val struct {
	Present bool
	S       string
}

// Absent is the value of a key that is not set.
var Absent = Val{}

// Some is a present value.
func Some(s string) Val { return Val{Present: true, S: s} }

func (v Val) String() string {
	if !v.Present {
		return "∅"
	}
	return strconv.Quote(v.S)
}

// OpKind is what a client operation does.
type OpKind uint8

const (
	OpGet OpKind = iota
	OpPut
	OpDelete
	OpCas
)

func (k OpKind) String() string {
	return [...]string{"get", "put", "delete", "cas"}[k]
}

// Outcome of an operation as the client saw it.
type Outcome uint8

const (
	// Ok: the node answered with a result.
	Ok Outcome = iota
	// Fail: definitely not applied (refused before sending, 4xx, or a
	// 5xx that says so). Dropped from the history.
	Fail
	// Unknown: sent but no definite answer (timeout, connection lost,
	// other 5xx). A write may or may not have been applied.
	Unknown
)

func (o Outcome) String() string { return [...]string{"ok", "fail", "unknown"}[o] }

// Input of one operation.
type Input struct {
	Kind     OpKind
	Key      string
	Value    Val // put: the value; cas: the new value (Absent: delete)
	Expected Val // cas: the value the key must have
	Stale    bool
	Node     int // the node the request was sent to (1-based)
}

// Output of one operation.
type Output struct {
	Outcome Outcome
	// get: the value read; put/delete/cas: the previous value answered.
	Value Val
	// cas: whether it matched.
	CasOk bool
	// Why it failed or is unknown (not compared by the model).
	Err string
}

// step is the sequential specification of one key: a register with
// put/delete/compare-and-set, each of which also answers the previous
// value. An operation of unknown outcome is accepted with any output (it
// is linearized wherever its effect fits, or after everything else, i.e.
// never applied: its return time is the end of the history).
func step(state Val, in Input, out Output) (bool, Val) {
	switch in.Kind {
	case OpGet:
		if out.Outcome == Unknown {
			return true, state
		}
		return out.Value == state, state
	case OpPut, OpDelete:
		next := in.Value
		if in.Kind == OpDelete {
			next = Absent
		}
		if out.Outcome == Unknown {
			return true, next
		}
		return out.Value == state, next
	case OpCas:
		match := state == in.Expected
		next := state
		if match {
			next = in.Value
		}
		if out.Outcome == Unknown {
			return true, next
		}
		return out.CasOk == match && out.Value == state, next
	}
	return false, state
}

// KvModel is the Porcupine model of the key-value service, partitioned
// by key (each key is an independent register).
var KvModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		for _, op := range history {
			k := op.Input.(Input).Key
			byKey[k] = append(byKey[k], op)
		}
		keys := make([]string, 0, len(byKey))
		for k := range byKey {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() interface{} { return Absent },
	Step: func(state, input, output interface{}) (bool, interface{}) {
		return step(state.(Val), input.(Input), output.(Output))
	},
	Equal: func(a, b interface{}) bool { return a.(Val) == b.(Val) },
	DescribeOperation: func(input, output interface{}) string {
		in, out := input.(Input), output.(Output)
		res := ""
		switch {
		case out.Outcome == Unknown:
			res = " → ? (" + out.Err + ")"
		case in.Kind == OpCas:
			res = fmt.Sprintf(" → %v (was %v)", out.CasOk, out.Value)
		default:
			res = fmt.Sprintf(" → %v", out.Value)
		}
		node := fmt.Sprintf(" @n%d", in.Node)
		if in.Stale {
			node += " stale"
		}
		switch in.Kind {
		case OpGet:
			return fmt.Sprintf("get(%s)%s%s", in.Key, node, res)
		case OpPut:
			return fmt.Sprintf("put(%s, %v)%s%s", in.Key, in.Value, node, res)
		case OpDelete:
			return fmt.Sprintf("delete(%s)%s%s", in.Key, node, res)
		default:
			return fmt.Sprintf("cas(%s, %v → %v)%s%s", in.Key, in.Expected, in.Value, node, res)
		}
	},
	DescribeState: func(state interface{}) string { return state.(Val).String() },
}
