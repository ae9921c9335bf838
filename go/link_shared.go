//go:build shmring_shared

package shmring

// With `-tags shmring_shared` the binary links libshmring.so (found through
// pkg-config, as a C program would); it must then be found at run time (installed
// in the loader's path, or an rpath).

/*
#cgo pkg-config: shmring
*/
import "C"
