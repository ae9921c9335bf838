package shmring

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestListenConnectObserve(t *testing.T) {
	s := memfdRing(t, 1<<20, true)
	c, err := s.Consumer(nil)
	must(t, err)
	defer c.Close()
	path := filepath.Join(t.TempDir(), "ring.sock")
	l, err := Listen(s, path, nil)
	must(t, err)
	defer l.Close()

	ps, err := Open("unix:"+path, time.Second)
	must(t, err)
	defer ps.Close()
	g, err := ps.Geometry()
	must(t, err)
	if g.Capacity != 1<<20 || !g.Eventfd() {
		t.Fatalf("geometry %+v", g)
	}
	p, err := ps.Producer()
	must(t, err)
	defer p.Close()
	must(t, p.Send([]byte("over the socket"), Meta{Stream: 5}))
	var f Frame
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	must(t, c.Next(ctx, &f))
	if string(f.Data()) != "over the socket" {
		t.Fatalf("%q", f.Data())
	}
	must(t, f.Release())

	o, err := OpenReadOnly("unix:"+path, time.Second)
	must(t, err)
	defer o.Close()
	st, err := o.Stats()
	must(t, err)
	if v, _ := st.Get("records_consumed"); v != 1 {
		t.Fatalf("observer sees %d consumed", v)
	}
	tap, err := o.Tap(nil)
	must(t, err)
	must(t, tap.Close())

	hs, err := l.Stats()
	must(t, err)
	if hs.Producers != 1 || hs.Observers != 1 || hs.Refused != 0 {
		t.Fatalf("listener %+v", hs)
	}
	must(t, l.Close())
	if _, err := Open("unix:"+path, time.Second); !errors.Is(err, ErrNotFound) {
		t.Fatalf("connect after Close: %v", err)
	}
}

func TestListenOptionsAndErrors(t *testing.T) {
	s := memfdRing(t, 1<<20, false)
	c, err := s.Consumer(nil)
	must(t, err)
	defer c.Close()
	o := DefaultListenOptions()
	if o.MaxPending == 0 || o.HelloTimeout == 0 {
		t.Fatalf("defaults %+v", o)
	}
	o.AllowUIDs = []uint32{65534}
	o.AllowGIDs = []uint32{65534, 65533}
	path := filepath.Join(t.TempDir(), "ring.sock")
	l, err := Listen(s, path, &o)
	must(t, err)
	defer l.Close()
	if _, err := Listen(s, path, nil); err == nil {
		t.Fatal("a second listener on a live socket")
	}
	ps, err := Open("unix:"+path, time.Second)
	must(t, err)
	must(t, ps.Close())
	nobody := filepath.Join(t.TempDir(), "nobody.sock")
	if _, err := Open("unix:"+nobody, time.Second); !errors.Is(err, ErrNotFound) ||
		!strings.Contains(err.Error(), "socket "+nobody+" does not exist") || strings.Contains(err.Error(), "segment") {
		t.Fatalf("no socket: %v", err)
	}
	// A socket that cannot be bound is named as a socket too.
	if _, err := Listen(s, filepath.Join(nobody, "x.sock"), nil); !errors.Is(err, ErrOS) ||
		!strings.Contains(err.Error(), "bind failed for socket ") {
		t.Fatalf("bind: %v", err)
	}
	named, err := Create("create:"+ringName(t), nil)
	must(t, err)
	defer named.Close()
	if _, err := Listen(named, filepath.Join(t.TempDir(), "n.sock"), nil); err == nil {
		t.Fatal("a named ring served on a socket")
	}
}

func TestOpenByAddress(t *testing.T) {
	name := fmt.Sprintf("shmring-go-address-%d", os.Getpid())
	s, err := Open("create:"+name+",capacity=1M", 0)
	must(t, err)
	defer s.Close()
	c, err := s.Consumer(nil)
	must(t, err)
	defer c.Close()
	g, err := s.Geometry()
	must(t, err)
	if g.Capacity != 1<<20 {
		t.Fatalf("geometry %+v", g)
	}
	for i, addr := range []string{name, "shm:" + name, "/dev/shm/" + name} {
		ps, err := Open(addr, 0)
		must(t, err)
		p, err := ps.Producer()
		must(t, err)
		must(t, p.Send([]byte("by address"), Meta{Stream: uint32(i)}))
		must(t, p.Close())
		must(t, ps.Close())
	}
	o, err := OpenReadOnly(name, 0)
	must(t, err)
	st, err := o.Stats()
	must(t, err)
	if v, _ := st.Get("records_committed"); v != 3 {
		t.Fatalf("observer sees %d committed", v)
	}
	must(t, o.Close())

	path := filepath.Join(t.TempDir(), "ring.sock")
	m, err := Open("memfd:go-address,capacity=64K", 0)
	must(t, err)
	defer m.Close()
	mc, err := m.Consumer(nil)
	must(t, err)
	defer mc.Close()
	l, err := Listen(m, path, nil)
	must(t, err)
	defer l.Close()
	ps, err := Open("unix:"+path, time.Second)
	must(t, err)
	must(t, ps.Close())

	if _, err := Open("create:"+name, 0); !errors.Is(err, ErrExists) {
		t.Fatalf("a live ring: %v", err)
	}
	if _, err := Open("fd:3,x", 0); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), `"x" is not a descriptor number`) {
		t.Fatalf("bad text: %v", err)
	}
	if _, err := OpenReadOnly("memfd:", 0); !errors.Is(err, ErrConfig) {
		t.Fatalf("read-only create: %v", err)
	}
}
