package shmring

import (
	"errors"
	"testing"
	"time"
)

// The options come from the library: its defaults, its rule for 0 and Never.
func TestConsumerOptionsAreTheLibrarys(t *testing.T) {
	d := DefaultConsumerOptions()
	if d.LivenessInterval != 50*time.Millisecond || d.ClaimTimeout != 500*time.Millisecond ||
		d.TetherStallLimit != 500*time.Millisecond || d.Spin == 0 {
		t.Fatalf("defaults %+v", d)
	}
	if d.OvertakeAfter != 0 || d.LatencyBudget != 0 || d.ManualReset {
		t.Fatalf("off by default: %+v", d)
	}
	s := memfdRing(t, 1<<20, false)
	// A zero duration is the default; a claim timeout of Never is allowed.
	o := ConsumerOptions{Spin: 1, ClaimTimeout: Never, OvertakeAfter: Never}
	c, err := s.Consumer(&o)
	must(t, err)
	must(t, c.Close())
	// Liveness cannot be never: the library says so.
	bad := d
	bad.LivenessInterval = Never
	if _, err := s.Consumer(&bad); !errors.Is(err, ErrConfig) {
		t.Fatalf("liveness interval Never: %v", err)
	}
}
