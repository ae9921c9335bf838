/*
 * The Go benchmarks' frame paths (bench_test.go) made from C: the same C calls,
 * without cgo, so that the difference is what the Go binding adds per frame.
 *
 *   go/bench/cgo.sh     (builds and runs this beside `go test -bench`)
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <shmring.h>

/* This process's CPU time (user + system), as the Go benchmarks report it. */
static double cpu(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static shmring_segment *ring(uint64_t capacity) {
    shmring_config cfg;
    shmring_config_init(&cfg);
    cfg.capacity = capacity;
    cfg.eventfd = 1;
    shmring_segment *s;
    if (shmring_create("memfd:bench", &cfg, &s) != SHMRING_OK) {
        fprintf(stderr, "%s\n", shmring_last_error());
        exit(1);
    }
    return s;
}

#define CHECK(call) do { if ((call) != SHMRING_OK) { fprintf(stderr, "%s\n", shmring_last_error()); exit(1); } } while (0)

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    shmring_segment *s = ring(16u << 20);
    shmring_consumer *c;
    shmring_producer *p;
    CHECK(shmring_consumer_attach(s, NULL, &c));
    CHECK(shmring_producer_attach(s, &p));
    double t0 = now(), c0 = cpu();
    for (long i = 0; i < n; i++) { /* Reserve, Commit; Next, Release */
        shmring_reservation r;
        CHECK(shmring_producer_reserve(p, 4096, &r));
        r.data[0] = (uint8_t)i;
        shmring_meta m = {.stream = 1};
        CHECK(shmring_producer_commit(p, &m));
        shmring_frame f;
        CHECK(shmring_consumer_next(c, 0, &f));
        CHECK(shmring_consumer_release(c, &f));
    }
    printf("C FramePath4KiB   %8.1f ns/frame %8.1f cpu-ns/frame\n", (now() - t0) / n * 1e9, (cpu() - c0) / n * 1e9);
    shmring_producer_close(p);
    shmring_consumer_close(c);
    shmring_segment_close(s);

    s = ring(64u << 20);
    CHECK(shmring_consumer_attach(s, NULL, &c));
    CHECK(shmring_producer_attach(s, &p));
    t0 = now();
    c0 = cpu();
    for (long i = 0; i < n; i++) { /* ReserveVideo, Commit; Next, Media, planes, Release */
        shmring_media_header h, g;
        size_t len, size;
        const uint8_t *plane;
        CHECK(shmring_media_video(SHMRING_FORMAT_I420, 1920, 1080, 0, (uint64_t)i, &h));
        CHECK(shmring_media_payload_len(&h, &len));
        shmring_reservation r;
        CHECK(shmring_producer_reserve(p, len, &r));
        CHECK(shmring_media_write(&h, r.data, r.len));
        for (uint32_t k = 0; k < h.planes; k++) CHECK(shmring_media_plane(&h, r.data, r.len, k, &plane, &size));
        r.data[h.offset[0]] = (uint8_t)i;
        shmring_meta m = {.kind = SHMRING_KIND_VIDEO};
        CHECK(shmring_producer_commit(p, &m));
        shmring_frame f;
        CHECK(shmring_consumer_next(c, 0, &f));
        CHECK(shmring_media_parse_for(f.meta.kind, f.data, f.len, &g));
        for (uint32_t k = 0; k < g.planes; k++) CHECK(shmring_media_plane(&g, f.data, f.len, k, &plane, &size));
        CHECK(shmring_consumer_release(c, &f));
    }
    printf("C FramePath1080p  %8.1f ns/frame %8.1f cpu-ns/frame\n", (now() - t0) / n * 1e9, (cpu() - c0) / n * 1e9);
    shmring_producer_close(p);
    shmring_consumer_close(c);
    shmring_segment_close(s);
    return 0;
}
