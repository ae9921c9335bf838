// Package pattern is the picture and sound the producer example writes, and that
// the tests check byte for byte in what consumers (Go, Rust, Python) received.
//
// Row r of plane p of video frame n is the bytes x + 3r + 7p + 11n (mod 256) for
// x = 0, 1, ...; byte k of audio packet n is k + 13n (mod 256). Drawing a row is
// one copy from a precomputed ramp: no allocation per frame.
package pattern

// ramp is 0..255 twice, then enough to slice any row up to MaxRow bytes.
var ramp = func() []byte {
	b := make([]byte, 256+MaxRow)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}()

// MaxRow is the longest row Row can give.
const MaxRow = 16384

// Row is row r of plane p of frame n, w bytes (w <= MaxRow).
func Row(n uint64, p, r, w int) []byte {
	off := (3*r + 7*p + int(n%256)*11) % 256
	return ramp[off : off+w]
}

// VideoByte is byte x of that row.
func VideoByte(n uint64, p, r, x int) byte {
	return byte(x + 3*r + 7*p + 11*int(n%256))
}

// Fill draws rows of w bytes into plane (stride bytes apart, rows of them).
func Fill(plane []byte, n uint64, p, w, rows, stride int) {
	for r := 0; r < rows; r++ {
		copy(plane[r*stride:r*stride+w], Row(n, p, r, w))
	}
}

// Audio fills audio packet n.
func Audio(b []byte, n uint64) {
	off := int(n%256) * 13 % 256
	for len(b) > 0 {
		k := copy(b, ramp[off:off+256])
		b = b[k:]
	}
}

// AudioByte is byte k of audio packet n.
func AudioByte(n uint64, k int) byte { return byte(k + 13*int(n%256)) }
