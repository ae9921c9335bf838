package shmring

// Argument checks for what the C ABI takes in a narrower or unsigned type: a
// duration (unsigned nanoseconds or milliseconds). Checked here, so that nothing
// wraps on the way (a negative duration is not the default) and the error names
// the argument. (Descriptors travel in an address's text, which the library
// checks.)

import (
	"fmt"
	"math"
	"time"
)

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
