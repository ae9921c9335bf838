package shmring

import (
	"fmt"
	"os"
	"strconv"
	"testing"
)

// The test binary doubles as a child process: with SHMRING_GO_CHILD set it runs
// that child's part instead of the tests.
func TestMain(m *testing.M) {
	if role := os.Getenv("SHMRING_GO_CHILD"); role != "" {
		if err := child(role); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	removeExamples()
	os.Exit(code)
}

func child(role string) error {
	switch role {
	case "attach-fds":
		// A producer attached from descriptors 3 (and 4) inherited from the test.
		fds := []int{3}
		if os.Getenv("SHMRING_GO_EVENTFD") == "1" {
			fds = append(fds, 4)
		}
		s, err := AttachFds(fds...)
		if err != nil {
			return err
		}
		defer s.Close()
		p, err := s.Producer()
		if err != nil {
			return err
		}
		defer p.Close()
		n, _ := strconv.Atoi(os.Getenv("SHMRING_GO_COUNT"))
		for i := 0; i < n; i++ {
			if err := p.Send(checkedRecord(i), Meta{Stream: 1, Flags: uint32(i)}); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("unknown role %q", role)
}
