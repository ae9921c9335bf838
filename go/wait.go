package shmring

// Waiting on an eventfd ring in Go's netpoller.
//
// The C ABI's protocol (docs/C-API.md, DESIGN.md §5): shmring_consumer_arm says
// the consumer is about to wait and whether a record is already there; if not,
// wait until the ring's eventfd is readable, then shmring_consumer_disarm (which
// drains it) and look again. Here the wait is a read on a duplicate of the eventfd
// registered with Go's netpoller (os.NewFile on a non-blocking descriptor): the
// goroutine parks and no thread is held. The netpoller is edge-triggered; every
// producer's write to the eventfd after the arm makes an edge, and RawConn.Read
// forgets only readiness seen before its own start, which is before the arm.

/*
#include "glue.h"
*/
import "C"

import (
	"context"
	"errors"
	"os"
	"runtime"
	"syscall"
	"time"
)

// pollEventfd duplicates the ring's eventfd (owned by the segment: never closed
// here) into a descriptor of our own, in the netpoller.
func (c *Consumer) pollEventfd(fd int) error {
	dup, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_DUPFD_CLOEXEC, 0)
	if errno != 0 {
		return misuse(ErrOS, "Consumer: dup of the ring's eventfd: "+errno.Error())
	}
	// The ring's eventfd is non-blocking (the library drains it without waiting);
	// the flag is on the shared file description, so the duplicate is too, and
	// os.NewFile makes it pollable.
	if err := syscall.SetNonblock(int(dup), true); err != nil {
		syscall.Close(int(dup))
		return misuse(ErrOS, "Consumer: eventfd: "+err.Error())
	}
	f := os.NewFile(dup, "shmring-eventfd")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return misuse(ErrOS, "Consumer: eventfd: "+err.Error())
	}
	c.efd, c.rc = f, rc
	c.waitFn = c.waitStep // one method value for every wait: no allocation per wait
	return nil
}

// park waits until the eventfd says a record may be there, ctx is done, or the
// consumer is closed. The caller then looks again.
func (c *Consumer) park(ctx context.Context) error {
	dl, hasDl := ctx.Deadline()
	if !hasDl {
		dl = time.Time{}
	}
	if err := c.efd.SetReadDeadline(dl); err != nil {
		return c.parkErr(ctx, err)
	}
	done := ctx.Done()
	if done != nil {
		c.startWatch(ctx)
	}
	c.armed, c.waitErr = false, nil
	c.parks++
	err := c.rc.Read(c.waitFn)
	if done != nil {
		c.watch.ack <- struct{}{}
	}
	if c.armed {
		// Woken by the deadline, a cancel or Close: end the wait all the same.
		c.armed = false
		if derr := c.disarm(); derr != nil && err == nil && !c.closing.Load() {
			return derr
		}
	}
	if c.waitErr != nil {
		return c.waitErr
	}
	if err != nil {
		return c.parkErr(ctx, err)
	}
	return nil
}

func (c *Consumer) parkErr(ctx context.Context, err error) error {
	if c.closing.Load() {
		return c.closedErr("Consumer.Next")
	}
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// The context's deadline passed; its own timer fires at it too.
		<-ctx.Done()
		return ctx.Err()
	}
	return misuse(ErrOS, "Consumer.Next: waiting on the eventfd: "+err.Error())
}

// waitStep is RawConn.Read's callback: true ends the wait. The first call arms
// (true at once if a record is already there); the call after a wake-up disarms.
func (c *Consumer) waitStep(uintptr) bool {
	if c.armed {
		c.armed = false
		c.waitErr = c.disarm()
		return true
	}
	c.mu.Lock()
	if c.h == nil {
		c.mu.Unlock()
		c.waitErr = c.closedErr("Consumer.Next")
		return true
	}
	runtime.LockOSThread()
	r := C.go_consumer_arm(c.uh())
	err := errorOf(int32(r.status))
	runtime.UnlockOSThread()
	c.mu.Unlock()
	if err != nil {
		c.waitErr = err
		return true
	}
	if r.value != 0 {
		return true // a record is there (arm disarmed again)
	}
	c.armed = true
	return false
}

func (c *Consumer) disarm() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.h == nil {
		return c.closedErr("Consumer.Next")
	}
	runtime.LockOSThread()
	st := C.go_consumer_disarm(c.uh())
	err := errorOf(int32(st))
	runtime.UnlockOSThread()
	return err
}

// watcher ends a parked wait when its context is cancelled: one goroutine per
// consumer, started at the first wait with a cancellable context, that sets the
// eventfd's read deadline in the past. Handing it a context and the
// acknowledgement are channel operations: no allocation per wait.
type watcher struct {
	ctxs chan context.Context
	ack  chan struct{}
}

var longAgo = time.Unix(1, 0)

func (c *Consumer) startWatch(ctx context.Context) {
	if c.watch == nil {
		w := &watcher{ctxs: make(chan context.Context), ack: make(chan struct{})}
		efd := c.efd
		go func() {
			for ctx := range w.ctxs {
				select {
				case <-ctx.Done():
					_ = efd.SetReadDeadline(longAgo)
					<-w.ack
				case <-w.ack:
				}
			}
		}()
		c.watch = w
	}
	c.watch.ctxs <- ctx
}
