// Package shmring is the Go binding of shmring, a zero-copy shared-memory ring for
// raw media between processes on one Linux host, over its C ABI (libshmring).
//
// The library keeps every rule (layout, limits, defaults, the protocol); this
// package translates. Producers reserve space in the ring, fill a []byte that lies
// in the ring, and commit it. Consumers get frames whose Data is a []byte view of
// the ring (no copy), held until released. See README.md in this directory.
//
// Views: a Frame's Data and planes, and a Reservation's Bytes and planes, point
// into shared memory. They are valid until the frame is released (or the
// reservation committed or aborted) and their consumer (producer) is open; after
// that the Frame returns nil views and ErrNotHeld, but a slice kept from before
// still points at memory the ring reuses. Do not keep such a slice, and do not
// copy a Frame (go vet reports copies).
//
// Handles have no finalizers: Close what you open. A view into the ring must never
// outlive its mapping because a garbage collector decided so.
package shmring
