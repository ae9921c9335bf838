package shmring

import (
	"encoding/binary"
	"hash/crc32"
)

// The checked record of every cross-process test, in every language (the Rust
// shmring_testkit::record, which the ring-peer program writes;
// python/tests/_record.py, whose checker node/test/py_consumer.py uses;
// node/test/helpers.js): bytes 0..4 the record's index (u32, little-endian), 4..8
// the CRC-32 (IEEE) of every byte after them, then the body, here a xorshift32
// stream seeded by the index. Record i of the Go writer is 64 + (i*7919)%20000
// bytes; ring-peer's is 64 + (i*7919)%65536.

const recordHeader = 8

// checkedRecord is record i as the Go writer makes it.
func checkedRecord(i int) []byte {
	b := make([]byte, 64+(i*7919)%20000)
	fillChecked(b, i)
	return b
}

func fillChecked(b []byte, i int) {
	x := uint32(0x9e3779b9) ^ (uint32(i) * 0x85ebca6b)
	for k := recordHeader; k < len(b); k++ {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[k] = byte(x)
	}
	binary.LittleEndian.PutUint32(b, uint32(i))
	binary.LittleEndian.PutUint32(b[4:], crc32.ChecksumIEEE(b[recordHeader:]))
}

// checked tells whether a record's checksum holds.
func checked(b []byte) bool {
	return len(b) >= recordHeader &&
		binary.LittleEndian.Uint32(b[4:]) == crc32.ChecksumIEEE(b[recordHeader:])
}
