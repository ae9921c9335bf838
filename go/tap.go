package shmring

/*
#include "glue.h"
*/
import "C"

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// TapAny, as TapOptions.Kind or Stream, takes every value.
const TapAny = C.SHMRING_TAP_ANY

// TapOptions say which records a tap takes and how it waits. Start from
// DefaultTapOptions (the library's defaults: every record, any kind and stream).
type TapOptions struct {
	// Take every n-th record that matches Kind and Stream.
	Every uint32
	// Only records of this kind, or TapAny.
	Kind int64
	// Only records of this stream, or TapAny.
	Stream int64
	// How long an idle tap sleeps between looks (0: the library's default).
	PollInterval time.Duration
	// Step over a claim pending this long, counted lost (0: the library's default).
	SkipPendingAfter time.Duration
}

// DefaultTapOptions are the library's defaults (shmring_tap_options_init).
func DefaultTapOptions() TapOptions {
	var o C.shmring_tap_options
	C.shmring_tap_options_init(&o)
	return TapOptions{
		Every:            uint32(o.every),
		Kind:             int64(o.kind),
		Stream:           int64(o.stream),
		PollInterval:     time.Duration(o.poll_interval_ns),
		SkipPendingAfter: time.Duration(o.skip_pending_after_ns),
	}
}

func (o *TapOptions) toC() (*C.shmring_tap_options, error) {
	if o == nil {
		return nil, nil
	}
	if err := durationArg("TapOptions.PollInterval", o.PollInterval); err != nil {
		return nil, err
	}
	if err := durationArg("TapOptions.SkipPendingAfter", o.SkipPendingAfter); err != nil {
		return nil, err
	}
	return &C.shmring_tap_options{
		every:                 C.uint32_t(o.Every),
		kind:                  C.int64_t(o.Kind),
		stream:                C.int64_t(o.Stream),
		poll_interval_ns:      C.uint64_t(durationNs(o.PollInterval)),
		skip_pending_after_ns: C.uint64_t(durationNs(o.SkipPendingAfter)),
	}, nil
}

// Tap is a read-only observer of a ring: it copies records as they go by into
// the caller's buffer, never slowing anyone, and counts what it misses (a record
// overwritten while copied is never delivered). It polls; one goroutine at a time.
type Tap struct {
	mu sync.Mutex
	h  *C.shmring_tap
}

// OpenTap opens a tap on the ring address names (shmring_tap_open), mapped
// read-only: a named ring by its name, a consumer's socket (unix:PATH) observed, or
// a memfd ring from a read-only descriptor of it (fd:N, which the library takes
// over). It starts at the newest record. opts nil: the defaults.
func OpenTap(address string, opts *TapOptions) (*Tap, error) {
	co, err := opts.toC()
	if err != nil {
		return nil, err
	}
	return openTap(address, co)
}

func openTap(address string, co *C.shmring_tap_options) (*Tap, error) {
	a := cstring(address)
	defer free(a)
	var h *C.shmring_tap
	if err := check(func() int32 { return C.shmring_tap_open(a, co, &h) }); err != nil {
		return nil, err
	}
	return &Tap{h: h}, nil
}

// tapDup opens a tap through a duplicate of descriptor fd (the library owns the
// duplicate).
func tapDup(fd int, opts *TapOptions) (*Tap, error) {
	co, err := opts.toC()
	if err != nil {
		return nil, err
	}
	d, err := dupFd(fd)
	if err != nil {
		return nil, err
	}
	return openTap(fmt.Sprintf("fd:%d", d), co)
}

func dupFd(fd int) (int, error) {
	d, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_DUPFD_CLOEXEC, 0)
	if errno != 0 {
		return -1, misuse(ErrOS, "dup: "+errno.Error())
	}
	return int(d), nil
}

// Tap opens a tap on this memfd ring through a duplicate of its read-only
// descriptor (a named ring's tap opens it by name: OpenTap).
func (s *Segment) Tap(opts *TapOptions) (*Tap, error) {
	h, err := s.handle("Segment.Tap")
	if err != nil {
		return nil, err
	}
	var ro C.int
	err = check(func() int32 { return C.shmring_segment_read_only_fd(h, &ro) })
	s.mu.RUnlock()
	if err != nil {
		return nil, err
	}
	return tapDup(int(ro), opts)
}

// Tap opens a tap on the observed ring through a duplicate of its descriptor.
func (o *Observer) Tap(opts *TapOptions) (*Tap, error) {
	fd, err := o.Fd()
	if err != nil {
		return nil, err
	}
	return tapDup(fd, opts)
}

// TapFrame describes a record a tap copied.
type TapFrame struct {
	// Payload bytes (with ErrBufferTooSmall: the size the buffer needs).
	Len  int
	Meta Meta
	// The record's claim sequence number (low bits).
	Seq uint64
}

// Next copies the next record the tap takes into buf and describes it, waiting
// until ctx is done (then ctx.Err()). buf[:f.Len] holds the payload.
// ErrBufferTooSmall: the record needs f.Len bytes; the tap keeps it for the next
// call. The wait is the library's polling, in slices of at most waitSlice.
func (t *Tap) Next(ctx context.Context, buf []byte) (TapFrame, error) {
	for {
		wait := waitSlice
		if dl, ok := ctx.Deadline(); ok {
			left := time.Until(dl)
			if left < wait {
				wait = left
			}
			if wait < 0 {
				wait = 0
			}
		}
		f, got, err := t.next(buf, wait)
		if got || err != nil {
			return f, err
		}
		if err := ctx.Err(); err != nil {
			return TapFrame{}, err
		}
		if wait == 0 {
			<-ctx.Done() // the deadline passed: its timer fires at it
			return TapFrame{}, ctx.Err()
		}
	}
}

func (t *Tap) next(buf []byte, wait time.Duration) (TapFrame, bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.h == nil {
		return TapFrame{}, false, misuse(ErrBadHandle, "Tap.Next: the tap is closed")
	}
	var p *C.uint8_t
	if len(buf) > 0 {
		p = (*C.uint8_t)(unsafe.Pointer(&buf[0]))
	}
	runtime.LockOSThread()
	r := C.go_tap_next(t.h, p, C.size_t(len(buf)), C.int64_t(wait))
	var err error
	if r.status != C.SHMRING_TIMEOUT {
		err = errorOf(int32(r.status))
	}
	runtime.UnlockOSThread()
	f := TapFrame{Len: int(r.frame.len), Meta: metaOf(&r.frame.meta), Seq: uint64(r.frame.seq)}
	if r.status == C.SHMRING_TIMEOUT {
		return TapFrame{}, false, nil
	}
	return f, true, err
}

// TapCounters are a tap's own counters (the ring does not know its taps).
type TapCounters struct {
	// Records delivered intact.
	Delivered uint64
	// Records lost: overwritten while copied, skipped when the tap fell a ring
	// behind, or stepped over while pending; Torn is the first kind.
	Lost uint64
	Torn uint64
	// Records not taken because of Every, Kind or Stream.
	Filtered uint64
	// Times the tap jumped to the newest record.
	Skips uint64
	// Records between the tap and the ring's write cursor now.
	Lag uint64
}

// Stats is a snapshot of the tap's counters.
func (t *Tap) Stats() (TapCounters, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.h == nil {
		return TapCounters{}, misuse(ErrBadHandle, "Tap.Stats: the tap is closed")
	}
	h := t.h
	var c C.shmring_tap_counters
	err := check(func() int32 { return C.shmring_tap_stats(h, &c) })
	return TapCounters{
		Delivered: uint64(c.delivered), Lost: uint64(c.lost), Torn: uint64(c.torn),
		Filtered: uint64(c.filtered), Skips: uint64(c.skips), Lag: uint64(c.lag),
	}, err
}

// Close unmaps the ring and frees the tap.
func (t *Tap) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.h == nil {
		return misuse(ErrBadHandle, "Tap.Close: the tap is closed")
	}
	h := t.h
	t.h = nil
	return check(func() int32 { return C.shmring_tap_close(h) })
}
