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
		// A producer attached from the ring's descriptors inherited from the test,
		// from 3 on.
		n, _ := strconv.Atoi(os.Getenv("SHMRING_GO_FDS"))
		address := "fd:3"
		for i := 1; i < n; i++ {
			address += fmt.Sprintf(",%d", 3+i)
		}
		s, err := Open(address, 0)
		if err != nil {
			return err
		}
		defer s.Close()
		p, err := s.Producer()
		if err != nil {
			return err
		}
		defer p.Close()
		n, _ = strconv.Atoi(os.Getenv("SHMRING_GO_COUNT"))
		for i := 0; i < n; i++ {
			if err := p.Send(checkedRecord(i), Meta{Stream: 1, Flags: uint32(i)}); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("unknown role %q", role)
}
