/*
 * producer: writes I420 video frames into a shmring ring, in place (reserve, fill,
 * commit), each starting with the shared media header; meta.flags carries a
 * checksum of the planes (see frame_pattern.h) so consumers can verify them.
 *
 *   producer --fds N[,M[,K]] [options]          attach to inherited descriptors: the
 *                                               ring's, in shmring_segment_descriptors order
 *   producer --name NAME [options]              open a named ring (/dev/shm/NAME)
 *   producer --connect PATH [options]           get the ring from a consumer serving it
 *                                               on a Unix socket (shmring_listen)
 *
 * Options:
 *   --frames N          frames to send (default 100)
 *   --width W --height H  frame size (default 1920x1080)
 *   --stream S          meta.stream (default 1)
 *   --policy block|fail when the ring is full: wait (default) or count a drop and retry
 *   --timeout-ms T      how long one wait for space may take (default 1000)
 *   --sandbox           after attach, enter a seccomp allow-list (sandbox.h): any
 *                       other system call kills the process
 *   --violate           (with --sandbox) make a forbidden system call after entering
 *   --quiet             no summary line
 *
 * Exit status: 0 all frames committed; 1 usage; 2 a shmring error (message on stderr).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "frame_pattern.h"
#include "sandbox.h"
#include "shmring.h"

static void usage(void) {
    fprintf(stderr,
            "usage: producer (--fds N[,M[,K]] | --name NAME [--eventfd M] | --connect PATH) [--frames N] [--width W] "
            "[--height H]\n"
            "                [--stream S] [--policy block|fail] [--timeout-ms T] [--sandbox] "
            "[--violate] [--quiet]\n");
    exit(1);
}

int main(int argc, char **argv) {
    example_name = "producer";
    ring_args ring = RING_ARGS_INIT;
    int sandbox = 0, violate = 0, quiet = 0, fail_policy = 0;
    const char *connect_path = NULL;
    long frames = 100, width = 1920, height = 1080, stream = 1, timeout_ms = 1000;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (ring_option(a, v, &ring)) i++;
        else if (!strcmp(a, "--connect")) { if (!v) usage(); connect_path = v; i++; }
        else if (!strcmp(a, "--frames")) frames = parse_num(a, v), i++;
        else if (!strcmp(a, "--width")) width = parse_num(a, v), i++;
        else if (!strcmp(a, "--height")) height = parse_num(a, v), i++;
        else if (!strcmp(a, "--stream")) stream = parse_num(a, v), i++;
        else if (!strcmp(a, "--timeout-ms")) timeout_ms = parse_num(a, v), i++;
        else if (!strcmp(a, "--policy")) {
            if (v && !strcmp(v, "fail")) fail_policy = 1;
            else if (!v || strcmp(v, "block")) usage();
            i++;
        }
        else if (!strcmp(a, "--sandbox")) sandbox = 1;
        else if (!strcmp(a, "--violate")) violate = 1;
        else if (!strcmp(a, "--quiet")) quiet = 1;
        else usage();
    }
    if ((ring.fds != NULL) + (ring.name != NULL) + (connect_path != NULL) != 1) usage();
    if (width == 0 || height == 0 || width > PATTERN_MAX_ROW || height > 65535) {
        fprintf(stderr, "producer: frame size %ldx%ld is out of range\n", width, height);
        return 1;
    }

    /* --- attach: everything that may allocate or touch files happens here --- */
    pattern_init();
    shmring_segment *seg = NULL;
    char address[300];
    if (connect_path) snprintf(address, sizeof address, "unix:%s", connect_path);
    else ring_address(&ring, address, sizeof address);
    shmring_status st = shmring_open(address, 0, &seg);
    if (st != SHMRING_OK) die_status("attach", st);
    int ring_efd = -1;
    shmring_segment_eventfd(seg, &ring_efd);
    shmring_producer *p = NULL;
    if ((st = shmring_producer_attach(seg, &p)) != SHMRING_OK) die_status("producer attach", st);
    /* The producer keeps the mapping; the segment handle is no longer needed. */
    shmring_segment_close(seg);
    shmring_producer_set_policy(p, SHMRING_POLICY_BLOCK, (uint64_t)timeout_ms * 1000000u);
    shmring_media_header tmpl;
    if ((st = shmring_media_video(SHMRING_FORMAT_I420, (uint32_t)width, (uint32_t)height, 0, 0,
                                  &tmpl)) != SHMRING_OK)
        die_status("media header", st);
    size_t len = 0;
    shmring_media_payload_len(&tmpl, &len);

    if (sandbox) {
        if (sandbox_enter(ring_efd, STDERR_FILENO) != 0) {
            perror("producer: seccomp");
            return 2;
        }
        if (violate) syscall(SYS_getpid); /* not on the list: the kernel kills us */
    }

    /* --- hot path: no allocation, no file access, only the allowed calls --- */
    unsigned long drops = 0, waits = 0;
    for (long i = 0; i < frames; i++) {
        shmring_reservation r;
        for (;;) {
            st = fail_policy ? shmring_producer_reserve_timeout(p, len, 0, &r)
                             : shmring_producer_reserve(p, len, &r);
            if (st == SHMRING_OK) break;
            if (st == SHMRING_ERR_FULL) {
                /* Counted as a drop in the ring's stats; this example then waits. */
                drops++;
                st = shmring_producer_reserve_timeout(p, len, (uint64_t)timeout_ms * 1000000u, &r);
                if (st == SHMRING_OK) break;
            }
            if (st == SHMRING_TIMEOUT) { waits++; continue; }
            die_status("reserve", st);
        }
        shmring_media_header h = tmpl;
        h.pts_ns = shmring_now_ns();
        h.sequence = (uint64_t)i;
        if ((st = shmring_media_write(&h, r.data, r.len)) != SHMRING_OK) die_status("media write", st);
        pattern_fill(&h, r.data);
        shmring_meta meta = {.stream = (uint32_t)stream,
                             .kind = SHMRING_KIND_VIDEO,
                             .timestamp_ns = h.pts_ns,
                             .flags = pattern_payload_checksum(r.data, r.len)};
        if ((st = shmring_producer_commit(p, &meta)) != SHMRING_OK) die_status("commit", st);
    }
    if (!quiet)
        fprintf(stderr, "producer: committed %ld frames of %zu bytes (%lu full, %lu timed-out waits)\n",
                frames, len, drops, waits);
    shmring_producer_close(p);
    return 0;
}
