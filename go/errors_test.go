package shmring

import (
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
)

// Every status the C ABI has is a sentinel here: a status added to the C ABI and
// not mapped fails this test. The C ABI's list is read twice: from the library
// itself (shmring_status_name) and from the header's enum.
func TestEveryCStatusHasASentinel(t *testing.T) {
	mapped := map[Status]bool{}
	for _, s := range sentinels {
		if mapped[s] {
			t.Errorf("%s is listed twice", s.Name())
		}
		mapped[s] = true
	}
	names := statusNames()
	if len(names) < 10 {
		t.Fatalf("the library names only %d statuses", len(names))
	}
	for s, name := range names {
		if s == 0 {
			continue // SHMRING_OK is no error
		}
		if !mapped[s] {
			t.Errorf("C status %s (%d) has no Go sentinel", name, s)
		}
	}
	header, err := os.ReadFile(peer(t, "../include/shmring.h", "the repository's C header: run the tests in a checkout"))
	if err != nil {
		t.Fatal(err)
	}
	enum := regexp.MustCompile(`(?s)typedef enum shmring_status \{(.*?)\} shmring_status;`).FindSubmatch(header)
	if enum == nil {
		t.Fatal("include/shmring.h has no enum shmring_status")
	}
	consts := regexp.MustCompile(`(SHMRING_[A-Z_]+) = (-?\d+)`).FindAllSubmatch(enum[1], -1)
	if len(consts) != len(names) {
		t.Errorf("the header's enum has %d statuses, the library names %d", len(consts), len(names))
	}
	for _, m := range consts {
		name := string(m[1])
		if name == "SHMRING_OK" {
			continue
		}
		found := false
		for s := range mapped {
			if s.Name() == name {
				found = true
			}
		}
		if !found {
			t.Errorf("header status %s has no Go sentinel", name)
		}
	}
	// And no sentinel the C ABI does not have.
	for s := range mapped {
		if _, ok := names[s]; !ok {
			t.Errorf("sentinel %d is not a C status", s)
		}
	}
}

func TestErrorsIsAndAs(t *testing.T) {
	err := error(&Error{Status: ErrFull, Msg: "shmring_producer_reserve: ring is full"})
	if !errors.Is(err, ErrFull) || errors.Is(err, ErrTimeout) {
		t.Fatal("errors.Is does not follow the status")
	}
	var e *Error
	if !errors.As(err, &e) || e.Status != ErrFull {
		t.Fatal("errors.As")
	}
	if !strings.Contains(err.Error(), "ring is full") || ErrFull.Error() != "shmring: SHMRING_ERR_FULL" {
		t.Fatalf("messages %q %q", err, ErrFull)
	}
}
