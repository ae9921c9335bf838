package shmring

/*
#include <shmring.h>
*/
import "C"

import (
	"runtime"
)

// Status is a status code of the C ABI (shmring_status). Every failure of this
// package carries one: test for it with errors.Is(err, shmring.ErrFull) and the
// like. A Status is itself an error: the sentinels below are Statuses.
type Status int32

// The sentinels, one per status of the C ABI (SHMRING_TIMEOUT and every
// SHMRING_ERR_*), with the C header's meaning.
const (
	// ErrTimeout: a wait ended without result (no space freed up in time).
	ErrTimeout Status = C.SHMRING_TIMEOUT
	// ErrNull: a required pointer argument was NULL.
	ErrNull Status = C.SHMRING_ERR_NULL
	// ErrBadHandle: the handle is not live (closed, never created, another type).
	ErrBadHandle Status = C.SHMRING_ERR_BAD_HANDLE
	// ErrInvalidArgument: an argument is out of range.
	ErrInvalidArgument Status = C.SHMRING_ERR_INVALID_ARGUMENT
	// ErrState: the call does not fit the handle's state (a reservation is
	// already open, none is open, a frame is still held, ...).
	ErrState Status = C.SHMRING_ERR_STATE
	// ErrBusy: the handle is in use by another thread or goroutine.
	ErrBusy Status = C.SHMRING_ERR_BUSY
	// ErrOS: a system call failed.
	ErrOS Status = C.SHMRING_ERR_OS
	// ErrConfig: the ring configuration is invalid.
	ErrConfig Status = C.SHMRING_ERR_CONFIG
	// ErrExists: a named ring already exists.
	ErrExists Status = C.SHMRING_ERR_EXISTS
	// ErrNotFound: a named ring (or a socket) does not exist.
	ErrNotFound Status = C.SHMRING_ERR_NOT_FOUND
	// ErrLayoutMismatch: not a shmring segment of this layout version.
	ErrLayoutMismatch Status = C.SHMRING_ERR_LAYOUT_MISMATCH
	// ErrUnsealed: a memfd is not sealed against shrinking and growing.
	ErrUnsealed Status = C.SHMRING_ERR_UNSEALED
	// ErrFull: the ring is full and the producer does not wait (the drop is counted).
	ErrFull Status = C.SHMRING_ERR_FULL
	// ErrTooLarge: the record exceeds the ring's max_record.
	ErrTooLarge Status = C.SHMRING_ERR_TOO_LARGE
	// ErrNoSlot: every producer slot is taken.
	ErrNoSlot Status = C.SHMRING_ERR_NO_SLOT
	// ErrConsumerBusy: another consumer is attached and alive.
	ErrConsumerBusy Status = C.SHMRING_ERR_CONSUMER_BUSY
	// ErrNoConsumer: no live consumer is attached (or a socket nobody serves).
	ErrNoConsumer Status = C.SHMRING_ERR_NO_CONSUMER
	// ErrCorrupt: shared memory holds something no honest peer writes, and the
	// consumer could not reset the ring by itself.
	ErrCorrupt Status = C.SHMRING_ERR_CORRUPT
	// ErrAbandoned: the producer's claim was taken from it.
	ErrAbandoned Status = C.SHMRING_ERR_ABANDONED
	// ErrTooManyHeld: the consumer holds as many frames as the ring tracks.
	ErrTooManyHeld Status = C.SHMRING_ERR_TOO_MANY_HELD
	// ErrNotHeld: the frame is not held (released already, or foreign).
	ErrNotHeld Status = C.SHMRING_ERR_NOT_HELD
	// ErrEventfdRequired: the ring uses eventfd wake-ups; attach with its eventfd.
	ErrEventfdRequired Status = C.SHMRING_ERR_EVENTFD_REQUIRED
	// ErrMedia: a media header is malformed, does not fit its payload, or the
	// record's kind carries none.
	ErrMedia Status = C.SHMRING_ERR_MEDIA
	// ErrPanic: an internal error of the library (it did nothing harmful).
	ErrPanic Status = C.SHMRING_ERR_PANIC
	// ErrRefused: the consumer serving the ring on a socket refused this peer.
	ErrRefused Status = C.SHMRING_ERR_REFUSED
	// ErrHandoff: the hand-off over a socket broke.
	ErrHandoff Status = C.SHMRING_ERR_HANDOFF
	// ErrDetached: this tethered consumer was detached; close it and attach again.
	ErrDetached Status = C.SHMRING_ERR_DETACHED
	// ErrNoTetherLine: every tethered-consumer line of the ring is taken.
	ErrNoTetherLine Status = C.SHMRING_ERR_NO_TETHER_LINE
	// ErrBufferTooSmall: the caller's buffer is smaller than the record.
	ErrBufferTooSmall Status = C.SHMRING_ERR_BUFFER_TOO_SMALL
	// ErrDescriptors: the descriptors given are not the ring's (a memfd ring's
	// lock file missing, one of the wrong kind, or too many).
	ErrDescriptors Status = C.SHMRING_ERR_DESCRIPTORS
	// ErrNoSpace: no room for the ring's memory (/dev/shm for a named ring, the
	// creating process's memory for a memfd ring); the message says how much.
	ErrNoSpace Status = C.SHMRING_ERR_NO_SPACE
)

// sentinels lists every status above: the test compares it with the statuses
// the C ABI has, so a status added there and not here fails it.
var sentinels = []Status{
	ErrTimeout, ErrNull, ErrBadHandle, ErrInvalidArgument, ErrState, ErrBusy, ErrOS,
	ErrConfig, ErrExists, ErrNotFound, ErrLayoutMismatch, ErrUnsealed, ErrFull,
	ErrTooLarge, ErrNoSlot, ErrConsumerBusy, ErrNoConsumer, ErrCorrupt, ErrAbandoned,
	ErrTooManyHeld, ErrNotHeld, ErrEventfdRequired, ErrMedia, ErrPanic, ErrRefused,
	ErrHandoff, ErrDetached, ErrNoTetherLine, ErrBufferTooSmall, ErrDescriptors,
	ErrNoSpace,
}

// Name is the C constant's name, e.g. "SHMRING_ERR_FULL".
func (s Status) Name() string {
	return C.GoString(C.shmring_status_name(C.int32_t(s)))
}

func (s Status) Error() string { return "shmring: " + s.Name() }

// Error is a failure reported by the library: its status and its message (which
// names the C function and the ring, e.g. "shmring_producer_reserve: ring
// memfd:cam0 is full ..."). errors.Is(err, shmring.ErrFull) tests the status.
type Error struct {
	Status Status
	Msg    string
}

func (e *Error) Error() string { return "shmring: " + e.Msg }

// Unwrap gives the status, so errors.Is matches the sentinels.
func (e *Error) Unwrap() error { return e.Status }

// errorOf turns a status into nil or an *Error with this thread's message. Call it
// on the thread that made the C call, before any other call: between
// runtime.LockOSThread and UnlockOSThread (the message is thread-local).
func errorOf(st int32) error {
	if st == C.SHMRING_OK {
		return nil
	}
	return &Error{Status: Status(st), Msg: C.GoString(C.shmring_last_error())}
}

// check makes one C call on a locked thread and turns its status into an error.
// For calls off the frame path (the closure may cost an allocation).
func check(call func() int32) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return errorOf(call())
}

// misuse is an error of this package's own checks (a closed handle, a released
// frame), with the status the C ABI gives for the same misuse.
func misuse(s Status, msg string) error { return &Error{Status: s, Msg: msg} }

// layoutVersion is the layout version the library speaks (a C call that does
// nothing else: the benchmarks measure a bare cgo call with it).
func layoutVersion() uint32 { return uint32(C.shmring_layout_version()) }

// statusNames is every status the C ABI names, walking shmring_status_name
// until it stops knowing them (for the tests: what the C ABI says it has).
func statusNames() map[Status]string {
	out := map[Status]string{}
	unknown := Status(1 << 20).Name()
	for s := Status(1); s > -1000; s-- {
		if n := s.Name(); n != unknown {
			out[s] = n
		}
	}
	return out
}
