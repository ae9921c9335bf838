package shmring

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A tethered consumer gets every record beside the ring's consumer, in place; a
// tap copies them; the ring lists the tethered consumer.
func TestTetheredConsumerAndTap(t *testing.T) {
	s := memfdRing(t, 1<<20, true)
	owner, err := s.Consumer(nil)
	must(t, err)
	defer owner.Close()
	teth, err := s.Tethered(nil)
	must(t, err)
	defer teth.Close()
	if !teth.IsTethered() || owner.IsTethered() {
		t.Fatal("IsTethered")
	}
	tap, err := s.Tap(nil)
	must(t, err)
	defer tap.Close()

	var f Frame
	if ok, err := owner.TryNext(&f); ok || err != nil { // its look adopts the tethered consumer
		t.Fatal(ok, err)
	}
	p, err := s.Producer()
	must(t, err)
	defer p.Close()
	must(t, p.Send([]byte("frame"), Meta{Stream: 2}))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	must(t, owner.Next(ctx, &f))
	must(t, f.Release())
	var g Frame
	must(t, teth.Next(ctx, &g))
	if string(g.Data()) != "frame" || g.Stream() != 2 || !inside(t, s, g.Data()) {
		t.Fatalf("tethered got %q", g.Data())
	}
	infos, err := s.Tethers()
	must(t, err)
	if len(infos) != 1 || infos[0].Requested {
		t.Fatalf("tethers %+v", infos)
	}
	must(t, g.Release())

	buf := make([]byte, 3)
	tf, err := tap.Next(ctx, buf)
	if !errors.Is(err, ErrBufferTooSmall) || tf.Len != 5 {
		t.Fatalf("small buffer: %v %+v", err, tf)
	}
	buf = make([]byte, 64)
	tf, err = tap.Next(ctx, buf)
	must(t, err)
	if string(buf[:tf.Len]) != "frame" || tf.Meta.Stream != 2 {
		t.Fatalf("tap got %q", buf[:tf.Len])
	}
	tc, err := tap.Stats()
	must(t, err)
	if tc.Delivered != 1 {
		t.Fatalf("tap counters %+v", tc)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel2()
	if _, err := tap.Next(short, buf); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an idle tap: %v", err)
	}
	// A tethered consumer waits inside the library, and still ends with its context.
	if err := teth.Next(short, &g); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an idle tethered consumer: %v", err)
	}
}

func TestTapOnANamedRing(t *testing.T) {
	name := ringName(t)
	s, err := Create("create:"+name, nil)
	must(t, err)
	defer s.Close()
	c, err := s.Consumer(nil)
	must(t, err)
	defer c.Close()
	o := DefaultTapOptions()
	o.Kind = int64(KindAudio)
	tap, err := OpenTap(name, &o)
	must(t, err)
	defer tap.Close()
	p, err := s.Producer()
	must(t, err)
	defer p.Close()
	must(t, p.Send([]byte("video"), Meta{Kind: KindVideo}))
	must(t, p.Send([]byte("audio"), Meta{Kind: KindAudio}))
	buf := make([]byte, 64)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tf, err := tap.Next(ctx, buf)
	must(t, err)
	if string(buf[:tf.Len]) != "audio" {
		t.Fatalf("tap took %q", buf[:tf.Len])
	}
}

func TestNoTetheredConsumerWithoutTheRingsConsumer(t *testing.T) {
	s := memfdRing(t, 1<<20, false)
	if _, err := s.Tethered(nil); !errors.Is(err, ErrNoConsumer) {
		t.Fatalf("%v", err)
	}
}
