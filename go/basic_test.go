package shmring

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// ringName is a name no other test run uses; the ring is checked gone at the end.
func ringName(t *testing.T) string {
	name := fmt.Sprintf("shmring-go-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	t.Cleanup(func() {
		if _, err := os.Stat("/dev/shm/" + name); err == nil {
			os.Remove("/dev/shm/" + name)
			t.Errorf("/dev/shm/%s was left behind", name)
		}
	})
	return name
}

// ringWithEnds is memfdRing with its consumer and a producer attached, all closed
// when the test ends.
func ringWithEnds(t *testing.T, capacity uint64, eventfd bool) (*Segment, *Consumer, *Producer) {
	t.Helper()
	s := memfdRing(t, capacity, eventfd)
	c, err := s.Consumer(nil)
	must(t, err)
	p, err := s.Producer()
	must(t, err)
	// Cleanups run last-registered first: the producer, the consumer, the ring.
	t.Cleanup(func() { c.Close() })
	t.Cleanup(func() { p.Close() })
	return s, c, p
}

func memfdRing(t *testing.T, capacity uint64, eventfd bool) *Segment {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Capacity = capacity
	cfg.Eventfd = eventfd
	s, err := Create("memfd:go-test", &cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// ringWithPeers is a memfd ring with its consumer and one producer, all closed
// at the end of the test.
func ringWithPeers(t *testing.T, capacity uint64, eventfd bool) (*Segment, *Consumer, *Producer) {
	t.Helper()
	return ringWithPeersOpts(t, capacity, eventfd, nil)
}

// ringWithPeersOpts is ringWithPeers with the consumer's options (nil: the
// library's).
func ringWithPeersOpts(t *testing.T, capacity uint64, eventfd bool, opts *ConsumerOptions) (*Segment, *Consumer, *Producer) {
	t.Helper()
	s := memfdRing(t, capacity, eventfd)
	c, err := s.Consumer(opts)
	must(t, err)
	t.Cleanup(func() { c.Close() })
	p, err := s.Producer()
	must(t, err)
	t.Cleanup(func() { p.Close() })
	return s, c, p
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func inside(t *testing.T, s *Segment, b []byte) bool {
	t.Helper()
	base, n, err := s.Mapping()
	must(t, err)
	p := uintptr(unsafe.Pointer(&b[0]))
	return p >= base && p+uintptr(len(b)) <= base+uintptr(n)
}

func TestRoundTripInPlace(t *testing.T) {
	for _, efd := range []bool{false, true} {
		t.Run(fmt.Sprintf("eventfd=%v", efd), func(t *testing.T) {
			s, c, p := ringWithEnds(t, 1<<20, efd)

			r, err := p.Reserve(1000)
			must(t, err)
			if !inside(t, s, r.Bytes()) {
				t.Fatal("the reservation is not inside the ring's mapping")
			}
			for i := range r.Bytes() {
				r.Bytes()[i] = byte(i)
			}
			wrote := &r.Bytes()[0]
			must(t, r.Commit(Meta{Stream: 3, Kind: KindRaw, TimestampNs: 42, Flags: 7}))
			if r.Bytes() != nil {
				t.Fatal("a committed reservation still has a view")
			}

			var f Frame
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			must(t, c.Next(ctx, &f))
			if &f.Data()[0] != wrote {
				t.Fatal("the frame is not where the producer wrote it: a copy")
			}
			if !inside(t, s, f.Data()) || f.Len() != 1000 {
				t.Fatalf("frame of %d bytes outside the mapping", f.Len())
			}
			for i, b := range f.Data() {
				if b != byte(i) {
					t.Fatalf("byte %d is %d", i, b)
				}
			}
			if m := f.Meta(); m != (Meta{Stream: 3, Kind: KindRaw, TimestampNs: 42, Flags: 7}) {
				t.Fatalf("meta %+v", m)
			}
			must(t, f.Release())
			st, err := s.Stats()
			must(t, err)
			if v, _ := st.Get("records_consumed"); v != 1 {
				t.Fatalf("records_consumed %d", v)
			}
		})
	}
}

func TestViewsAreGoneAfterRelease(t *testing.T) {
	_, c, p := ringWithPeers(t, 1<<20, true)
	r, err := p.ReserveVideo(FormatI420, 64, 32, 1, 2)
	must(t, err)
	must(t, r.Commit(Meta{Kind: KindVideo}))
	var f Frame
	must(t, c.Next(context.Background(), &f))
	y, err := f.Plane(0)
	must(t, err)
	if len(y) != 64*32 || !f.Held() {
		t.Fatalf("Y plane of %d bytes", len(y))
	}
	must(t, f.Release())
	if f.Data() != nil || f.Len() != 0 || f.Held() {
		t.Fatal("a released frame still has a view")
	}
	if _, err := f.Plane(0); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Plane after Release: %v", err)
	}
	if _, err := f.Media(); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Media after Release: %v", err)
	}
	if err := f.Release(); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("second Release: %v", err)
	}
	if n, _ := c.Outstanding(); n != 0 {
		t.Fatalf("%d outstanding", n)
	}
	// A frame still held when its consumer closes has no view either.
	r, err = p.ReserveVideo(FormatI420, 64, 32, 1, 3)
	must(t, err)
	must(t, r.Commit(Meta{Kind: KindVideo}))
	must(t, c.Next(context.Background(), &f))
	must(t, c.Close())
	if f.Data() != nil {
		t.Fatal("a frame of a closed consumer still has a view")
	}
	if _, err := f.Media(); !errors.Is(err, ErrBadHandle) {
		t.Fatalf("Media after Close: %v", err)
	}
	if _, err := f.Plane(0); !errors.Is(err, ErrBadHandle) {
		t.Fatalf("Plane after Close: %v", err)
	}
	if err := f.Release(); !errors.Is(err, ErrBadHandle) {
		t.Fatalf("Release after Close: %v", err)
	}
}

func TestSendAndOutOfOrderRelease(t *testing.T) {
	_, c, p := ringWithPeers(t, 1<<20, false)
	for i := 0; i < 3; i++ {
		must(t, p.Send([]byte(fmt.Sprintf("rec%d", i)), NewMeta(1, KindRaw)))
	}
	var fs [3]Frame
	for i := range fs {
		ok, err := c.TryNext(&fs[i])
		must(t, err)
		if !ok || string(fs[i].Data()) != fmt.Sprintf("rec%d", i) {
			t.Fatalf("record %d: %v %q", i, ok, fs[i].Data())
		}
	}
	if err := c.Next(context.Background(), &fs[0]); !errors.Is(err, ErrState) {
		t.Fatalf("Next into a held Frame: %v", err)
	}
	for _, i := range []int{2, 0, 1} {
		must(t, fs[i].Release())
	}
	if n, _ := c.Outstanding(); n != 0 {
		t.Fatalf("%d outstanding", n)
	}
	ok, err := c.TryNext(&fs[0])
	if ok || err != nil {
		t.Fatalf("an empty ring gave %v %v", ok, err)
	}
}

func TestMediaAndPlanes(t *testing.T) {
	_, c, p := ringWithPeers(t, 16<<20, true)
	r, err := p.ReserveVideo(FormatI420, 1920, 1080, 123, 9)
	must(t, err)
	if r.Planes() != 3 {
		t.Fatalf("%d planes", r.Planes())
	}
	for i := 0; i < 3; i++ {
		pl := r.Plane(i)
		for k := range pl {
			pl[k] = byte(10*i + 1)
		}
	}
	must(t, r.Commit(Meta{Stream: 1, Kind: KindVideo, TimestampNs: 123}))
	r, err = p.ReserveAudio(FormatPCMS16, 48000, 2, 480, 5, 6)
	must(t, err)
	if len(r.Plane(0)) != 480*2*2 {
		t.Fatalf("audio plane of %d bytes", len(r.Plane(0)))
	}
	must(t, r.Commit(Meta{Stream: 1, Kind: KindAudio}))
	must(t, p.Send([]byte("raw"), Meta{Kind: KindRaw}))

	var f Frame
	must(t, c.Next(context.Background(), &f))
	m, err := f.Media()
	must(t, err)
	if m.Format != FormatI420 || m.Width != 1920 || m.Height != 1080 || m.PtsNs != 123 || m.Sequence != 9 || m.Planes != 3 {
		t.Fatalf("media %+v", m)
	}
	for i := 0; i < 3; i++ {
		pl, err := f.Plane(i)
		must(t, err)
		if len(pl) != int(m.Size[i]) || &pl[0] != &f.Data()[m.Offset[i]] {
			t.Fatalf("plane %d at the wrong place", i)
		}
		if !bytes.Equal(pl, bytes.Repeat([]byte{byte(10*i + 1)}, len(pl))) {
			t.Fatalf("plane %d content", i)
		}
	}
	if _, err := f.Plane(3); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("plane 3: %v", err)
	}
	must(t, f.Release())
	must(t, c.Next(context.Background(), &f))
	m, err = f.Media()
	must(t, err)
	if m.Format != FormatPCMS16 || m.SampleRate != 48000 || m.Channels != 2 || m.Samples != 480 {
		t.Fatalf("audio %+v", m)
	}
	must(t, f.Release())
	must(t, c.Next(context.Background(), &f))
	if _, err := f.Media(); !errors.Is(err, ErrMedia) {
		t.Fatalf("a raw record's media: %v", err)
	}
	if _, err := f.Plane(0); !errors.Is(err, ErrMedia) {
		t.Fatalf("a raw record's plane: %v", err)
	}
	must(t, f.Release())
}

func TestErrorsCarryStatusAndMessage(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Capacity = 1000 // not a power of two
	_, err := Create("memfd:bad", &cfg)
	if !errors.Is(err, ErrConfig) {
		t.Fatalf("bad capacity: %v", err)
	}
	var e *Error
	if !errors.As(err, &e) || e.Status != ErrConfig || e.Msg == "" {
		t.Fatalf("%#v", err)
	}
	if _, err := Open("shmring-go-test-does-not-exist", 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("open missing: %v", err)
	}
	s := memfdRing(t, 1<<16, false)
	p, err := s.Producer()
	must(t, err)
	must(t, p.SetPolicy(PolicyFail, 0))
	if _, err := p.Reserve(1 << 20); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("too large: %v", err)
	}
	// No consumer releases: fill the ring, then ErrFull.
	var full error
	for i := 0; i < 100 && full == nil; i++ {
		full = p.Send(make([]byte, 4000), Meta{})
	}
	if !errors.Is(full, ErrFull) {
		t.Fatalf("full: %v", full)
	}
	if _, err := p.ReserveTimeout(4000, 10*time.Millisecond); !errors.Is(err, ErrTimeout) && !errors.Is(err, ErrNoConsumer) {
		t.Fatalf("timeout: %v", err)
	}
	must(t, p.Close())
	if err := p.Close(); !errors.Is(err, ErrBadHandle) {
		t.Fatalf("double close: %v", err)
	}
	if _, err := p.Reserve(8); !errors.Is(err, ErrBadHandle) {
		t.Fatalf("reserve on a closed producer: %v", err)
	}
}

// Create takes a creating address, with the sizes in cfg or in the text, not both.
func TestCreateTakesACreatingAddress(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Capacity = 1 << 20
	for address, want := range map[string]string{
		"cam0":                     "reaches an existing ring",
		"memfd:x,capacity=2M":      "in one place",
		"create:x,max_producers=4": "in one place",
	} {
		if _, err := Create(address, &cfg); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: %v", address, err)
		}
	}
	s, err := Create("memfd:x,capacity=2M", nil)
	must(t, err)
	defer s.Close()
	g, err := s.Geometry()
	must(t, err)
	if g.Capacity != 2<<20 {
		t.Fatalf("capacity %d, want the text's 2 MiB", g.Capacity)
	}
}
