package shmring

/*
#include <stdlib.h>
#include "glue.h"
*/
import "C"

import (
	"runtime"
	"strconv"
	"sync"
	"time"
	"unsafe"
)

// Kind says what a record is (Meta.Kind); values outside these are the
// application's own.
type Kind uint32

const (
	// KindRaw: opaque bytes.
	KindRaw Kind = C.SHMRING_KIND_RAW
	// KindVideo: a media header, then video planes.
	KindVideo Kind = C.SHMRING_KIND_VIDEO
	// KindAudio: a media header, then interleaved samples.
	KindAudio Kind = C.SHMRING_KIND_AUDIO
)

// Meta is a record's metadata, stored in its header.
type Meta struct {
	// Which stream the record belongs to (one per camera or participant).
	Stream uint32
	Kind   Kind
	// Capture time in ns, CLOCK_MONOTONIC by convention (NowNs).
	TimestampNs uint64
	// Free for the application.
	Flags uint32
}

// NewMeta is metadata stamped with the current monotonic time.
func NewMeta(stream uint32, kind Kind) Meta {
	return Meta{Stream: stream, Kind: kind, TimestampNs: NowNs()}
}

func (m Meta) toC() C.shmring_meta {
	return C.shmring_meta{
		stream:       C.uint32_t(m.Stream),
		kind:         C.uint32_t(m.Kind),
		timestamp_ns: C.uint64_t(m.TimestampNs),
		flags:        C.uint32_t(m.Flags),
	}
}

func metaOf(m *C.shmring_meta) Meta {
	return Meta{Stream: uint32(m.stream), Kind: Kind(m.kind), TimestampNs: uint64(m.timestamp_ns), Flags: uint32(m.flags)}
}

// NowNs is the time on CLOCK_MONOTONIC in nanoseconds (the library's clock for
// record timestamps).
func NowNs() uint64 { return uint64(C.shmring_now_ns()) }

// Policy is what Reserve does when the ring is full.
type Policy uint32

const (
	// PolicyFail fails at once with ErrFull.
	PolicyFail Policy = C.SHMRING_POLICY_FAIL
	// PolicyBlock waits for space up to the policy's timeout, then fails with
	// ErrTimeout (or ErrNoConsumer when no consumer is alive).
	PolicyBlock Policy = C.SHMRING_POLICY_BLOCK
)

// Producer writes records into a ring. Use one per goroutine: calls are
// serialised, and a producer holds at most one reservation at a time. A Reserve
// that waits for space waits in the library (one thread).
type Producer struct {
	mu  sync.Mutex // the C ABI: one thread at a time
	h   *C.shmring_producer
	res Reservation // the one reservation a producer can hold
}

// Producer attaches a producer to the ring (it takes a producer slot, held until
// Close). Its full-ring policy is the library's default until SetPolicy.
func (s *Segment) Producer() (*Producer, error) {
	h, err := s.handle("Segment.Producer")
	if err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	var p *C.shmring_producer
	if err := check(func() int32 { return C.shmring_producer_attach(h, &p) }); err != nil {
		return nil, err
	}
	pr := &Producer{h: p}
	pr.res.p = pr
	return pr, nil
}

// uh is the handle as the glue's frame-path functions take it (see glue.h).
// Call with p.mu held.
func (p *Producer) uh() C.uintptr_t { return C.uintptr_t(uintptr(unsafe.Pointer(p.h))) }

// Close detaches the producer: it aborts an open reservation and frees its slot.
func (p *Producer) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.h == nil {
		return misuse(ErrBadHandle, "Producer.Close: the producer is closed")
	}
	h := p.h
	p.h = nil
	p.res.clear()
	return check(func() int32 { return C.shmring_producer_close(h) })
}

// SetPolicy sets what Reserve does when the ring is full.
func (p *Producer) SetPolicy(policy Policy, timeout time.Duration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.h == nil {
		return misuse(ErrBadHandle, "Producer.SetPolicy: the producer is closed")
	}
	h := p.h
	return check(func() int32 {
		return C.shmring_producer_set_policy(h, C.uint32_t(policy), C.uint64_t(durationNs(timeout)))
	})
}

// Slot is the producer slot this producer occupies.
func (p *Producer) Slot() (uint32, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.h == nil {
		return 0, misuse(ErrBadHandle, "Producer.Slot: the producer is closed")
	}
	h := p.h
	var n C.uint32_t
	err := check(func() int32 { return C.shmring_producer_slot(h, &n) })
	return uint32(n), err
}

func durationNs(d time.Duration) uint64 {
	if d < 0 {
		return 0
	}
	return uint64(d)
}

// Reserve reserves n payload bytes, following the producer's full-ring policy.
// Fill Bytes() in place, then Commit or Abort.
func (p *Producer) Reserve(n int) (*Reservation, error) {
	return p.reserve(n, false, 0)
}

// ReserveTimeout is Reserve waiting at most timeout for space (0: fail at once
// with ErrFull).
func (p *Producer) ReserveTimeout(n int, timeout time.Duration) (*Reservation, error) {
	return p.reserve(n, true, timeout)
}

func (p *Producer) reserve(n int, timed bool, timeout time.Duration) (*Reservation, error) {
	if n < 0 {
		return nil, misuse(ErrInvalidArgument, "Producer.Reserve: negative length")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.h == nil {
		return nil, misuse(ErrBadHandle, "Producer.Reserve: the producer is closed")
	}
	runtime.LockOSThread()
	r := C.go_producer_reserve(p.uh(), C.size_t(n), cint(timed), C.uint64_t(durationNs(timeout)))
	err := errorOf(int32(r.status))
	runtime.UnlockOSThread()
	if err != nil {
		return nil, err
	}
	p.res.open(&r, false)
	return &p.res, nil
}

func cint(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// Format is a media format (the media header's format field).
type Format uint32

const (
	// FormatI420 is planar YUV 4:2:0 (Y, U, V).
	FormatI420 Format = C.SHMRING_FORMAT_I420
	// FormatNV12 is a Y plane, then interleaved UV.
	FormatNV12 Format = C.SHMRING_FORMAT_NV12
	// FormatRGBA is packed 8-bit RGBA.
	FormatRGBA Format = C.SHMRING_FORMAT_RGBA
	// FormatPCMS16 is interleaved signed 16-bit PCM.
	FormatPCMS16 Format = C.SHMRING_FORMAT_PCM_S16
	// FormatPCMF32 is interleaved 32-bit float PCM.
	FormatPCMF32 Format = C.SHMRING_FORMAT_PCM_F32
)

// Formats lists every format the library knows, in the order of their numbers
// (the core's list, read through the C ABI's names).
func Formats() []Format {
	var out []Format
	for f := Format(1); f < 256; f++ {
		if C.shmring_media_format_name(C.uint32_t(f)) != nil {
			out = append(out, f)
		}
	}
	return out
}

// String is the format's name, the one every binding gives and takes: "i420",
// "nv12", "rgba", "pcm_s16", "pcm_f32" (the core's); "format(N)" for a number that
// is no format.
func (f Format) String() string {
	if n := C.shmring_media_format_name(C.uint32_t(f)); n != nil {
		return C.GoString(n)
	}
	return "format(" + strconv.FormatUint(uint64(f), 10) + ")"
}

// ParseFormat is the format named name (a name String gives, or the alias "s16"
// or "f32"; any case). The error, ErrInvalidArgument, lists the valid names.
func ParseFormat(name string) (Format, error) {
	cs := cstring(name)
	defer C.free(unsafe.Pointer(cs))
	var out C.uint32_t
	err := check(func() int32 { return int32(C.shmring_media_format_parse(cs, &out)) })
	return Format(out), err
}

// SequenceAuto as a media record's sequence: the committing producer numbers the
// stream's records 0, 1, 2, ...
const SequenceAuto uint64 = C.SHMRING_SEQUENCE_AUTO

// MediaEndOfStream is the flag of a record that ends its stream (Media.Flags).
const MediaEndOfStream uint32 = C.SHMRING_MEDIA_END_OF_STREAM

// Rate is a video's nominal frame rate, Num / Den frames a second; Rate{} (Num 0):
// variable.
type Rate struct{ Num, Den uint32 }

// ReserveVideo reserves a video record of variable frame rate: ReserveVideoAt
// with Rate{}.
func (p *Producer) ReserveVideo(format Format, width, height uint32, ptsNs, sequence uint64) (*Reservation, error) {
	return p.ReserveVideoAt(format, width, height, Rate{}, ptsNs, sequence)
}

// ReserveVideoAt reserves a video record: the library builds its media header
// (tight strides, aligned planes, the nominal frame rate fps) and writes it; fill
// the planes (Plane) in place, then Commit with Kind KindVideo. sequence
// SequenceAuto: the producer numbers the stream's frames.
func (p *Producer) ReserveVideoAt(format Format, width, height uint32, fps Rate, ptsNs, sequence uint64) (*Reservation, error) {
	den := fps.Den
	if fps.Num == 0 && den == 0 {
		den = 1 // Rate{}: variable, as the header spells it (0/1)
	}
	runtime.LockOSThread()
	r := C.go_media_video(C.uint32_t(format), C.uint32_t(width), C.uint32_t(height),
		C.uint32_t(fps.Num), C.uint32_t(den), C.uint64_t(ptsNs), C.uint64_t(sequence))
	err := errorOf(int32(r.status))
	runtime.UnlockOSThread()
	if err != nil {
		return nil, err
	}
	return p.reserveMedia(r.h)
}

// ReserveAudio reserves an audio record of samples per channel: the library
// builds and writes its media header; fill Plane(0) (interleaved samples) in
// place, then Commit with Kind KindAudio.
func (p *Producer) ReserveAudio(format Format, sampleRate, channels, samples uint32, ptsNs, sequence uint64) (*Reservation, error) {
	runtime.LockOSThread()
	r := C.go_media_audio(C.uint32_t(format), C.uint32_t(sampleRate), C.uint32_t(channels), C.uint32_t(samples),
		C.uint64_t(ptsNs), C.uint64_t(sequence))
	err := errorOf(int32(r.status))
	runtime.UnlockOSThread()
	if err != nil {
		return nil, err
	}
	return p.reserveMedia(r.h)
}

func (p *Producer) reserveMedia(h C.shmring_media_header) (*Reservation, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.h == nil {
		return nil, misuse(ErrBadHandle, "Producer.Reserve: the producer is closed")
	}
	runtime.LockOSThread()
	r := C.go_producer_reserve_media(p.uh(), h, 0, 0)
	err := errorOf(int32(r.status))
	runtime.UnlockOSThread()
	if err != nil {
		return nil, err
	}
	p.res.open(&r, true)
	p.res.media = mediaOf(&h)
	return &p.res, nil
}

// EndStream ends stream `stream` of kind (KindVideo or KindAudio): it commits an
// end-of-stream record, numbered after the stream's last record from this
// producer. Readers end the stream there (shmringsrc sends EOS, `shmring record`
// closes the stream's file). ErrInvalidArgument for another kind; ErrState while
// a reservation is open.
func (p *Producer) EndStream(stream uint32, kind Kind) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.h == nil {
		return misuse(ErrBadHandle, "Producer.EndStream: the producer is closed")
	}
	h := p.h
	return check(func() int32 {
		return C.shmring_producer_end_stream(h, C.uint32_t(stream), C.uint32_t(kind))
	})
}

// Send copies b into the ring as one record: Reserve, copy, Commit.
func (p *Producer) Send(b []byte, m Meta) error {
	r, err := p.Reserve(len(b))
	if err != nil {
		return err
	}
	copy(r.Bytes(), b)
	return r.Commit(m)
}

// plane is where a plane lies in a payload (from shmring_media_plane).
type plane struct{ off, len int }

// maxPlanes is how many planes a media header describes at most (the C struct's).
const maxPlanes = C.GO_PLANES

// Reservation is space reserved in the ring. Its views (Bytes, Plane) are valid
// until Commit, Abort or the producer's Close; then they are nil. The producer
// reuses the one Reservation for its next reservation: do not keep it.
type Reservation struct {
	p       *Producer
	data    []byte
	seq     uint64
	planes  [maxPlanes]plane
	nplanes int
	media   Media
}

func (r *Reservation) open(g *C.go_reserve, media bool) {
	r.data = unsafe.Slice((*byte)(unsafe.Pointer(g.res.data)), int(g.res.len))
	r.seq = uint64(g.res.seq)
	r.nplanes = 0
	r.media = Media{}
	if media {
		for i := range r.planes {
			r.planes[i] = plane{int(g.plane[i].off), int(g.plane[i].len)}
			if r.planes[i].len > 0 {
				r.nplanes = i + 1
			}
		}
	}
}

func (r *Reservation) clear() {
	r.data = nil
	r.nplanes = 0
}

// Bytes is the reserved payload, in the ring: write it in place. A media
// reservation's header is already written at its start.
func (r *Reservation) Bytes() []byte { return r.data }

// Seq is the claim's sequence number (for diagnostics).
func (r *Reservation) Seq() uint64 { return r.seq }

// Planes is how many planes a media reservation has (0 for Reserve).
func (r *Reservation) Planes() int { return r.nplanes }

// Media is the media header the library wrote at the start of a media
// reservation (strides, offsets and sizes of its planes); false for Reserve.
func (r *Reservation) Media() (Media, bool) { return r.media, r.nplanes > 0 }

// Plane is plane i of a media reservation, in the ring (nil if there is none).
func (r *Reservation) Plane(i int) []byte {
	if r.data == nil || i < 0 || i >= r.nplanes {
		return nil
	}
	pl := r.planes[i]
	return r.data[pl.off : pl.off+pl.len : pl.off+pl.len]
}

// Commit publishes the record with m. The views are invalid afterwards.
// ErrAbandoned: the claim was taken from the producer (nothing published).
func (r *Reservation) Commit(m Meta) error {
	p := r.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.h == nil || r.data == nil {
		return misuse(ErrState, "Reservation.Commit: no reservation is open")
	}
	r.clear()
	runtime.LockOSThread()
	st := C.go_producer_commit(p.uh(), m.toC())
	err := errorOf(int32(st))
	runtime.UnlockOSThread()
	return err
}

// Abort gives the space back without publishing anything.
func (r *Reservation) Abort() error {
	p := r.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.h == nil || r.data == nil {
		return misuse(ErrState, "Reservation.Abort: no reservation is open")
	}
	r.clear()
	h := p.h
	return check(func() int32 { return C.shmring_producer_abort(h) })
}
