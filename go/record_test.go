package shmring

import "encoding/binary"

// The cross-process record format of the Node and Go tests (node/examples/
// ring_peer.rs writes it, node/test/py_consumer.py checks it): record i is 64 +
// (i * 7919) % 65536 bytes (the Go writer uses % 20000, as the Node one), a
// xorshift pattern seeded by i after 4 bytes holding the FNV-1a (32-bit) checksum
// of the rest, little-endian; flags i.

func fnv1a(b []byte) uint32 {
	h := uint32(0x811c9dc5)
	for _, x := range b {
		h = (h ^ uint32(x)) * 0x01000193
	}
	return h
}

// checkedRecord is record i as the Go writer makes it.
func checkedRecord(i int) []byte {
	b := make([]byte, 64+(i*7919)%20000)
	fillChecked(b, i)
	return b
}

func fillChecked(b []byte, i int) {
	x := uint32(0x9e3779b9) ^ (uint32(i) * 0x85ebca6b)
	for k := 4; k < len(b); k++ {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[k] = byte(x)
	}
	binary.LittleEndian.PutUint32(b, fnv1a(b[4:]))
}

// checked tells whether a record's checksum holds.
func checked(b []byte) bool {
	return len(b) >= 4 && binary.LittleEndian.Uint32(b) == fnv1a(b[4:])
}
