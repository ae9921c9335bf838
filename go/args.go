package shmring

// Argument checks for what the C ABI takes in a narrower or unsigned type: a
// descriptor (a C int), a duration (unsigned nanoseconds or milliseconds). Checked
// here, so that nothing wraps on the way (descriptor 1<<32 + 1 is not descriptor
// 1, a negative duration is not the default) and the error names the argument.

import (
	"fmt"
	"math"
	"time"
)

// fdArg checks a descriptor number: 0 to math.MaxInt32.
func fdArg(what string, fd int) error {
	if fd < 0 || fd > math.MaxInt32 {
		return misuse(ErrInvalidArgument, fmt.Sprintf("%s must be a descriptor (0 to %d), got %d", what, math.MaxInt32, fd))
	}
	return nil
}

// durationArg checks a duration the library takes: not negative (0 is the
// library's default).
func durationArg(what string, d time.Duration) error {
	if d < 0 {
		return misuse(ErrInvalidArgument, fmt.Sprintf("%s must not be negative (0: the library's default), got %v", what, d))
	}
	return nil
}

// millisArg checks a duration the library takes in whole milliseconds (a
// uint32): 0 to 2^32-1 ms, a nonzero duration below 1 ms counting as 1 ms.
func millisArg(what string, d time.Duration) (uint32, error) {
	if err := durationArg(what, d); err != nil {
		return 0, err
	}
	ms := (d + time.Millisecond - 1) / time.Millisecond
	if ms > math.MaxUint32 {
		return 0, misuse(ErrInvalidArgument, fmt.Sprintf("%s must be at most %v, got %v", what, time.Duration(math.MaxUint32)*time.Millisecond, d))
	}
	return uint32(ms), nil
}
