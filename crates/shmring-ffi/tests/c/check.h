/*
 * The checks of the C tests: CHECK and CHECK_ST record a failed condition (with the
 * library's last error) and let the test go on; RUN runs one test function and
 * prints "ok" or "FAIL" with its name; check_summary prints the last line,
 * "N passed, M failed", and gives the exit status.
 */
#ifndef SHMRING_TEST_CHECK_H
#define SHMRING_TEST_CHECK_H

#include <stdio.h>

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

#define RUN(fn)                                                         \
    do {                                                                \
        current_ok = 1;                                                 \
        fn();                                                           \
        if (current_ok) passed++; else failed++;                        \
        printf("%s %s\n", current_ok ? "ok  " : "FAIL", #fn);           \
        fflush(stdout);                                                 \
    } while (0)

static inline int check_summary(void) {
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

#endif
