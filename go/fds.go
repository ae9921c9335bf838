package shmring

// Inherited descriptors: the one place that knows which descriptors make up a
// ring handed to another process, and in which order.

/*
#include <shmring.h>
*/
import "C"

import "syscall"

// Fds are the descriptors a producer in another process attaches to this ring
// with (AttachFds there), in AttachFds's order: the ring's descriptor, then its
// eventfd for an eventfd ring.
//
// They stay owned by the segment: never close them. Closing any descriptor of the
// ring's file drops this process's record locks on it, which are how the ring
// knows its consumer and producers are alive. So hand them to a child with
// syscall.StartProcess (ProcAttr.Files lists raw descriptors, duplicated in the
// child only), not with os/exec's ExtraFiles, whose *os.File the parent closes.
// A consumer's socket (Listen, Connect) hands a ring over without any of this.
func (s *Segment) Fds() ([]int, error) {
	h, err := s.handle("Segment.Fds")
	if err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	var fd, efd C.int
	if err := check(func() int32 { return C.shmring_segment_fd(h, &fd) }); err != nil {
		return nil, err
	}
	if err := check(func() int32 { return C.shmring_segment_eventfd(h, &efd) }); err != nil {
		return nil, err
	}
	if efd < 0 {
		return []int{int(fd)}, nil
	}
	return []int{int(fd), int(efd)}, nil
}

// AttachFds attaches to a ring from descriptors inherited from (or received from)
// the process that created it, in the order Fds gives them: the sandbox-friendly
// way, with no file system. The library owns the descriptors from the call on,
// whether it succeeds or not: do not close them.
func AttachFds(fds ...int) (*Segment, error) {
	efd := -1
	switch len(fds) {
	case 1:
	case 2:
		efd = fds[1]
	default:
		for _, fd := range fds {
			syscall.Close(fd)
		}
		return nil, misuse(ErrInvalidArgument, "AttachFds: a ring is one descriptor, or two with its eventfd")
	}
	var h *C.shmring_segment
	if err := check(func() int32 { return C.shmring_segment_attach_fd(C.int(fds[0]), C.int(efd), &h) }); err != nil {
		return nil, err
	}
	return newSegment(h), nil
}
