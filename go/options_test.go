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
		d.TetherStallLimit != 500*time.Millisecond || d.OvertakeAfter != 100*time.Millisecond ||
		d.Spin == 0 {
		t.Fatalf("defaults %+v", d)
	}
	if d.LatencyBudget != 0 || d.MaxAge != 0 || d.ManualReset {
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

// A 64 KiB ring with a consumer that filters (the library's other options) and a
// producer, closed when the test ends.
func filtered(t *testing.T, f Filter) (*Segment, *Consumer, *Producer) {
	t.Helper()
	o := DefaultConsumerOptions()
	o.Filter = f
	return ringWithPeersOpts(t, 64<<10, false, &o)
}

// A filter keeps one stream and releases the others unread: three rings' worth of
// records go through a ring whose consumer keeps a third of them, none dropped.
func TestConsumerFilterKeepsOneStream(t *testing.T) {
	if (ConsumerOptions{}).Filter != (Filter{}) || DefaultConsumerOptions().Filter != (Filter{}) {
		t.Fatal("the zero filter is the default")
	}
	s, c, p := filtered(t, Filter{ByStream: true, Stream: 7})
	must(t, p.SetPolicy(PolicyFail, 0))
	body := make([]byte, 2000)
	kept := 0
	var f Frame
	for i := uint32(0); i < 200; i++ {
		must(t, p.Send(body, Meta{Stream: 6 + i%3, Kind: KindRaw, Flags: i}))
		ok, err := c.TryNext(&f)
		must(t, err)
		if ok {
			if m := f.Meta(); m.Stream != 7 || m.Flags != i {
				t.Fatalf("record %d: %+v", i, m)
			}
			kept++
			must(t, f.Release())
		}
	}
	st, err := s.Stats()
	must(t, err)
	consumed, _ := st.Get("records_consumed")
	filtered, _ := st.Get("records_filtered")
	drops, _ := st.Get("drops_full")
	if kept != 67 || consumed != 67 || filtered != 133 || drops != 0 {
		t.Fatalf("kept %d, consumed %d, filtered %d, dropped %d", kept, consumed, filtered, drops)
	}
}

// A filter by kind and stream together takes only records matching both.
func TestConsumerFilterByKindAndStream(t *testing.T) {
	_, c, p := filtered(t, Filter{ByKind: true, Kind: KindAudio, ByStream: true, Stream: 1})
	sent := []Meta{
		{Stream: 1, Kind: KindVideo}, {Stream: 2, Kind: KindAudio},
		{Stream: 1, Kind: KindAudio, Flags: 9}, {Stream: 0, Kind: KindRaw},
	}
	for _, m := range sent {
		must(t, p.Send([]byte{1, 2, 3}, m))
	}
	var f Frame
	ok, err := c.TryNext(&f)
	must(t, err)
	if !ok || f.Meta() != sent[2] {
		t.Fatalf("got %v %+v, want %+v", ok, f.Meta(), sent[2])
	}
	must(t, f.Release())
	if ok, err := c.TryNext(&f); ok || err != nil {
		t.Fatalf("a second record: %v %v", ok, err)
	}
}
