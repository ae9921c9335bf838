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

// Config sizes a new ring. Start from DefaultConfig (the library's defaults) and
// change what you need; the library checks the result.
type Config struct {
	// Data ring bytes: a power of two within the library's limits.
	Capacity uint64
	// Largest payload; 0: the library's default for the capacity.
	MaxRecord uint64
	// Records in flight at once; 0: the library's default for the capacity.
	LogEntries uint32
	// Producer slots.
	MaxProducers uint32
	// Producers wake the consumer through an eventfd. A Go consumer of such a
	// ring waits in Go's netpoller (Consumer.Next) instead of holding a thread.
	Eventfd bool
	// Ask for transparent huge pages on the ring.
	HugePages bool
}

// DefaultConfig is the library's default configuration (shmring_config_init).
func DefaultConfig() Config {
	var c C.shmring_config
	C.shmring_config_init(&c)
	return Config{
		Capacity:     uint64(c.capacity),
		MaxRecord:    uint64(c.max_record),
		LogEntries:   uint32(c.log_entries),
		MaxProducers: uint32(c.max_producers),
		Eventfd:      c.eventfd != 0,
		HugePages:    c.huge_pages != 0,
	}
}

func (cfg *Config) toC() C.shmring_config {
	if cfg == nil {
		d := DefaultConfig()
		cfg = &d
	}
	return C.shmring_config{
		capacity:      C.uint64_t(cfg.Capacity),
		max_record:    C.uint64_t(cfg.MaxRecord),
		log_entries:   C.uint32_t(cfg.LogEntries),
		max_producers: C.uint32_t(cfg.MaxProducers),
		eventfd:       cbool(cfg.Eventfd),
		huge_pages:    cbool(cfg.HugePages),
	}
}

func cbool(b bool) C.uint32_t {
	if b {
		return 1
	}
	return 0
}

// SegmentSize is how many bytes of shared memory a ring of this configuration
// takes (nil: the defaults).
func (cfg *Config) SegmentSize() (uint64, error) {
	c := cfg.toC()
	var n C.uint64_t
	err := check(func() int32 { return C.shmring_config_segment_size(&c, &n) })
	return uint64(n), err
}

// Geometry is the validated layout of an attached ring.
type Geometry struct {
	Capacity     uint64
	MaxRecord    uint64
	LogEntries   uint32
	MaxProducers uint32
	// Flags as the C ABI reports them (shmring_geometry.flags); see Eventfd.
	Flags uint32
	// Bytes of shared memory the segment takes.
	TotalSize uint64
}

// Eventfd tells whether the ring uses eventfd wake-ups (bit 0 of Flags, as the C
// header documents it).
func (g Geometry) Eventfd() bool { return g.Flags&1 != 0 }

func geometryOf(g *C.shmring_geometry) Geometry {
	return Geometry{
		Capacity:     uint64(g.capacity),
		MaxRecord:    uint64(g.max_record),
		LogEntries:   uint32(g.log_entries),
		MaxProducers: uint32(g.max_producers),
		Flags:        uint32(g.flags),
		TotalSize:    uint64(g.total_size),
	}
}

// Segment is an attached ring. It may be used by many goroutines. Producers and
// consumers attached through it keep the ring mapped after it is closed.
type Segment struct {
	mu sync.RWMutex // Close takes it for writing; every other call for reading
	h  *C.shmring_segment
}

func newSegment(h *C.shmring_segment) *Segment { return &Segment{h: h} }

// handle returns the C handle with the read lock held (release with s.mu.RUnlock),
// or an error if the segment is closed.
func (s *Segment) handle(op string) (*C.shmring_segment, error) {
	s.mu.RLock()
	if s.h == nil {
		s.mu.RUnlock()
		return nil, misuse(ErrBadHandle, op+": the segment is closed")
	}
	return s.h, nil
}

func cstring(s string) *C.char { return C.CString(s) }

func free(p *C.char) { C.free(unsafe.Pointer(p)) }

// Create creates a ring (shmring_create): address is create:NAME (the named ring
// /dev/shm/NAME, mode 0600, removed at Close unless Persist) or memfd:[LABEL] (an
// anonymous sealed memfd: serve it with Listen, or hand its Fds to a child
// process), and cfg sizes it (nil: the address's options, else the library's
// defaults). create:NAME replaces a ring of that name whose consumer is gone (left
// by a crash); one whose consumer is alive, or a file that is no ring, is
// ErrExists, its message saying which (create:NAME,stale=refuse: a stale one too).
// ErrInvalidArgument: the address reaches an existing ring (open it with Open),
// or it gives sizes and cfg does too.
func Create(address string, cfg *Config) (*Segment, error) {
	a := cstring(address)
	defer free(a)
	var c *C.shmring_config
	if cfg != nil {
		v := cfg.toC()
		c = &v
	}
	var h *C.shmring_segment
	if err := check(func() int32 { return C.shmring_create(a, c, &h) }); err != nil {
		return nil, err
	}
	return newSegment(h), nil
}

// Close closes the handle. A named ring this handle created is removed, unless
// Persist was called. Closing twice returns ErrBadHandle.
func (s *Segment) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.h == nil {
		return misuse(ErrBadHandle, "Segment.Close: the segment is closed")
	}
	h := s.h
	s.h = nil
	return check(func() int32 { return C.shmring_segment_close(h) })
}

// Persist keeps a named ring after its creator closes it.
func (s *Segment) Persist() error {
	h, err := s.handle("Segment.Persist")
	if err != nil {
		return err
	}
	defer s.mu.RUnlock()
	return check(func() int32 { return C.shmring_segment_persist(h) })
}

// Name is the ring's name for messages ("/name", "memfd:name" or "fd:N").
func (s *Segment) Name() string {
	h, err := s.handle("Segment.Name")
	if err != nil {
		return ""
	}
	defer s.mu.RUnlock()
	return C.GoString(C.shmring_segment_name(h))
}

// Geometry is the ring's validated layout.
func (s *Segment) Geometry() (Geometry, error) {
	h, err := s.handle("Segment.Geometry")
	if err != nil {
		return Geometry{}, err
	}
	defer s.mu.RUnlock()
	var g C.shmring_geometry
	err = check(func() int32 { return C.shmring_segment_geometry(h, &g) })
	return geometryOf(&g), err
}

// Mapping is the address range of this process's mapping of the ring (for
// zero-copy checks: a frame's Data lies inside it).
func (s *Segment) Mapping() (base uintptr, length int, err error) {
	h, err := s.handle("Segment.Mapping")
	if err != nil {
		return 0, 0, err
	}
	defer s.mu.RUnlock()
	var b *C.uint8_t
	var n C.size_t
	err = check(func() int32 { return C.shmring_segment_mapping(h, &b, &n) })
	return uintptr(unsafe.Pointer(b)), int(n), err
}

// Stats is a snapshot of the ring's counters, through the library's field list.
func (s *Segment) Stats() (Stats, error) {
	h, err := s.handle("Segment.Stats")
	if err != nil {
		return Stats{}, err
	}
	defer s.mu.RUnlock()
	var st C.shmring_stats
	if err := check(func() int32 { return C.shmring_segment_stats(h, &st) }); err != nil {
		return Stats{}, err
	}
	return statsOf(&st)
}

// TetherInfo describes one tethered consumer of a ring (shmring_tether_info).
type TetherInfo struct {
	Line uint32
	// It asked to attach and the ring's consumer has not adopted it yet.
	Requested bool
	// The pid holding the line, as the kernel reports it (0: unknown).
	Pid             uint32
	RecordsConsumed uint64
	BytesConsumed   uint64
	// Records it lost when the ring was reset under it.
	Lost uint64
	// How far its read cursor is behind the write cursor.
	LagRecords uint64
	LagBytes   uint64
	// Records its filter refused (released unread; not in RecordsConsumed).
	RecordsFiltered uint64
}

// Tethers lists the tethered consumers attached to the ring.
func (s *Segment) Tethers() ([]TetherInfo, error) {
	h, err := s.handle("Segment.Tethers")
	if err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	for {
		var n C.size_t
		if err := check(func() int32 { return C.shmring_segment_tethers(h, nil, 0, &n) }); err != nil {
			return nil, err
		}
		if n == 0 {
			return nil, nil
		}
		buf := (*C.shmring_tether_info)(C.calloc(n, C.size_t(unsafe.Sizeof(C.shmring_tether_info{}))))
		var got C.size_t
		err := check(func() int32 { return C.shmring_segment_tethers(h, buf, n, &got) })
		infos := unsafe.Slice(buf, int(n))
		var out []TetherInfo
		if err == nil && got <= n {
			out = make([]TetherInfo, int(got))
			for i := range out {
				t := &infos[i]
				out[i] = TetherInfo{
					Line: uint32(t.line), Requested: t.requested != 0, Pid: uint32(t.pid),
					RecordsConsumed: uint64(t.records_consumed), BytesConsumed: uint64(t.bytes_consumed),
					Lost: uint64(t.lost), LagRecords: uint64(t.lag_records), LagBytes: uint64(t.lag_bytes),
					RecordsFiltered: uint64(t.records_filtered),
				}
			}
		}
		C.free(unsafe.Pointer(buf))
		if err != nil {
			return nil, err
		}
		if got <= n {
			return out, nil
		}
		// More attached between the two calls: ask again.
	}
}
