//go:build !shmring_shared

package shmring

// By default libshmring.a is linked into the Go binary: one file to deploy, with
// no library search path to set, needing only the C library and libgcc_s at run
// time. pkg-config finds the library and its system libraries (`--static`); the
// linker is told to take the archive, not libshmring.so, from the same directory.
// Build with `-tags shmring_shared` to link libshmring.so instead (link_shared.go).

/*
#cgo pkg-config: --static shmring
#cgo LDFLAGS: -Wl,-Bstatic -lshmring -Wl,-Bdynamic -Wl,--as-needed
*/
import "C"
