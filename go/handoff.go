package shmring

/*
#include <stdlib.h>
#include <shmring.h>
*/
import "C"

import (
	"sync"
	"time"
	"unsafe"
)

// ListenOptions say who may connect to a Listener and bound its pending
// connections. Start from DefaultListenOptions (the library's defaults: this
// process's uid only).
type ListenOptions struct {
	// Further uids and gids allowed to connect (as producers and observers); the
	// process's own effective uid is always allowed.
	AllowUIDs []uint32
	AllowGIDs []uint32
	// Connections accepted and not yet answered, at most.
	MaxPending uint32
	// How long a peer has to send its hello (millisecond resolution).
	HelloTimeout time.Duration
}

// DefaultListenOptions are the library's defaults (shmring_listen_options_init).
func DefaultListenOptions() ListenOptions {
	var o C.shmring_listen_options
	C.shmring_listen_options_init(&o)
	return ListenOptions{
		MaxPending:   uint32(o.max_pending),
		HelloTimeout: time.Duration(o.hello_timeout_ms) * time.Millisecond,
	}
}

// Listener serves a memfd ring on a Unix socket from one background thread of
// the library: producers that Connect receive the ring, observers (Observe) a
// read-only descriptor; peers are checked by the credentials the kernel records
// (SO_PEERCRED).
type Listener struct {
	mu sync.Mutex
	h  *C.shmring_listener
}

// Listen serves the ring s (a memfd ring, Create("memfd:...")) on the Unix socket
// path (a file system path, or "@name" for an abstract socket). opts nil: the
// defaults. A stale socket of a dead consumer is replaced; Close removes the
// socket.
func Listen(s *Segment, path string, opts *ListenOptions) (*Listener, error) {
	var hello uint32
	if opts != nil {
		var err error
		if hello, err = millisArg("ListenOptions.HelloTimeout", opts.HelloTimeout); err != nil {
			return nil, err
		}
	}
	h, err := s.handle("Listen")
	if err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	p := cstring(path)
	defer free(p)
	var co *C.shmring_listen_options
	if opts != nil {
		// Plain C memory for the C struct and its arrays (cgo forbids Go pointers
		// inside memory handed to C).
		co = (*C.shmring_listen_options)(C.calloc(1, C.size_t(unsafe.Sizeof(C.shmring_listen_options{}))))
		defer C.free(unsafe.Pointer(co))
		co.allow_uids, co.n_allow_uids = cids(opts.AllowUIDs)
		defer C.free(unsafe.Pointer(co.allow_uids))
		co.allow_gids, co.n_allow_gids = cids(opts.AllowGIDs)
		defer C.free(unsafe.Pointer(co.allow_gids))
		co.max_pending = C.uint32_t(opts.MaxPending)
		co.hello_timeout_ms = C.uint32_t(hello)
	}
	var l *C.shmring_listener
	if err := check(func() int32 { return C.shmring_listen(h, p, co, &l) }); err != nil {
		return nil, err
	}
	return &Listener{h: l}, nil
}

func cids(ids []uint32) (*C.uint32_t, C.size_t) {
	if len(ids) == 0 {
		return nil, 0
	}
	p := (*C.uint32_t)(C.calloc(C.size_t(len(ids)), 4))
	for i, id := range ids {
		unsafe.Slice(p, len(ids))[i] = C.uint32_t(id)
	}
	return p, C.size_t(len(ids))
}

// HandoffStats is what a listener did so far (shmring_handoff_stats).
type HandoffStats struct {
	// Producers handed the ring, observers handed a read-only descriptor.
	Producers uint64
	Observers uint64
	// Every refusal, then per rule.
	Refused            uint64
	RefusedCredentials uint64
	RefusedVersion     uint64
	RefusedRole        uint64
	RefusedMalformed   uint64
	TimedOut           uint64
	RefusedBusy        uint64
	// Answers that could not be sent, accepts that failed.
	Failed uint64
	// Connections waiting for an answer now.
	Pending uint64
}

// Stats is a snapshot of what the listener did.
func (l *Listener) Stats() (HandoffStats, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.h == nil {
		return HandoffStats{}, misuse(ErrBadHandle, "Listener.Stats: the listener is closed")
	}
	h := l.h
	var s C.shmring_handoff_stats
	err := check(func() int32 { return C.shmring_listener_stats(h, &s) })
	return HandoffStats{
		Producers: uint64(s.producers), Observers: uint64(s.observers), Refused: uint64(s.refused),
		RefusedCredentials: uint64(s.refused_credentials), RefusedVersion: uint64(s.refused_version),
		RefusedRole: uint64(s.refused_role), RefusedMalformed: uint64(s.refused_malformed),
		TimedOut: uint64(s.timed_out), RefusedBusy: uint64(s.refused_busy), Failed: uint64(s.failed),
		Pending: uint64(s.pending),
	}, err
}

// Close stops the listener's thread and removes its socket. Producers already
// connected keep producing.
func (l *Listener) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.h == nil {
		return misuse(ErrBadHandle, "Listener.Close: the listener is closed")
	}
	h := l.h
	l.h = nil
	return check(func() int32 { return C.shmring_listener_close(h) })
}

func timeoutMs(d time.Duration) C.uint32_t {
	if d <= 0 {
		return 0
	}
	ms := d / time.Millisecond
	if ms == 0 {
		ms = 1
	}
	if ms > 1<<32-1 {
		ms = 1<<32 - 1
	}
	return C.uint32_t(ms)
}

// Open opens the ring address names, writable (then Producer or Consumer as
// usual). The address is the text every binding and the shmring command take
// (shmring_open): NAME, shm:NAME, NAME,eventfd=FD (a named eventfd ring with its
// eventfd), unix:PATH (a consumer's socket, see Listen), fd:SEG[,LOCK][,EVENTFD]
// (inherited descriptors, in the order of Fds, which the library takes over),
// create:NAME[,OPTION...] or memfd:[LABEL][,OPTION...] (a new ring, as Create
// makes it). Text that is no address is ErrConfig, its message naming what is
// wrong. timeout bounds each step of a socket's hand-off (0: the library's
// default); a socket's errors: ErrNotFound (no socket there), ErrNoConsumer (a
// stale socket), ErrRefused (the message names the rule).
func Open(address string, timeout time.Duration) (*Segment, error) {
	a := cstring(address)
	defer free(a)
	var h *C.shmring_segment
	if err := check(func() int32 { return C.shmring_open(a, timeoutMs(timeout), &h) }); err != nil {
		return nil, err
	}
	return newSegment(h), nil
}

// OpenReadOnly maps the ring address names read-only (shmring_open_read_only): a
// named ring opened read-only, a socket's ring observed (unix:PATH: a read-only
// descriptor, which the kernel refuses to map writable), or the first of fd:
// descriptors. Creating addresses are ErrConfig.
func OpenReadOnly(address string, timeout time.Duration) (*Observer, error) {
	a := cstring(address)
	defer free(a)
	var h *C.shmring_observer
	if err := check(func() int32 { return C.shmring_open_read_only(a, timeoutMs(timeout), &h) }); err != nil {
		return nil, err
	}
	return &Observer{h: h}, nil
}

// Observer is a ring mapped read-only (OpenReadOnly): its counters and layout,
// and taps.
type Observer struct {
	mu sync.RWMutex
	h  *C.shmring_observer
}

func (o *Observer) handle(op string) (*C.shmring_observer, error) {
	o.mu.RLock()
	if o.h == nil {
		o.mu.RUnlock()
		return nil, misuse(ErrBadHandle, op+": the observer is closed")
	}
	return o.h, nil
}

// Stats is a snapshot of the observed ring's counters.
func (o *Observer) Stats() (Stats, error) {
	h, err := o.handle("Observer.Stats")
	if err != nil {
		return Stats{}, err
	}
	defer o.mu.RUnlock()
	var st C.shmring_stats
	if err := check(func() int32 { return C.shmring_observer_stats(h, &st) }); err != nil {
		return Stats{}, err
	}
	return statsOf(&st)
}

// Geometry is the observed ring's validated layout.
func (o *Observer) Geometry() (Geometry, error) {
	h, err := o.handle("Observer.Geometry")
	if err != nil {
		return Geometry{}, err
	}
	defer o.mu.RUnlock()
	var g C.shmring_geometry
	err = check(func() int32 { return C.shmring_observer_geometry(h, &g) })
	return geometryOf(&g), err
}

// Mapping is the read-only mapping's address range.
func (o *Observer) Mapping() (base uintptr, length int, err error) {
	h, err := o.handle("Observer.Mapping")
	if err != nil {
		return 0, 0, err
	}
	defer o.mu.RUnlock()
	var b *C.uint8_t
	var n C.size_t
	err = check(func() int32 { return C.shmring_observer_mapping(h, &b, &n) })
	return uintptr(unsafe.Pointer(b)), int(n), err
}

// Fd is the observer's read-only descriptor (owned by the observer: do not close
// it; Tap duplicates it).
func (o *Observer) Fd() (int, error) {
	h, err := o.handle("Observer.Fd")
	if err != nil {
		return -1, err
	}
	defer o.mu.RUnlock()
	var fd C.int
	err = check(func() int32 { return C.shmring_observer_fd(h, &fd) })
	return int(fd), err
}

// Close unmaps the ring.
func (o *Observer) Close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.h == nil {
		return misuse(ErrBadHandle, "Observer.Close: the observer is closed")
	}
	h := o.h
	o.h = nil
	return check(func() int32 { return C.shmring_observer_close(h) })
}
