package shmring

/*
#include "glue.h"
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// noCopy makes go vet's copylocks check report copies of a Frame: a copy would
// keep a view the original's Release invalidates.
type noCopy struct{}

func (*noCopy) Lock()   {}
func (*noCopy) Unlock() {}

// Frame is a record handed out by a Consumer: its payload in place in the ring.
// Receive into it with Consumer.Next, use it, Release it; then it can receive
// again. Frames may be released in any order and from any goroutine. Do not copy
// a Frame.
//
// After Release (or the consumer's Close) the views are gone: Data and Plane give
// nil, Media and Release give ErrNotHeld. A slice taken from Data before Release
// still points into the ring, at bytes producers reuse: do not keep one.
type Frame struct {
	_    noCopy
	c    *Consumer
	raw  C.shmring_frame
	data []byte

	parsed  int8 // 0: not yet; 1: media header valid; -1: not a media record
	media   Media
	planes  [maxPlanes]plane
	nplanes int
	perr    error
}

func (f *Frame) hold(c *Consumer, raw *C.shmring_frame) {
	f.c = c
	f.raw = *raw
	f.data = unsafe.Slice((*byte)(unsafe.Pointer(raw.data)), int(raw.len))
	f.parsed = 0
	f.nplanes = 0
	f.perr = nil
}

// Held tells whether the Frame holds a frame (received and not yet released).
func (f *Frame) Held() bool { return f.c != nil }

// Data is the payload, in the ring (read-only by contract: a producer could still
// change it, so copy what you validate before trusting it). nil once released, or
// once its consumer is closed.
func (f *Frame) Data() []byte {
	if f.c == nil || f.c.closing.Load() {
		return nil
	}
	return f.data
}

// Len is the payload's length (0 once released).
func (f *Frame) Len() int { return len(f.Data()) }

// Meta is the record's metadata.
func (f *Frame) Meta() Meta { return metaOf(&f.raw.meta) }

// Stream, Kind, TimestampNs and Flags are the record's metadata.
func (f *Frame) Stream() uint32      { return uint32(f.raw.meta.stream) }
func (f *Frame) Kind() Kind          { return Kind(f.raw.meta.kind) }
func (f *Frame) TimestampNs() uint64 { return uint64(f.raw.meta.timestamp_ns) }
func (f *Frame) Flags() uint32       { return uint32(f.raw.meta.flags) }

// Seq is the record's claim sequence number.
func (f *Frame) Seq() uint64 { return uint64(f.raw.seq) }

// Release gives the frame's space back to the ring (frames may be released in any
// order). The Frame's views are gone afterwards and it can receive again.
// ErrNotHeld if it holds no frame.
func (f *Frame) Release() error {
	c := f.c
	if c == nil {
		return misuse(ErrNotHeld, "Frame.Release: the frame is not held (released already, or never received)")
	}
	err := c.release(f)
	f.c = nil
	f.raw = C.shmring_frame{}
	f.data = nil
	f.parsed = 0
	f.nplanes = 0
	f.perr = nil
	return err
}

// Media is the record's media header, read and validated once by the library
// (shmring_media_read with the record's kind): ErrMedia for a record of another
// kind or a malformed header. A record that ends its stream (Producer.EndStream)
// gives a Media whose EndOfStream is true, with no planes. The values are copies:
// a producer changing the payload cannot change them.
func (f *Frame) Media() (Media, error) {
	if f.c == nil {
		return Media{}, misuse(ErrNotHeld, "Frame.Media: the frame is not held")
	}
	if f.c.closing.Load() {
		return Media{}, f.c.closedErr("Frame.Media") // its bytes may be unmapped
	}
	if f.parsed == 0 {
		runtime.LockOSThread()
		r := C.go_media_read(f.raw.meta.kind, C.uintptr_t(uintptr(unsafe.Pointer(f.raw.data))), f.raw.len)
		err := errorOf(int32(r.status))
		runtime.UnlockOSThread()
		if err != nil {
			f.parsed, f.perr = -1, err
		} else {
			f.parsed = 1
			f.media = mediaOf(&r.h)
			f.nplanes = 0
			for i := range f.planes {
				f.planes[i] = plane{int(r.plane[i].off), int(r.plane[i].len)}
				if f.planes[i].len > 0 {
					f.nplanes = i + 1
				}
			}
		}
	}
	if f.parsed < 0 {
		return Media{}, f.perr
	}
	return f.media, nil
}

// Plane is plane i of a media record (video: Y, U, V for I420; audio: the
// samples), in the ring, where the library's shmring_media_plane says it lies.
// nil (and the reason) if the frame is released, not a valid media record, or has
// no plane i.
func (f *Frame) Plane(i int) ([]byte, error) {
	if _, err := f.Media(); err != nil {
		return nil, err
	}
	if i < 0 || i >= f.nplanes {
		return nil, misuse(ErrInvalidArgument, "Frame.Plane: no such plane")
	}
	pl := f.planes[i]
	return f.data[pl.off : pl.off+pl.len : pl.off+pl.len], nil
}

// Media is a media header (video or audio), as the library parsed or built it:
// the C struct shmring_media_header, field for field (magic, version and sizes
// are the library's to check).
type Media struct {
	Format Format
	Width  uint32
	Height uint32
	// Audio: samples per second, channels, and samples per channel.
	SampleRate uint32
	Channels   uint32
	Samples    uint32
	PtsNs      uint64
	// Per stream id and kind: 0, 1, 2, ... (at an end of stream: the number the
	// stream's next record would have had).
	Sequence uint64
	// Planes used (video 1..3, audio 1; 0 at an end of stream).
	Planes uint32
	// MediaEndOfStream or 0.
	Flags uint32
	// Bytes per row of each plane (audio: bytes per sample frame).
	Stride [maxPlanes]uint32
	// Byte offset of each plane from the payload's start.
	Offset [maxPlanes]uint32
	// Byte size of each plane.
	Size [maxPlanes]uint32
	// Video: the nominal frame rate FpsNum / FpsDen; FpsNum 0: variable.
	FpsNum uint32
	FpsDen uint32
}

// EndOfStream says the record ends its stream: no record of this stream id and
// kind follows from its producer.
func (m *Media) EndOfStream() bool { return m.Flags&MediaEndOfStream != 0 }

func mediaOf(h *C.shmring_media_header) Media {
	m := Media{
		Format:     Format(h.format),
		Width:      uint32(h.width),
		Height:     uint32(h.height),
		SampleRate: uint32(h.sample_rate),
		Channels:   uint32(h.channels),
		Samples:    uint32(h.samples),
		PtsNs:      uint64(h.pts_ns),
		Sequence:   uint64(h.sequence),
		Planes:     uint32(h.planes),
		Flags:      uint32(h.flags),
		FpsNum:     uint32(h.fps_num),
		FpsDen:     uint32(h.fps_den),
	}
	for i := range m.Stride {
		m.Stride[i] = uint32(h.stride[i])
		m.Offset[i] = uint32(h.offset[i])
		m.Size[i] = uint32(h.size[i])
	}
	return m
}

// mediaHeaderFields names the fields of the C struct (for the test that checks
// Media translates every one of them).
func mediaHeaderFields() []string {
	return cStructFields(C.shmring_media_header{})
}
