/*
 * The checks of the C tests: CHECK, CHECK_ST and CHECK_MSG record a failed
 * condition (with the library's last error) and let the test go on; RUN runs one
 * test function and prints "ok" or "FAIL" with its name; check_summary prints the
 * last line, "N passed, M failed", and gives the exit status. check_memfd_ring
 * makes a ring; check_open_fds opens one from descriptors.
 */
#ifndef SHMRING_TEST_CHECK_H
#define SHMRING_TEST_CHECK_H

#include <stdio.h>
#include <string.h>

#include "shmring.h"

static int passed, failed, current_ok;

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "  %s:%d: check failed: %s (last error: %s)\n", __FILE__, \
                    __LINE__, #cond, shmring_last_error());                           \
            current_ok = 0;                                                           \
        }                                                                             \
    } while (0)
#define CHECK_ST(call, want) CHECK((call) == (want))
/* The library's last error message contains `needle`. */
#define CHECK_MSG(needle) CHECK(strstr(shmring_last_error(), (needle)) != NULL)

#define RUN(fn)                                                         \
    do {                                                                \
        current_ok = 1;                                                 \
        fn();                                                           \
        if (current_ok) passed++; else failed++;                        \
        printf("%s %s\n", current_ok ? "ok  " : "FAIL", #fn);           \
        fflush(stdout);                                                 \
    } while (0)

/* A fresh memfd ring of `capacity` bytes (the other settings default), labelled
 * `label`. */
static inline shmring_segment *check_memfd_ring(const char *label, uint64_t capacity) {
    shmring_config cfg;
    CHECK_ST(shmring_config_init(&cfg), SHMRING_OK);
    cfg.capacity = capacity;
    char address[128];
    snprintf(address, sizeof address, "memfd:%s", label);
    shmring_segment *s = NULL;
    CHECK_ST(shmring_create(address, &cfg, &s), SHMRING_OK);
    CHECK(s != NULL);
    return s;
}

/* shmring_open of the address "fd:FDS[0],FDS[1],...": the library takes them over. */
static inline shmring_status check_open_fds(const int *fds, size_t n, shmring_segment **out) {
    char address[64] = "fd:";
    for (size_t i = 0; i < n; i++) {
        size_t used = strlen(address);
        snprintf(address + used, sizeof address - used, "%s%d", i ? "," : "", fds[i]);
    }
    return shmring_open(address, 0, out);
}

static inline int check_summary(void) {
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

#endif
