package shmring

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"
)

// A producer process attached from inherited descriptors (Open of fd:), handed over
// by syscall.StartProcess from Fds; every byte checked.
func TestProducerFromInheritedDescriptors(t *testing.T) {
	for _, efd := range []bool{false, true} {
		t.Run(fmt.Sprintf("eventfd=%v", efd), func(t *testing.T) {
			s := memfdRing(t, 1<<20, efd)
			c, err := s.Consumer(nil)
			must(t, err)
			defer c.Close()
			fds, err := s.Fds()
			must(t, err)
			// A memfd ring: the segment and its lock file, and the eventfd.
			if len(fds) != map[bool]int{false: 2, true: 3}[efd] {
				t.Fatalf("fds %v", fds)
			}
			const n = 300
			files := []uintptr{0, 1, 2}
			for _, fd := range fds {
				files = append(files, uintptr(fd))
			}
			env := append(os.Environ(), "SHMRING_GO_CHILD=attach-fds", fmt.Sprintf("SHMRING_GO_COUNT=%d", n),
				fmt.Sprintf("SHMRING_GO_FDS=%d", len(fds)))
			pid, err := syscall.ForkExec(os.Args[0], []string{os.Args[0]}, &syscall.ProcAttr{Env: env, Files: files})
			must(t, err)
			proc, _ := os.FindProcess(pid)
			t.Cleanup(func() { proc.Kill(); proc.Wait() })

			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var f Frame
			for i := 0; i < n; i++ {
				must(t, c.Next(ctx, &f))
				if f.Flags() != uint32(i) || f.Len() != len(checkedRecord(i)) || !checked(f.Data()) {
					t.Fatalf("record %d: flags %d, %d bytes, checksum %v", i, f.Flags(), f.Len(), checked(f.Data()))
				}
				must(t, f.Release())
			}
			st, err := proc.Wait()
			must(t, err)
			if !st.Success() {
				t.Fatalf("the child failed: %v", st)
			}
			// The parent's descriptors are untouched: the ring still has its consumer.
			stats, err := s.Stats()
			must(t, err)
			if v, _ := stats.Get("consumer_attached"); v != 1 {
				t.Fatal("the consumer lost its liveness lock")
			}
		})
	}
}
