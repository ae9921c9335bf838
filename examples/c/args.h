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

/* Where an example finds its ring: inherited descriptors (--fds N[,M[,K]]), or a
 * named ring (--name NAME) and, for an eventfd ring, its eventfd (--eventfd M). */
typedef struct {
    const char *fds;
    int efd;
    const char *name;
} ring_args;

#define RING_ARGS_INIT {.fds = NULL, .efd = -1, .name = NULL}

/* The ring's address as shmring_open takes it, written to buf: "fd:N,M,K",
 * "NAME" or "NAME,eventfd=M" (the library checks it). */
static inline const char *ring_address(const ring_args *r, char *buf, size_t n) {
    if (r->fds) snprintf(buf, n, "fd:%s", r->fds);
    else if (r->efd >= 0) snprintf(buf, n, "%s,eventfd=%d", r->name, r->efd);
    else snprintf(buf, n, "%s", r->name);
    return buf;
}

/* If `a` is one of ring_args' options, takes its value `v` into *r and returns 1;
 * 0 otherwise. A missing value exits with usage 1. */
static inline int ring_option(const char *a, const char *v, ring_args *r) {
    if (strcmp(a, "--fds") == 0) {
        if (!v) {
            fprintf(stderr, "%s: --fds needs descriptor numbers, e.g. 3,4\n", example_name);
            exit(1);
        }
        r->fds = v;
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
