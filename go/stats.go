package shmring

/*
#include <stdlib.h>
#include <shmring.h>
*/
import "C"

import (
	"sync"
	"unsafe"
)

// FieldKind says what a counter measures.
type FieldKind uint32

const (
	// Counter only ever grows while the ring lives.
	Counter FieldKind = C.SHMRING_FIELD_COUNTER
	// Gauge is a level that goes up and down.
	Gauge FieldKind = C.SHMRING_FIELD_GAUGE
	// Flag is a yes/no state, as 0 or 1.
	Flag FieldKind = C.SHMRING_FIELD_FLAG
)

func (k FieldKind) String() string {
	switch k {
	case Counter:
		return "counter"
	case Gauge:
		return "gauge"
	case Flag:
		return "flag"
	}
	return "unknown"
}

// Field is one counter of a snapshot, as the library lists it.
type Field struct {
	// The library's name for it, e.g. "records_committed".
	Name string
	Kind FieldKind
	// "bytes", "ns", or "" for a count.
	Unit string
	// One line saying what it counts.
	Help  string
	Value uint64
}

// Stats is a snapshot of a ring's counters. Its fields are the library's list
// (the core's Stats::fields(), through shmring_stats_fields), in its order: this
// package names none of them. Counters are statistics: a peer can falsify them.
type Stats struct {
	Fields []Field
}

// Get is the value of the field named name, and whether there is one.
func (s Stats) Get(name string) (uint64, bool) {
	for i := range s.Fields {
		if s.Fields[i].Name == name {
			return s.Fields[i].Value, true
		}
	}
	return 0, false
}

// The field list's strings are static in the library: made into Go strings once.
var fieldCache struct {
	sync.Mutex
	buf   *C.shmring_stats_field
	n     int
	names []struct{ name, unit, help string }
}

func statsOf(st *C.shmring_stats) (Stats, error) {
	fc := &fieldCache
	fc.Lock()
	defer fc.Unlock()
	for {
		var n C.size_t
		err := check(func() int32 { return C.shmring_stats_fields(st, fc.buf, C.size_t(fc.n), &n) })
		if err != nil {
			return Stats{}, err
		}
		if int(n) > fc.n {
			// First call (or a library that lists more): make room and ask again.
			C.free(unsafe.Pointer(fc.buf))
			fc.buf = (*C.shmring_stats_field)(C.calloc(n, C.size_t(unsafe.Sizeof(C.shmring_stats_field{}))))
			fc.n = int(n)
			fc.names = nil
			continue
		}
		raw := unsafe.Slice(fc.buf, int(n))
		if len(fc.names) != int(n) {
			fc.names = make([]struct{ name, unit, help string }, int(n))
			for i := range raw {
				fc.names[i].name = C.GoString(raw[i].name)
				fc.names[i].unit = C.GoString(raw[i].unit)
				fc.names[i].help = C.GoString(raw[i].help)
			}
		}
		out := Stats{Fields: make([]Field, int(n))}
		for i := range raw {
			out.Fields[i] = Field{
				Name:  fc.names[i].name,
				Kind:  FieldKind(raw[i].kind),
				Unit:  fc.names[i].unit,
				Help:  fc.names[i].help,
				Value: uint64(raw[i].value),
			}
		}
		return out, nil
	}
}
