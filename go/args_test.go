package shmring

// Arguments the C ABI takes in narrower or unsigned types are checked first:
// nothing wraps, and the error (ErrInvalidArgument) names the argument.

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func invalidArg(t *testing.T, err error, names ...string) {
	t.Helper()
	if !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("want ErrInvalidArgument, got %v", err)
	}
	for _, n := range names {
		if !strings.Contains(err.Error(), n) {
			t.Fatalf("%q does not say %q", err, n)
		}
	}
}

// A descriptor number beyond a C int is not the descriptor it wraps to: nothing is
// taken over (the descriptor it would wrap to stays open), and the number is named.
func TestDescriptorNumbersNeverWrap(t *testing.T) {
	var p [2]int
	must(t, syscall.Pipe(p[:]))
	defer syscall.Close(p[0])
	defer syscall.Close(p[1])
	for _, address := range []string{fmt.Sprintf("fd:%d", p[0]+1<<32), "fd:-1"} {
		_, err := Open(address, 0)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "is not a descriptor number") {
			t.Fatalf("%s: %v", address, err)
		}
	}
	_, err := OpenTap(fmt.Sprintf("fd:%d", p[1]+1<<32), nil)
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "4294967") {
		t.Fatalf("tap: %v", err)
	}
	for _, fd := range p {
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err != nil {
			t.Fatalf("descriptor %d was taken: %v", fd, err)
		}
	}
}

// A negative duration is not the library's default (0): it is refused, named.
func TestNegativeDurationsAreRefused(t *testing.T) {
	s := memfdRing(t, 1<<20, false)
	for _, set := range []func(*ConsumerOptions) string{
		func(o *ConsumerOptions) string {
			o.LivenessInterval = -time.Millisecond
			return "ConsumerOptions.LivenessInterval"
		},
		func(o *ConsumerOptions) string { o.ClaimTimeout = -time.Second; return "ConsumerOptions.ClaimTimeout" },
		func(o *ConsumerOptions) string { o.LatencyBudget = -1; return "ConsumerOptions.LatencyBudget" },
		func(o *ConsumerOptions) string { o.MaxAge = -1; return "ConsumerOptions.MaxAge" },
	} {
		o := DefaultConsumerOptions()
		name := set(&o)
		_, err := s.Consumer(&o)
		invalidArg(t, err, name, "must not be negative")
	}
	to := DefaultTapOptions()
	to.PollInterval = -time.Millisecond
	_, err := OpenTap("unused", &to)
	invalidArg(t, err, "TapOptions.PollInterval")
	// The hello timeout travels as 32-bit milliseconds: neither negative nor beyond.
	c, err := s.Consumer(nil)
	must(t, err)
	defer c.Close()
	for _, d := range []time.Duration{-time.Second, time.Duration(math.MaxUint32+1) * time.Millisecond} {
		lo := DefaultListenOptions()
		lo.HelloTimeout = d
		_, err := Listen(s, filepath.Join(t.TempDir(), "ring.sock"), &lo)
		invalidArg(t, err, "ListenOptions.HelloTimeout")
	}
}
