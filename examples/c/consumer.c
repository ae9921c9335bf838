/*
 * consumer: reads frames from a shmring ring (zero copy), checks each video/audio
 * frame's media header and the checksum its producer put in meta.flags
 * (frame_pattern.h), and releases it.
 *
 *   consumer --fds N[,M[,K]] [options]           attach to inherited descriptors: the
 *                                                ring's, in shmring_segment_descriptors order
 *   consumer --name NAME [--create] [options]    open (or create) /dev/shm/NAME; a
 *                                                ring of that name left by a crash is
 *                                                replaced
 *
 * Options:
 *   --frames N        stop after N frames (default: run until --timeout-ms idles)
 *   --timeout-ms T    give up when no frame arrives for T ms (default 5000)
 *   --capacity BYTES  ring size with --create (default 64 MiB)
 *   --quiet           no per-frame lines
 *
 * With --create the ring is removed on exit. Prints "ready" on stdout once attached.
 * Exit status: 0 every frame verified (and N received); 1 usage; 2 shmring error;
 * 3 a frame failed verification; 4 timed out before N frames.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "frame_pattern.h"
#include "shmring.h"

static void usage(void) {
    fprintf(stderr,
            "usage: consumer (--fds N[,M[,K]] | --name NAME [--eventfd M] [--create [--capacity BYTES]])\n"
            "                [--frames N] [--timeout-ms T] [--quiet]\n");
    exit(1);
}

int main(int argc, char **argv) {
    example_name = "consumer";
    ring_args ring = RING_ARGS_INIT;
    int create = 0, quiet = 0;
    long long frames = -1, timeout_ms = 5000, capacity = 64ll << 20;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (ring_option(a, v, &ring)) i++;
        else if (!strcmp(a, "--frames")) frames = parse_num(a, v), i++;
        else if (!strcmp(a, "--timeout-ms")) timeout_ms = parse_num(a, v), i++;
        else if (!strcmp(a, "--capacity")) capacity = parse_num(a, v), i++;
        else if (!strcmp(a, "--create")) create = 1;
        else if (!strcmp(a, "--quiet")) quiet = 1;
        else usage();
    }
    if ((ring.fds == NULL) == (ring.name == NULL) || (create && !ring.name)) usage();

    shmring_segment *seg = NULL;
    shmring_status st;
    char address[300];
    if (create) {
        shmring_config cfg;
        shmring_config_init(&cfg);
        cfg.capacity = (uint64_t)capacity;
        snprintf(address, sizeof address, "create:%s", ring.name);
        st = shmring_create(address, &cfg, &seg);
    } else {
        st = shmring_open(ring_address(&ring, address, sizeof address), 0, &seg);
    }
    if (st != SHMRING_OK) die_status("attach", st);
    shmring_consumer *c = NULL;
    if ((st = shmring_consumer_attach(seg, NULL, &c)) != SHMRING_OK) die_status("consumer attach", st);
    printf("ready\n");
    fflush(stdout);

    long long got = 0, bad = 0;
    uint64_t resets_seen = 0;
    uint64_t bytes = 0;
    int rc = 0;
    while (frames < 0 || got < frames) {
        shmring_frame f;
        st = shmring_consumer_next(c, timeout_ms * 1000000ll, &f);
        /* The consumer resets a ring a peer scribbled on by itself: say so. */
        uint64_t resets = 0;
        char cause[128];
        if (shmring_consumer_resets(c, &resets, cause, sizeof cause) == SHMRING_OK &&
            resets != resets_seen) {
            fprintf(stderr, "consumer: corruption found (%s); the ring was reset, consuming goes on\n",
                    cause);
            resets_seen = resets;
        }
        if (st == SHMRING_TIMEOUT) {
            if (frames >= 0) {
                fprintf(stderr, "consumer: no frame for %lld ms after %lld of %lld\n", timeout_ms, got,
                        frames);
                rc = 4;
            }
            break;
        }
        if (st != SHMRING_OK) die_status("next", st);
        got++;
        bytes += f.len;
        const char *verdict = "raw";
        if (f.meta.kind == SHMRING_KIND_VIDEO || f.meta.kind == SHMRING_KIND_AUDIO) {
            shmring_media_header h;
            if (shmring_media_parse_for(f.meta.kind, f.data, f.len, &h) != SHMRING_OK) {
                fprintf(stderr, "consumer: frame %lld: %s\n", got, shmring_last_error());
                verdict = "bad header";
                bad++;
            } else if (pattern_payload_checksum(f.data, f.len) != f.meta.flags) {
                verdict = "bad checksum";
                bad++;
            } else {
                verdict = "ok";
            }
            if (!quiet)
                printf("frame stream=%u seq=%llu %ux%u format=%u len=%zu: %s\n", f.meta.stream,
                       (unsigned long long)h.sequence, h.width, h.height, h.format, f.len, verdict);
        } else if (!quiet) {
            printf("frame stream=%u kind=%u len=%zu\n", f.meta.stream, f.meta.kind, f.len);
        }
        if ((st = shmring_consumer_release(c, &f)) != SHMRING_OK) die_status("release", st);
    }
    shmring_stats s;
    shmring_segment_stats(seg, &s);
    printf("consumed %lld frames, %llu bytes, %lld failed verification; ring: %llu committed, "
           "%llu dropped full\n",
           got, (unsigned long long)bytes, bad, (unsigned long long)s.records_committed,
           (unsigned long long)s.drops_full);
    shmring_consumer_close(c);
    shmring_segment_close(seg);
    if (bad) return 3;
    return rc;
}
