package shmring

// Inherited descriptors: the one place that knows which descriptors make up a
// ring handed to another process; the order is the C library's
// (shmring_segment_descriptors).

/*
#include <shmring.h>
*/
import "C"

import (
	"fmt"
	"syscall"
	"unsafe"
)

// maxFds is the most descriptors a ring has: segment, lock file, eventfd.
const maxFds = 3

// Fds are the descriptors a producer in another process attaches to this ring
// with (AttachFds there), in AttachFds's order: the segment; for a memfd ring,
// its lock file; for an eventfd ring, its eventfd.
//
// They stay owned by the segment: never close them. Closing any descriptor of the
// ring's lock file drops this process's record locks on it, which are how the
// ring knows its consumer and producers are alive. So hand them to a child with
// syscall.StartProcess (ProcAttr.Files lists raw descriptors, duplicated in the
// child only), not with os/exec's ExtraFiles, whose *os.File the parent closes.
// A consumer's socket (Listen, Connect) hands a ring over without any of this.
func (s *Segment) Fds() ([]int, error) {
	h, err := s.handle("Segment.Fds")
	if err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	var raw [maxFds]C.int
	var n C.size_t
	if err := check(func() int32 {
		return C.shmring_segment_descriptors(h, &raw[0], maxFds, &n)
	}); err != nil {
		return nil, err
	}
	fds := make([]int, int(n))
	for i := range fds {
		fds[i] = int(raw[i])
	}
	return fds, nil
}

// AttachFds attaches to a ring from descriptors inherited from (or received from)
// the process that created it, in the order Fds gives them: the sandbox-friendly
// way, with no file system. The library owns the descriptors from the call on,
// whether it succeeds or not: do not close them. A number that is no descriptor
// (negative, or beyond a C int) is ErrInvalidArgument naming it.
func AttachFds(fds ...int) (*Segment, error) {
	if len(fds) == 0 || len(fds) > maxFds {
		for _, fd := range fds {
			syscall.Close(fd)
		}
		return nil, misuse(ErrInvalidArgument, "AttachFds: a ring has one to three descriptors (segment, lock file, eventfd)")
	}
	var raw [maxFds]C.int
	for i, fd := range fds {
		if err := fdArg(fmt.Sprintf("AttachFds: fds[%d]", i), fd); err != nil {
			for _, fd := range fds {
				if fdArg("", fd) == nil {
					syscall.Close(fd)
				}
			}
			return nil, err
		}
		raw[i] = C.int(fd)
	}
	var h *C.shmring_segment
	if err := check(func() int32 {
		return C.shmring_segment_attach_fds((*C.int)(unsafe.Pointer(&raw[0])), C.size_t(len(fds)), &h)
	}); err != nil {
		return nil, err
	}
	return newSegment(h), nil
}
