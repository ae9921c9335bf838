package shmring

/*
The cost of the frame path through cgo, in ns per frame (go test -bench . -benchmem):
each op is one record written and read back in one process, so it is the binding's
own cost plus the ring's, with no copy of the payload and no allocation.
*/

import (
	"context"
	"syscall"
	"testing"
)

// cpuNs is this process's CPU time (user + system): on a shared machine it varies
// less than the wall clock, which counts the time other jobs had the CPU.
func cpuNs() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// cpuPerOp reports CPU ns per op beside the wall-clock ns/op; call it right after
// b.ResetTimer, and the returned function when the loop is done.
func cpuPerOp(b *testing.B) func() {
	start := cpuNs()
	return func() {
		b.ReportMetric(float64(cpuNs()-start)/float64(b.N), "cpu-ns/op")
	}
}

// One call through cgo of a C function that does nothing but return a constant:
// the toll every C call on the frame path pays.
func BenchmarkCgoCall(b *testing.B) {
	defer cpuPerOp(b)()
	for i := 0; i < b.N; i++ {
		layoutVersion()
	}
}

func benchRing(b *testing.B, capacity uint64) (*Segment, *Consumer, *Producer) {
	cfg := DefaultConfig()
	cfg.Capacity = capacity
	cfg.Eventfd = true
	s, err := Create("memfd:bench", &cfg)
	if err != nil {
		b.Fatal(err)
	}
	c, err := s.Consumer(nil)
	if err != nil {
		b.Fatal(err)
	}
	p, err := s.Producer()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close(); c.Close(); s.Close() })
	return s, c, p
}

// measure starts the measured part of a frame-path benchmark (allocations
// reported) and gives its context.
func measure(b *testing.B) context.Context {
	b.ReportAllocs()
	b.ResetTimer()
	return context.Background()
}

// Reserve, Commit (2 C calls); Next, Release (2 C calls): 4 KiB records, the
// payload untouched (the cost of the path, not of writing bytes).
func BenchmarkFramePath4KiB(b *testing.B) {
	_, c, p := benchRing(b, 16<<20)
	var f Frame
	ctx := measure(b)
	defer cpuPerOp(b)()
	for i := 0; i < b.N; i++ {
		r, err := p.Reserve(4096)
		if err != nil {
			b.Fatal(err)
		}
		r.Bytes()[0] = byte(i)
		if err := r.Commit(Meta{Stream: 1}); err != nil {
			b.Fatal(err)
		}
		if err := c.Next(ctx, &f); err != nil {
			b.Fatal(err)
		}
		if err := f.Release(); err != nil {
			b.Fatal(err)
		}
	}
}

// A 1080p I420 video record: ReserveVideo (header built, reserved and written,
// planes found: 2 C calls), Commit; Next, Media (header parsed, planes found),
// the three planes, Release. The pixels are not drawn.
func BenchmarkFramePath1080p(b *testing.B) {
	_, c, p := benchRing(b, 64<<20)
	var f Frame
	ctx := measure(b)
	defer cpuPerOp(b)()
	for i := 0; i < b.N; i++ {
		r, err := p.ReserveVideo(FormatI420, 1920, 1080, 0, uint64(i))
		if err != nil {
			b.Fatal(err)
		}
		r.Plane(0)[0] = byte(i)
		if err := r.Commit(Meta{Kind: KindVideo}); err != nil {
			b.Fatal(err)
		}
		if err := c.Next(ctx, &f); err != nil {
			b.Fatal(err)
		}
		if _, err := f.Media(); err != nil {
			b.Fatal(err)
		}
		for k := 0; k < 3; k++ {
			if _, err := f.Plane(k); err != nil {
				b.Fatal(err)
			}
		}
		if err := f.Release(); err != nil {
			b.Fatal(err)
		}
	}
}

// Send copies a 4 KiB buffer (1 C call); TryNext, Release (2).
func BenchmarkSend4KiB(b *testing.B) {
	_, c, p := benchRing(b, 16<<20)
	buf := make([]byte, 4096)
	var f Frame
	b.ReportAllocs()
	b.ResetTimer()
	defer cpuPerOp(b)()
	for i := 0; i < b.N; i++ {
		if err := p.Send(buf, Meta{}); err != nil {
			b.Fatal(err)
		}
		if ok, err := c.TryNext(&f); !ok || err != nil {
			b.Fatal(ok, err)
		}
		if err := f.Release(); err != nil {
			b.Fatal(err)
		}
	}
}
