package shmring

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
)

func TestNextEndsWithItsContext(t *testing.T) {
	for _, efd := range []bool{true, false} {
		t.Run(fmt.Sprintf("eventfd=%v", efd), func(t *testing.T) {
			s := memfdRing(t, 1<<20, efd)
			c, err := s.Consumer(nil)
			must(t, err)
			defer c.Close()
			var f Frame

			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
			defer cancel()
			if err := c.Next(ctx, &f); !errors.Is(err, context.DeadlineExceeded) || ctx.Err() == nil {
				t.Fatalf("deadline: %v (the context says %v)", err, ctx.Err())
			}
			ctx, cancel = context.WithCancel(context.Background())
			go func() { time.Sleep(30 * time.Millisecond); cancel() }()
			if err := c.Next(ctx, &f); !errors.Is(err, context.Canceled) {
				t.Fatalf("cancel: %v", err)
			}
			if err := c.Next(ctx, &f); !errors.Is(err, context.Canceled) {
				t.Fatalf("a done context: %v", err)
			}
			if f.Held() {
				t.Fatal("a cancelled Next left a frame")
			}
			// The consumer still works, and a record already there wins over a done context.
			p, err := s.Producer()
			must(t, err)
			defer p.Close()
			must(t, p.Send([]byte("after"), Meta{}))
			if err := c.Next(ctx, &f); err != nil || string(f.Data()) != "after" {
				t.Fatalf("after a cancel: %v %q", err, f.Data())
			}
			must(t, f.Release())
		})
	}
}

func TestCloseWakesAParkedNext(t *testing.T) {
	s := memfdRing(t, 1<<20, true)
	c, err := s.Consumer(nil)
	must(t, err)
	errc := make(chan error)
	go func() {
		var f Frame
		errc <- c.Next(context.Background(), &f)
	}()
	time.Sleep(30 * time.Millisecond)
	must(t, c.Close())
	if err := <-errc; !errors.Is(err, ErrBadHandle) {
		t.Fatalf("Next after Close: %v", err)
	}
	if err := c.Close(); !errors.Is(err, ErrBadHandle) {
		t.Fatalf("second Close: %v", err)
	}
}

// Frames are released from other goroutines while the receiver waits, and two
// goroutines never receive at once (run with -race).
func TestReleaseFromOtherGoroutines(t *testing.T) {
	_, c, p := ringWithPeers(t, 1<<20, true)
	const n = 2000
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		buf := make([]byte, 100)
		for i := 0; i < n; i++ {
			buf[0] = byte(i)
			for {
				err := p.Send(buf, Meta{Flags: uint32(i)})
				if err == nil {
					break
				}
				if !errors.Is(err, ErrTimeout) {
					t.Error(err)
					return
				}
			}
		}
	}()
	frames := make([]Frame, 64)
	free := make(chan int, len(frames))
	for i := range frames {
		free <- i
	}
	var wg sync.WaitGroup
	work := make(chan int)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if frames[i].Data()[0] != byte(frames[i].Flags()) {
					t.Error("wrong bytes")
				}
				if err := frames[i].Release(); err != nil {
					t.Error(err)
				}
				free <- i
			}
		}()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for k := 0; k < n; k++ {
		i := <-free
		for {
			err := c.Next(ctx, &frames[i])
			if err == nil {
				break
			}
			// A worker slow to release the oldest frame holds everything after it:
			// past the claim log's size the consumer says so; wait for releases.
			if !errors.Is(err, ErrTooManyHeld) {
				t.Fatal(err)
			}
			time.Sleep(time.Millisecond)
		}
		if frames[i].Flags() != uint32(k) {
			t.Fatalf("frame %d came as %d", k, frames[i].Flags())
		}
		work <- i
	}
	close(work)
	wg.Wait()
	<-sent
	// A second receiver is refused while the first waits.
	go func() {
		time.Sleep(20 * time.Millisecond)
		var f Frame
		if err := c.Next(ctx, &f); !errors.Is(err, ErrBusy) {
			t.Errorf("a second receiver: %v", err)
		}
		if err := p.Send([]byte("x"), Meta{}); err != nil {
			t.Error(err)
		}
	}()
	var f Frame
	must(t, c.Next(ctx, &f))
	must(t, f.Release())
}

func threads(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/status")
	must(t, err)
	for _, l := range bytes.Split(b, []byte("\n")) {
		if bytes.HasPrefix(l, []byte("Threads:")) {
			n, err := strconv.Atoi(string(bytes.TrimSpace(l[len("Threads:"):])))
			must(t, err)
			return n
		}
	}
	t.Fatal("no Threads: line")
	return 0
}

// Many goroutines waiting on eventfd rings hold no thread each; on futex rings
// (waiting inside the library) they do. Each then gets its record.
func TestParkedReceiversHoldNoThread(t *testing.T) {
	const n = 48
	for _, efd := range []bool{true, false} {
		t.Run(fmt.Sprintf("eventfd=%v", efd), func(t *testing.T) {
			before := threads(t)
			segs := make([]*Segment, n)
			cons := make([]*Consumer, n)
			for i := range segs {
				segs[i] = memfdRing(t, 1<<16, efd)
				c, err := segs[i].Consumer(nil)
				must(t, err)
				cons[i] = c
			}
			var wg sync.WaitGroup
			got := make([]string, n)
			for i := range cons {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					var f Frame
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					defer cancel()
					if err := cons[i].Next(ctx, &f); err != nil {
						t.Error(err)
						return
					}
					got[i] = string(f.Data())
					f.Release()
				}(i)
			}
			time.Sleep(300 * time.Millisecond) // every receiver is waiting by now
			during := threads(t)
			for i, s := range segs {
				p, err := s.Producer()
				must(t, err)
				must(t, p.Send([]byte(fmt.Sprint(i)), Meta{}))
				p.Close()
			}
			wg.Wait()
			for i := range got {
				if got[i] != fmt.Sprint(i) {
					t.Fatalf("receiver %d got %q", i, got[i])
				}
				cons[i].Close()
			}
			t.Logf("threads: %d before, %d with %d receivers waiting", before, during, n)
			if efd && during-before > 8 {
				t.Errorf("%d receivers parked on eventfds took %d threads", n, during-before)
			}
			if !efd && during-before < n/2 {
				t.Errorf("the check cannot tell: %d receivers waiting in the library took only %d threads", n, during-before)
			}
		})
	}
}
