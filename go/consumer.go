package shmring

/*
#include <stdlib.h>
#include "glue.h"
*/
import "C"

import (
	"context"
	"math"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// ConsumerOptions tune a consumer: the core's options, by the names every
// binding uses. Start from DefaultConsumerOptions (the library's defaults). A
// zero duration is the library's default too; Never turns off what is optional
// (overtaking, the latency budget, the claim timeout, the age limit).
type ConsumerOptions struct {
	// How often a pending claim's producer is checked for liveness.
	LivenessInterval time.Duration
	// Polls to spin before sleeping in a wait inside the library (a count: 0
	// sleeps at once).
	Spin uint32
	// Report ErrCorrupt and wait for Reset instead of resetting by itself.
	ManualReset bool
	// Deliver committed records behind a claim pending this long (0: the
	// library's default); Never keeps strict claim order across producers.
	OvertakeAfter time.Duration
	// The ring's consumer expels a tethered consumer that stays behind without
	// releasing for this long.
	TetherStallLimit time.Duration
	// Let a record wait up to this long before the consumer sees it, so one
	// wake-up serves many (default: never, woken at every commit).
	LatencyBudget time.Duration
	// Take back a claim still pending this long after the consumer first saw it,
	// whoever holds it (Never: wait for live producers for ever, trusted producers
	// only).
	ClaimTimeout time.Duration
	// Release unread (counted in "records_filtered") a record older than this,
	// by its timestamp on CLOCK_MONOTONIC, when the consumer reaches it: a live
	// viewer that fell behind skips to fresh records (default: off).
	MaxAge time.Duration
	// Which records the consumer is handed (the zero value: every record).
	Filter Filter
}

// Filter says which records a consumer is handed: the library's filter, the
// tap's rule. The zero value takes every record. Records it refuses are released
// at once, unread (their space returns to producers), and counted in the
// "records_filtered" stat, not in "records_consumed".
type Filter struct {
	// ByKind: only records of kind Kind.
	ByKind bool
	Kind   Kind
	// ByStream: only records of stream Stream.
	ByStream bool
	Stream   uint32
}

func (f Filter) toC() (fields, kind, stream C.uint32_t) {
	if f.ByKind {
		fields |= C.SHMRING_FILTER_KIND
	}
	if f.ByStream {
		fields |= C.SHMRING_FILTER_STREAM
	}
	return fields, C.uint32_t(f.Kind), C.uint32_t(f.Stream)
}

// Never, as a ConsumerOptions duration, turns the option off (the C ABI's
// SHMRING_NEVER).
const Never time.Duration = math.MaxInt64

// DefaultConsumerOptions are the library's defaults (shmring_consumer_options_init).
func DefaultConsumerOptions() ConsumerOptions {
	var o C.shmring_consumer_options
	C.shmring_consumer_options_init(&o)
	return ConsumerOptions{
		LivenessInterval: optionDuration(o.liveness_interval_ns),
		Spin:             uint32(o.spin),
		ManualReset:      o.manual_reset != 0,
		OvertakeAfter:    optionDuration(o.overtake_after_ns),
		TetherStallLimit: optionDuration(o.tether_stall_limit_ns),
		LatencyBudget:    optionDuration(o.latency_budget_ns),
		ClaimTimeout:     optionDuration(o.claim_timeout_ns),
		MaxAge:           optionDuration(o.max_age_ns),
	}
}

// never is SHMRING_NEVER.
const never = ^uint64(0)

// optionNs is a duration option as the C ABI takes it (the library applies the
// rules: 0 the default, SHMRING_NEVER never).
func optionNs(d time.Duration) C.uint64_t {
	if d == Never {
		return C.uint64_t(never)
	}
	return C.uint64_t(durationNs(d))
}

func optionDuration(ns C.uint64_t) time.Duration {
	if uint64(ns) == never {
		return Never
	}
	return time.Duration(ns)
}

func (o *ConsumerOptions) toC() (*C.shmring_consumer_options, error) {
	if o == nil {
		return nil, nil
	}
	for _, d := range []struct {
		name string
		d    time.Duration
	}{
		{"LivenessInterval", o.LivenessInterval},
		{"OvertakeAfter", o.OvertakeAfter},
		{"TetherStallLimit", o.TetherStallLimit},
		{"LatencyBudget", o.LatencyBudget},
		{"ClaimTimeout", o.ClaimTimeout},
		{"MaxAge", o.MaxAge},
	} {
		if err := durationArg("ConsumerOptions."+d.name, d.d); err != nil {
			return nil, err
		}
	}
	fields, kind, stream := o.Filter.toC()
	return &C.shmring_consumer_options{
		liveness_interval_ns:  optionNs(o.LivenessInterval),
		spin:                  C.uint32_t(o.Spin),
		manual_reset:          cbool(o.ManualReset),
		overtake_after_ns:     optionNs(o.OvertakeAfter),
		tether_stall_limit_ns: optionNs(o.TetherStallLimit),
		latency_budget_ns:     optionNs(o.LatencyBudget),
		claim_timeout_ns:      optionNs(o.ClaimTimeout),
		max_age_ns:            optionNs(o.MaxAge),
		filter:                fields,
		kind:                  kind,
		stream:                stream,
	}, nil
}

// Consumer reads a ring's records as frames that point into the ring.
//
// One goroutine receives (Next, TryNext); frames may be released, and the
// consumer queried, from any goroutine. The ring's consumer of an eventfd ring
// (Config.Eventfd) waits in Go's netpoller on the ring's eventfd: a waiting Next
// parks its goroutine and holds no thread. Other consumers (tethered ones, and the
// consumer of a futex ring) wait inside the library, holding a thread, in slices
// of at most waitSlice so that a cancelled context is seen.
type Consumer struct {
	mu       sync.Mutex // serialises calls on the C handle (the ABI: one thread at a time)
	h        *C.shmring_consumer
	tethered bool

	recvMu  sync.Mutex  // held by Next for its whole call; Close waits for it
	closing atomic.Bool // set first by Close: Next stops

	// The eventfd wait (nil for consumers that wait in the library).
	efd     *os.File        // a non-blocking dup of the ring's eventfd, in the netpoller
	rc      syscall.RawConn // efd's
	waitFn  func(uintptr) bool
	armed   bool  // between a successful arm and its disarm (the receiving goroutine's)
	waitErr error // an error of arm or disarm inside waitFn
	watch   *watcher
	parks   uint64 // waits in the netpoller so far (for the tests)
}

// waitSlice bounds each wait inside the library, so Next sees a cancelled
// context or a Close within it. (This package's choice; the eventfd wait has no
// slices.)
const waitSlice = 20 * time.Millisecond

// Consumer becomes the ring's consumer (taking over from a dead one). opts nil:
// the library's defaults.
func (s *Segment) Consumer(opts *ConsumerOptions) (*Consumer, error) {
	return s.attachConsumer(opts, false)
}

// Tethered attaches a tethered consumer beside the ring's own: it gets every
// record from where the ring's consumer is when it adopts it (at that consumer's
// next look at the ring), and holds their space until it releases them. It waits
// inside the library (not on the eventfd). ErrNoConsumer without a live ring
// consumer; ErrDetached from its calls once the ring's consumer detached it.
func (s *Segment) Tethered(opts *ConsumerOptions) (*Consumer, error) {
	return s.attachConsumer(opts, true)
}

func (s *Segment) attachConsumer(opts *ConsumerOptions, tethered bool) (*Consumer, error) {
	copts, err := opts.toC()
	if err != nil {
		return nil, err
	}
	h, err := s.handle("Segment.Consumer")
	if err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	var ch *C.shmring_consumer
	err = check(func() int32 {
		if tethered {
			return C.shmring_consumer_attach_tethered(h, copts, &ch)
		}
		return C.shmring_consumer_attach(h, copts, &ch)
	})
	if err != nil {
		return nil, err
	}
	c := &Consumer{h: ch, tethered: tethered}
	if !tethered {
		var fd C.int
		err := check(func() int32 { return C.shmring_segment_eventfd(h, &fd) })
		if err == nil && fd >= 0 {
			err = c.pollEventfd(int(fd))
		}
		if err != nil {
			C.shmring_consumer_close(ch)
			return nil, err
		}
	}
	return c, nil
}

// Close detaches the consumer. Every frame it handed out becomes invalid:
// release them (or stop using them) first. A Next blocked in another goroutine
// returns ErrBadHandle.
func (c *Consumer) Close() error {
	if c.closing.Swap(true) {
		return misuse(ErrBadHandle, "Consumer.Close: the consumer is closed")
	}
	if c.efd != nil {
		c.efd.Close() // wakes a Next parked on it
	}
	c.recvMu.Lock()
	defer c.recvMu.Unlock()
	if c.watch != nil {
		close(c.watch.ctxs)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.h
	c.h = nil
	return check(func() int32 { return C.shmring_consumer_close(h) })
}

// uh is the handle as the glue's frame-path functions take it (see glue.h).
// Call with c.mu held.
func (c *Consumer) uh() C.uintptr_t { return C.uintptr_t(uintptr(unsafe.Pointer(c.h))) }

func (c *Consumer) closedErr(op string) error {
	return misuse(ErrBadHandle, op+": the consumer is closed")
}

// IsTethered tells a tethered consumer from the ring's consumer.
func (c *Consumer) IsTethered() bool { return c.tethered }

// Next waits for the next frame and hands it out in f, until ctx is done (then
// it returns ctx.Err(), and ctx.Err() is not nil). f must not hold a frame (ErrState). The frame's views
// point into the ring until f.Release(). Zero allocations per frame.
func (c *Consumer) Next(ctx context.Context, f *Frame) error {
	if f.c != nil {
		return misuse(ErrState, "Consumer.Next: the Frame still holds a frame: release it first")
	}
	if c.closing.Load() {
		return c.closedErr("Consumer.Next")
	}
	if !c.recvMu.TryLock() {
		return misuse(ErrBusy, "Consumer.Next: another goroutine is receiving on this consumer")
	}
	defer c.recvMu.Unlock()
	for {
		if c.closing.Load() {
			return c.closedErr("Consumer.Next")
		}
		got, err := c.next(f, 0)
		if got || err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if c.efd != nil {
			err = c.park(ctx)
		} else {
			wait := waitSlice
			if dl, ok := ctx.Deadline(); ok {
				left := time.Until(dl)
				if left <= 0 {
					<-ctx.Done() // its timer fires at the deadline: ctx.Err() says so
					return ctx.Err()
				}
				if left < wait {
					wait = left
				}
			}
			got, err = c.next(f, wait)
			if got {
				return nil
			}
		}
		if err != nil {
			return err
		}
	}
}

// TryNext hands out the next frame in f if one is there, without waiting.
func (c *Consumer) TryNext(f *Frame) (bool, error) {
	if f.c != nil {
		return false, misuse(ErrState, "Consumer.TryNext: the Frame still holds a frame: release it first")
	}
	if !c.recvMu.TryLock() {
		return false, misuse(ErrBusy, "Consumer.TryNext: another goroutine is receiving on this consumer")
	}
	defer c.recvMu.Unlock()
	return c.next(f, 0)
}

// next asks the library for a frame, waiting up to wait.
func (c *Consumer) next(f *Frame, wait time.Duration) (bool, error) {
	c.mu.Lock()
	if c.h == nil {
		c.mu.Unlock()
		return false, c.closedErr("Consumer.Next")
	}
	runtime.LockOSThread()
	r := C.go_consumer_next(c.uh(), C.int64_t(wait))
	var err error
	if r.status != C.SHMRING_TIMEOUT {
		err = errorOf(int32(r.status))
	}
	runtime.UnlockOSThread()
	c.mu.Unlock()
	if err != nil || r.status != C.SHMRING_OK {
		return false, err
	}
	f.hold(c, &r.frame)
	return true, nil
}

// Outstanding is how many frames the consumer handed out and has not had back.
func (c *Consumer) Outstanding() (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.h == nil {
		return 0, c.closedErr("Consumer.Outstanding")
	}
	h := c.h
	var n C.uint64_t
	err := check(func() int32 { return C.shmring_consumer_outstanding(h, &n) })
	return uint64(n), err
}

// Reset resets the ring by hand (a consumer does so by itself on corruption unless
// ManualReset): every claim in flight is forgotten; frames held stay valid.
func (c *Consumer) Reset() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.h == nil {
		return c.closedErr("Consumer.Reset")
	}
	h := c.h
	return check(func() int32 { return C.shmring_consumer_reset(h) })
}

// Resets is how many times this consumer reset the ring, and why it made the last
// reset ("" if none).
func (c *Consumer) Resets() (uint64, string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.h == nil {
		return 0, "", c.closedErr("Consumer.Resets")
	}
	h := c.h
	var n C.uint64_t
	const causeLen = 512
	cause := (*C.char)(C.calloc(causeLen, 1))
	defer C.free(unsafe.Pointer(cause))
	err := check(func() int32 { return C.shmring_consumer_resets(h, &n, cause, causeLen) })
	return uint64(n), C.GoString(cause), err
}

// Reap frees the slots of dead producers that hold nothing and says how many.
func (c *Consumer) Reap() (uint32, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.h == nil {
		return 0, c.closedErr("Consumer.Reap")
	}
	h := c.h
	var n C.uint32_t
	err := check(func() int32 { return C.shmring_consumer_reap(h, &n) })
	return uint32(n), err
}

func (c *Consumer) release(f *Frame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.h == nil {
		return c.closedErr("Frame.Release")
	}
	runtime.LockOSThread()
	st := C.go_consumer_release(c.uh(), C.uintptr_t(uintptr(unsafe.Pointer(f.raw.data))), f.raw.len,
		f.raw.meta, f.raw.seq, f.raw.owner)
	err := errorOf(int32(st))
	runtime.UnlockOSThread()
	return err
}
