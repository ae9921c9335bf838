package shmring

// Inherited descriptors: the one place that knows which descriptors make up a
// ring handed to another process; the order is the C library's
// (shmring_segment_descriptors).

/*
#include <shmring.h>
*/
import "C"

// maxFds is the most descriptors a ring has: segment, lock file, eventfd.
const maxFds = 3

// Fds are the descriptors a producer in another process attaches to this ring
// with (there: Open of the address fd:SEG[,LOCK][,EVENTFD], its numbers of them),
// in this order: the segment; for a memfd ring, its lock file; for an eventfd
// ring, its eventfd.
//
// They stay owned by the segment: never close them. Closing any descriptor of the
// ring's lock file drops this process's record locks on it, which are how the
// ring knows its consumer and producers are alive. So hand them to a child with
// syscall.StartProcess (ProcAttr.Files lists raw descriptors, duplicated in the
// child only), not with os/exec's ExtraFiles, whose *os.File the parent closes.
// A consumer's socket (Listen; Open of unix:PATH) hands a ring over without any
// of this.
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
