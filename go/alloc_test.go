//go:build !race

// (The race detector's instrumentation allocates: these run without it.)

package shmring

import (
	"context"
	"testing"
)

// allocs runs f n times after a warm-up and fails if it allocated.
func noAllocs(t *testing.T, what string, n int, f func()) {
	t.Helper()
	f() // first use: lazily made things (the watcher, a context's channel)
	if a := testing.AllocsPerRun(n, f); a != 0 {
		t.Errorf("%s: %v allocations per frame", what, a)
	}
}

func TestNoAllocationPerFrame(t *testing.T) {
	_, c, p := ringWithPeers(t, 16<<20, true)
	payload := make([]byte, 4096)
	var f Frame
	ctx := context.Background()

	noAllocs(t, "Reserve, fill, Commit; Next, Release", 1000, func() {
		r, err := p.Reserve(4096)
		if err != nil {
			t.Fatal(err)
		}
		copy(r.Bytes(), payload)
		if err := r.Commit(Meta{Stream: 1}); err != nil {
			t.Fatal(err)
		}
		if err := c.Next(ctx, &f); err != nil {
			t.Fatal(err)
		}
		if f.Data()[100] != payload[100] {
			t.Fatal("wrong bytes")
		}
		if err := f.Release(); err != nil {
			t.Fatal(err)
		}
	})
	noAllocs(t, "Send; TryNext, Release", 1000, func() {
		if err := p.Send(payload, Meta{}); err != nil {
			t.Fatal(err)
		}
		if ok, err := c.TryNext(&f); !ok || err != nil {
			t.Fatal(ok, err)
		}
		if err := f.Release(); err != nil {
			t.Fatal(err)
		}
	})
	noAllocs(t, "ReserveVideo, planes, Commit; Next, Media, planes, Release", 200, func() {
		r, err := p.ReserveVideo(FormatI420, 1920, 1080, 1, 2)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < r.Planes(); i++ {
			r.Plane(i)[0] = byte(i)
		}
		if err := r.Commit(Meta{Kind: KindVideo}); err != nil {
			t.Fatal(err)
		}
		if err := c.Next(ctx, &f); err != nil {
			t.Fatal(err)
		}
		m, err := f.Media()
		if err != nil || m.Width != 1920 {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			if pl, err := f.Plane(i); err != nil || pl[0] != byte(i) {
				t.Fatal(err)
			}
		}
		if err := f.Release(); err != nil {
			t.Fatal(err)
		}
	})
	noAllocs(t, "ReserveAudio, Commit", 1000, func() {
		r, err := p.ReserveAudio(FormatPCMS16, 48000, 2, 480, 1, 2)
		if err != nil {
			t.Fatal(err)
		}
		r.Plane(0)[0] = 1
		if err := r.Commit(Meta{Kind: KindAudio}); err != nil {
			t.Fatal(err)
		}
		if err := c.Next(ctx, &f); err != nil {
			t.Fatal(err)
		}
		if err := f.Release(); err != nil {
			t.Fatal(err)
		}
	})
}

// A Next that waits (parks in the netpoller), with a cancellable context and
// without, and a producer in another goroutine: nothing allocates on either side.
func TestNoAllocationPerWait(t *testing.T) {
	for _, cancellable := range []bool{false, true} {
		s := memfdRing(t, 1<<20, true)
		c, err := s.Consumer(nil)
		must(t, err)
		p, err := s.Producer()
		must(t, err)
		ctx := context.Background()
		if cancellable {
			var cancel context.CancelFunc
			ctx, cancel = context.WithCancel(ctx)
			defer cancel()
		}
		go1 := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			buf := make([]byte, 256)
			for range go1 {
				if err := p.Send(buf, Meta{}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
		var f Frame
		noAllocs(t, "a waiting Next and a producer goroutine", 500, func() {
			go1 <- struct{}{}
			if err := c.Next(ctx, &f); err != nil {
				t.Fatal(err)
			}
			if err := f.Release(); err != nil {
				t.Fatal(err)
			}
		})
		close(go1)
		<-done
		t.Logf("cancellable=%v: %d parks", cancellable, c.parks)
		if c.parks < 50 {
			t.Errorf("cancellable=%v: only %d of 500 receives waited in the netpoller", cancellable, c.parks)
		}
		p.Close()
		c.Close()
	}
}
