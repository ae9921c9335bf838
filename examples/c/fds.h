/*
 * fds.h: parses "--fds N[,M[,K]]", a ring's descriptors in the order
 * shmring_segment_descriptors gives them (segment; a memfd ring's lock file; an
 * eventfd ring's eventfd), as a process that inherited them is told.
 */
#ifndef SHMRING_EXAMPLE_FDS_H
#define SHMRING_EXAMPLE_FDS_H

#include <stdio.h>
#include <stdlib.h>

/* Fills fds[0..3) from "N[,M[,K]]"; returns how many, or exits with usage 1. */
static inline int parse_fds(const char *opt, const char *v, int fds[3]) {
    int n = 0;
    const char *p = v;
    while (p && *p && n < 3) {
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p || x < 0 || x > 1 << 20 || (*end && *end != ',')) break;
        fds[n++] = (int)x;
        p = *end ? end + 1 : end;
    }
    if (!v || n == 0 || (p && *p)) {
        fprintf(stderr, "%s wants up to three descriptor numbers, e.g. 3,4,5\n", opt);
        exit(1);
    }
    return n;
}

#endif
