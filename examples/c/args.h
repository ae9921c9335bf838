/*
 * args.h: what the example programs share on their command line: "--fds
 * N[,M[,K]]" (a ring's descriptors in the order shmring_segment_descriptors gives
 * them: segment; a memfd ring's lock file; an eventfd ring's eventfd, as a process
 * that inherited them is told), numbers, and how a failed call is reported.
 */
#ifndef SHMRING_EXAMPLE_ARGS_H
#define SHMRING_EXAMPLE_ARGS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shmring.h"

/* The program's name in messages ("producer", "consumer"); each example sets it. */
static const char *example_name = "example";

/* Reports a failed call (its status and the library's message) and exits 2. */
static inline void die_status(const char *what, shmring_status st) {
    fprintf(stderr, "%s: %s: %s: %s\n", example_name, what, shmring_status_name(st),
            shmring_last_error());
    exit(2);
}

/* The value of option `opt`, a non-negative number; exits with usage 1 otherwise. */
static inline long long parse_num(const char *opt, const char *v) {
    char *end = NULL;
    long long n = v ? strtoll(v, &end, 10) : -1;
    if (!v || *v == '\0' || *end != '\0' || n < 0) {
        fprintf(stderr, "%s: %s needs a non-negative number, got '%s'\n", example_name, opt,
                v ? v : "");
        exit(1);
    }
    return n;
}

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

/* Where an example finds its ring: inherited descriptors (--fds N[,M[,K]]), or a
 * named ring (--name NAME) and, for an eventfd ring, its eventfd (--eventfd M). */
typedef struct {
    int fds[3];
    int nfds;
    int efd;
    const char *name;
} ring_args;

#define RING_ARGS_INIT {.nfds = 0, .efd = -1, .name = NULL}

/* If `a` is one of ring_args' options, takes its value `v` into *r and returns 1;
 * 0 otherwise. A missing value exits with usage 1. */
static inline int ring_option(const char *a, const char *v, ring_args *r) {
    if (strcmp(a, "--fds") == 0) {
        r->nfds = parse_fds(a, v, r->fds);
    } else if (strcmp(a, "--eventfd") == 0) {
        r->efd = (int)parse_num(a, v);
    } else if (strcmp(a, "--name") == 0) {
        if (!v) {
            fprintf(stderr, "%s: --name needs a ring name\n", example_name);
            exit(1);
        }
        r->name = v;
    } else {
        return 0;
    }
    return 1;
}

#endif /* SHMRING_EXAMPLE_ARGS_H */
