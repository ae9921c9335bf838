/*
 * C tests of the shmring ABI: round trips, media header, and misuse (NULL and stale
 * handles, double and foreign releases, wrong layout version...), which must give
 * an error code and a message, never a crash. Built three ways by the Makefile:
 * against the shared library, with ASan/UBSan, and against the static library.
 * Last line: "N passed, M failed".
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "frame_pattern.h"
#include "check.h"
#include "shmring.h"

static shmring_segment *make_ring(uint64_t capacity) {
    return check_memfd_ring("test-api", capacity);
}

/* A new ring of `capacity` bytes with its consumer in *c and a producer in *p. */
static shmring_segment *ring_with_ends(uint64_t capacity, shmring_consumer **c,
                                       shmring_producer **p) {
    shmring_segment *s = make_ring(capacity);
    CHECK_ST(shmring_consumer_attach(s, NULL, c), SHMRING_OK);
    CHECK_ST(shmring_producer_attach(s, p), SHMRING_OK);
    return s;
}

/* Closes what ring_with_ends opened. */
static void close_all(shmring_producer *p, shmring_consumer *c, shmring_segment *s) {
    shmring_producer_close(p);
    shmring_consumer_close(c);
    shmring_segment_close(s);
}

static void test_round_trip_video(void) {
    shmring_consumer *c = NULL;
    shmring_producer *p = NULL;
    shmring_segment *s = ring_with_ends(16u << 20, &c, &p);
    for (int i = 0; i < 5; i++) {
        shmring_media_header h;
        CHECK_ST(shmring_media_video(SHMRING_FORMAT_I420, 1920, 1080, 1000 + i, i, &h), SHMRING_OK);
        size_t len = 0;
        CHECK_ST(shmring_media_payload_len(&h, &len), SHMRING_OK);
        CHECK(len == 128 + 3110400);
        shmring_reservation r;
        CHECK_ST(shmring_producer_reserve(p, len, &r), SHMRING_OK);
        CHECK(r.len == len && ((uintptr_t)r.data % 64) == 0);
        CHECK_ST(shmring_media_write(&h, r.data, r.len), SHMRING_OK);
        pattern_fill(&h, r.data);
        shmring_meta m = {.stream = 9, .kind = SHMRING_KIND_VIDEO, .timestamp_ns = 77,
                          .flags = pattern_payload_checksum(r.data, r.len)};
        CHECK_ST(shmring_producer_commit(p, &m), SHMRING_OK);
        shmring_frame f;
        CHECK_ST(shmring_consumer_next(c, 0, &f), SHMRING_OK);
        CHECK(f.len == len && f.meta.stream == 9 && f.meta.timestamp_ns == 77);
        CHECK(f.data == r.data); /* zero copy: the consumer reads where we wrote */
        shmring_media_header g;
        CHECK_ST(shmring_media_parse(f.data, f.len, &g), SHMRING_OK);
        CHECK(memcmp(&g, &h, sizeof g) == 0);
        CHECK(memcmp(f.data, &h, 128) == 0); /* the C struct is the wire format */
        CHECK(pattern_payload_checksum(f.data, f.len) == f.meta.flags);
        const uint8_t *plane;
        size_t psize;
        CHECK_ST(shmring_media_plane(&g, f.data, f.len, 2, &plane, &psize), SHMRING_OK);
        CHECK(psize == 960 * 540 && plane == f.data + g.offset[2]);
        CHECK_ST(shmring_consumer_release(c, &f), SHMRING_OK);
    }
    shmring_stats st;
    CHECK_ST(shmring_segment_stats(s, &st), SHMRING_OK);
    CHECK(st.records_committed == 5 && st.records_consumed == 5 && st.producers == 1 &&
          st.consumer_attached == 1);
    CHECK_ST(shmring_producer_close(p), SHMRING_OK);
    CHECK_ST(shmring_consumer_close(c), SHMRING_OK);
    CHECK_ST(shmring_segment_close(s), SHMRING_OK);
}

static void test_send_abort_out_of_order_release(void) {
    shmring_consumer *c = NULL;
    shmring_producer *p = NULL;
    shmring_segment *s = ring_with_ends(1u << 20, &c, &p);
    shmring_meta m = {.stream = 1, .kind = SHMRING_KIND_RAW};
    CHECK_ST(shmring_producer_send(p, (const uint8_t *)"hello", 5, &m), SHMRING_OK);
    shmring_reservation r;
    CHECK_ST(shmring_producer_reserve(p, 100, &r), SHMRING_OK);
    CHECK_ST(shmring_producer_abort(p), SHMRING_OK);
    CHECK_ST(shmring_producer_send(p, NULL, 0, &m), SHMRING_OK);
    shmring_frame a, b, none;
    CHECK_ST(shmring_consumer_next(c, 0, &a), SHMRING_OK);
    CHECK(a.len == 5 && memcmp(a.data, "hello", 5) == 0);
    /* a bounded wait: the aborted claim in between is skipped within it */
    CHECK_ST(shmring_consumer_next(c, 1000000000, &b), SHMRING_OK);
    CHECK(b.len == 0);
    CHECK_ST(shmring_consumer_next(c, 1000000, &none), SHMRING_TIMEOUT);
    uint64_t out = 0;
    CHECK_ST(shmring_consumer_outstanding(c, &out), SHMRING_OK);
    CHECK(out >= 2); /* held frames (an aborted record between them may count too) */
    CHECK_ST(shmring_consumer_release(c, &b), SHMRING_OK);
    CHECK_ST(shmring_consumer_release(c, &a), SHMRING_OK);
    CHECK_ST(shmring_consumer_outstanding(c, &out), SHMRING_OK);
    CHECK(out == 0);
    shmring_stats st;
    CHECK_ST(shmring_segment_stats(s, &st), SHMRING_OK);
    CHECK(st.records_aborted == 1 && st.skipped_aborted == 1);
    close_all(p, c, s);
}

/* A peer overwrites the shared write cursor: the consumer finds it by itself,
 * resets the ring and carries on; a frame held across the reset stays valid. */
static void test_consumer_recovers_by_itself(void) {
    shmring_consumer *c = NULL;
    shmring_producer *p = NULL;
    shmring_segment *s = ring_with_ends(1u << 20, &c, &p);
    shmring_meta m = {.stream = 1, .kind = SHMRING_KIND_RAW};
    CHECK_ST(shmring_producer_send(p, (const uint8_t *)"held", 4, &m), SHMRING_OK);
    shmring_frame held, f;
    CHECK_ST(shmring_consumer_next(c, 0, &held), SHMRING_OK);
    const uint8_t *base = NULL;
    size_t len = 0;
    CHECK_ST(shmring_segment_mapping(s, &base, &len), SHMRING_OK);
    /* The write cursor is the second cache line of the control block. */
    __atomic_store_n((uint64_t *)(uintptr_t)(base + 64), UINT64_MAX, __ATOMIC_SEQ_CST);
    uint64_t resets = 0;
    char cause[128] = "unset";
    CHECK_ST(shmring_consumer_next(c, 300000000, &f), SHMRING_TIMEOUT);
    CHECK_ST(shmring_consumer_resets(c, &resets, cause, sizeof cause), SHMRING_OK);
    CHECK(resets == 1);
    CHECK(strstr(cause, "write cursor") != NULL);
    CHECK(held.len == 4 && memcmp(held.data, "held", 4) == 0);
    CHECK_ST(shmring_consumer_release(c, &held), SHMRING_OK);
    CHECK_ST(shmring_producer_send(p, (const uint8_t *)"after", 5, &m), SHMRING_OK);
    CHECK_ST(shmring_consumer_next(c, 1000000000, &f), SHMRING_OK);
    CHECK(f.len == 5 && memcmp(f.data, "after", 5) == 0);
    CHECK_ST(shmring_consumer_release(c, &f), SHMRING_OK);
    shmring_stats st;
    CHECK_ST(shmring_segment_stats(s, &st), SHMRING_OK);
    CHECK(st.resets == 1 && st.corruption >= 1);
    close_all(p, c, s);
}

static void test_null_and_bad_handles(void) {
    shmring_reservation r;
    CHECK_ST(shmring_producer_reserve(NULL, 10, &r), SHMRING_ERR_NULL);
    CHECK_MSG("shmring_producer_reserve");
    CHECK_MSG("NULL");
    CHECK_ST(shmring_consumer_next(NULL, 0, NULL), SHMRING_ERR_NULL);
    CHECK_ST(shmring_segment_stats(NULL, NULL), SHMRING_ERR_NULL);
    CHECK_ST(shmring_config_init(NULL), SHMRING_ERR_NULL);
    CHECK_ST(shmring_create(NULL, NULL, NULL), SHMRING_ERR_NULL);
    /* closing NULL is a no-op */
    CHECK_ST(shmring_producer_close(NULL), SHMRING_OK);
    /* a pointer that was never a handle */
    int junk[16] = {0};
    CHECK_ST(shmring_producer_reserve((shmring_producer *)junk, 10, &r), SHMRING_ERR_BAD_HANDLE);
    CHECK_MSG("not a live shmring_producer");
    /* a handle of another type */
    shmring_segment *s = make_ring(1u << 20);
    CHECK_ST(shmring_producer_reserve((shmring_producer *)s, 10, &r), SHMRING_ERR_BAD_HANDLE);
    CHECK_ST(shmring_consumer_close((shmring_consumer *)s), SHMRING_ERR_BAD_HANDLE);
    /* a closed handle, and a double close */
    shmring_producer *p = NULL;
    CHECK_ST(shmring_producer_attach(s, &p), SHMRING_OK);
    CHECK_ST(shmring_producer_close(p), SHMRING_OK);
    CHECK_ST(shmring_producer_reserve(p, 10, &r), SHMRING_ERR_BAD_HANDLE);
    CHECK_ST(shmring_producer_close(p), SHMRING_ERR_BAD_HANDLE);
    CHECK_MSG("closed twice");
    CHECK_ST(shmring_segment_close(s), SHMRING_OK);
    CHECK_ST(shmring_segment_stats(s, &(shmring_stats){0}), SHMRING_ERR_BAD_HANDLE);
    /* status names */
    CHECK(strcmp(shmring_status_name(SHMRING_ERR_NOT_HELD), "SHMRING_ERR_NOT_HELD") == 0);
    CHECK(strcmp(shmring_status_name(12345), "(unknown status)") == 0);
}

static void test_reservation_state_errors(void) {
    shmring_segment *s = make_ring(1u << 20);
    shmring_producer *p = NULL;
    shmring_consumer *c = NULL;
    CHECK_ST(shmring_consumer_attach(s, NULL, &c), SHMRING_OK);
    CHECK_ST(shmring_producer_attach(s, &p), SHMRING_OK);
    shmring_meta m = {0};
    CHECK_ST(shmring_producer_commit(p, &m), SHMRING_ERR_STATE);
    CHECK_MSG("no reservation is open");
    CHECK_ST(shmring_producer_abort(p), SHMRING_ERR_STATE);
    shmring_reservation r;
    CHECK_ST(shmring_producer_reserve(p, 64, &r), SHMRING_OK);
    CHECK_ST(shmring_producer_reserve(p, 64, &r), SHMRING_ERR_STATE);
    CHECK_MSG("already open");
    CHECK_ST(shmring_producer_send(p, (const uint8_t *)"x", 1, &m), SHMRING_ERR_STATE);
    CHECK_ST(shmring_producer_commit(p, NULL), SHMRING_ERR_NULL);
    CHECK_ST(shmring_producer_commit(p, &m), SHMRING_OK); /* still open after the NULL */
    CHECK_ST(shmring_producer_reserve(p, 1u << 20, &r), SHMRING_ERR_TOO_LARGE);
    CHECK_MSG("exceeds max_record");
    CHECK_ST(shmring_producer_set_policy(p, 7, 0), SHMRING_ERR_INVALID_ARGUMENT);
    /* fill the ring, then fail at once */
    CHECK_ST(shmring_producer_set_policy(p, SHMRING_POLICY_FAIL, 0), SHMRING_OK);
    int full = 0;
    for (int i = 0; i < 100 && !full; i++) {
        shmring_status st = shmring_producer_reserve(p, 200000, &r);
        if (st == SHMRING_ERR_FULL) full = 1;
        else CHECK_ST(shmring_producer_commit(p, &m), SHMRING_OK);
    }
    CHECK(full);
    CHECK_MSG("is full");
    CHECK_ST(shmring_producer_reserve_timeout(p, 200000, 2000000, &r), SHMRING_TIMEOUT);
    /* a producer left with an open reservation is aborted at close */
    CHECK_ST(shmring_producer_set_policy(p, SHMRING_POLICY_BLOCK, 1000000000), SHMRING_OK);
    shmring_frame f;
    while (shmring_consumer_next(c, 0, &f) == SHMRING_OK) shmring_consumer_release(c, &f);
    CHECK_ST(shmring_producer_reserve(p, 64, &r), SHMRING_OK);
    CHECK_ST(shmring_producer_close(p), SHMRING_OK);
    CHECK_ST(shmring_consumer_next(c, 0, &f), SHMRING_TIMEOUT);
    shmring_stats st;
    shmring_segment_stats(s, &st);
    CHECK(st.drops_full >= 2 && st.producers == 0);
    shmring_consumer_close(c);
    shmring_segment_close(s);
}

static void test_double_and_foreign_release(void) {
    shmring_segment *s1 = make_ring(1u << 20), *s2 = make_ring(1u << 20);
    shmring_consumer *c1 = NULL, *c2 = NULL;
    shmring_producer *p1 = NULL, *p2 = NULL;
    CHECK_ST(shmring_consumer_attach(s1, NULL, &c1), SHMRING_OK);
    CHECK_ST(shmring_consumer_attach(s2, NULL, &c2), SHMRING_OK);
    CHECK_ST(shmring_producer_attach(s1, &p1), SHMRING_OK);
    CHECK_ST(shmring_producer_attach(s2, &p2), SHMRING_OK);
    shmring_meta m = {0};
    CHECK_ST(shmring_producer_send(p1, (const uint8_t *)"a", 1, &m), SHMRING_OK);
    CHECK_ST(shmring_producer_send(p2, (const uint8_t *)"b", 1, &m), SHMRING_OK);
    shmring_frame f1, f2;
    CHECK_ST(shmring_consumer_next(c1, 0, &f1), SHMRING_OK);
    CHECK_ST(shmring_consumer_next(c2, 0, &f2), SHMRING_OK);
    CHECK(f1.seq == f2.seq); /* same sequence number: only the owner tells them apart */
    CHECK_ST(shmring_consumer_release(c1, &f2), SHMRING_ERR_NOT_HELD);
    CHECK_MSG("another consumer");
    CHECK_ST(shmring_consumer_release(c1, &f1), SHMRING_OK);
    CHECK_ST(shmring_consumer_release(c1, &f1), SHMRING_ERR_NOT_HELD);
    CHECK_MSG("not held");
    shmring_frame forged = f2;
    forged.seq += 1000;
    CHECK_ST(shmring_consumer_release(c2, &forged), SHMRING_ERR_NOT_HELD);
    CHECK_ST(shmring_consumer_release(c2, NULL), SHMRING_ERR_NULL);
    CHECK_ST(shmring_consumer_release(c2, &f2), SHMRING_OK);
    /* a second consumer on a ring is refused */
    shmring_consumer *again = NULL;
    CHECK_ST(shmring_consumer_attach(s1, NULL, &again), SHMRING_ERR_CONSUMER_BUSY);
    CHECK(again == NULL);
    shmring_producer_close(p1);
    shmring_producer_close(p2);
    shmring_consumer_close(c1);
    shmring_consumer_close(c2);
    shmring_segment_close(s1);
    shmring_segment_close(s2);
}

static void test_wrong_layout_version(void) {
    shmring_segment *s = make_ring(1u << 20);
    int fd = -1;
    CHECK_ST(shmring_segment_fd(s, &fd), SHMRING_OK);
    int copy = dup(fd); /* a second descriptor for the attach below */
    uint8_t *map = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(map != MAP_FAILED);
    if (map == MAP_FAILED) return;
    /* identity block: magic "SHMRING1" at 0, layout version (u32) at 8 */
    CHECK(memcmp(map, "SHMRING1", 8) == 0);
    uint32_t version;
    memcpy(&version, map + 8, 4);
    CHECK(version == shmring_layout_version());
    /* A ring of another layout differs in all three identity lines (line 0 and its
     * copies, lines 19 and 20): whoever attaches takes what two of them say. */
    static const size_t lines[3] = {0, 19 * 64, 20 * 64};
    uint32_t bad = version + 1;
    for (int i = 0; i < 3; i++) memcpy(map + lines[i] + 8, &bad, 4);
    shmring_segment *other = NULL;
    CHECK_ST(check_open_fds(&copy, 1, &other), SHMRING_ERR_LAYOUT_MISMATCH);
    CHECK_MSG("layout version");
    CHECK(other == NULL);
    for (int i = 0; i < 3; i++) memcpy(map + lines[i] + 8, &version, 4);
    munmap(map, 4096);
    shmring_segment_close(s);
}

static void test_bad_descriptors(void) {
    shmring_segment *s = NULL;
    CHECK_ST(shmring_open("fd:-1", 0, &s), SHMRING_ERR_CONFIG);
    CHECK_MSG("not a descriptor number");
    CHECK_ST(shmring_open("fd:987654", 0, &s), SHMRING_ERR_CONFIG);
    CHECK_MSG("not open in this process");
    /* an unsealed memfd */
    int fd = memfd_create("unsealed", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    CHECK(fd >= 0 && ftruncate(fd, 1 << 20) == 0);
    CHECK_ST(check_open_fds(&fd, 1, &s), SHMRING_ERR_UNSEALED);
    /* a sealed memfd that is not a ring */
    fd = memfd_create("not-a-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    CHECK(fd >= 0 && ftruncate(fd, 1 << 20) == 0);
    CHECK(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0);
    CHECK_ST(check_open_fds(&fd, 1, &s), SHMRING_ERR_LAYOUT_MISMATCH);
    CHECK_MSG("magic");
    CHECK_ST(shmring_open("shmring-ffi-test-does-not-exist", 0, &s), SHMRING_ERR_NOT_FOUND);
    CHECK_ST(shmring_open("bad name", 0, &s), SHMRING_ERR_CONFIG);
    shmring_config cfg;
    shmring_config_init(&cfg);
    cfg.capacity = 1000;
    CHECK_ST(shmring_create("memfd:x", &cfg, &s), SHMRING_ERR_CONFIG);
}

static void test_media_errors(void) {
    shmring_media_header h;
    CHECK_ST(shmring_media_video(SHMRING_FORMAT_PCM_S16, 10, 10, 0, 0, &h), SHMRING_ERR_INVALID_ARGUMENT);
    CHECK_ST(shmring_media_video(SHMRING_FORMAT_RGBA, 100000, 100000, 0, 0, &h),
             SHMRING_ERR_INVALID_ARGUMENT);
    CHECK_ST(shmring_media_audio(SHMRING_FORMAT_I420, 48000, 2, 480, 0, 0, &h),
             SHMRING_ERR_INVALID_ARGUMENT);
    CHECK_ST(shmring_media_audio(SHMRING_FORMAT_PCM_S16, 48000, 2, 480, 5, 6, &h), SHMRING_OK);
    size_t len = 0;
    CHECK_ST(shmring_media_payload_len(&h, &len), SHMRING_OK);
    CHECK(len == 128 + 480 * 4);
    uint8_t buf[128 + 480 * 4];
    CHECK_ST(shmring_media_write(&h, buf, sizeof buf - 1), SHMRING_ERR_MEDIA);
    CHECK_ST(shmring_media_write(&h, buf, sizeof buf), SHMRING_OK);
    shmring_media_header g;
    CHECK_ST(shmring_media_parse(buf, sizeof buf, &g), SHMRING_OK);
    CHECK(g.channels == 2 && g.samples == 480 && g.pts_ns == 5 && g.sequence == 6);
    CHECK_ST(shmring_media_parse(buf, 100, &g), SHMRING_ERR_MEDIA);
    buf[0] = 'X';
    CHECK_ST(shmring_media_parse(buf, sizeof buf, &g), SHMRING_ERR_MEDIA);
    CHECK_MSG("magic");
    h.planes = 9;
    CHECK_ST(shmring_media_payload_len(&h, &len), SHMRING_ERR_MEDIA);
    h.planes = 1;
    h.format = 99;
    CHECK_ST(shmring_media_write(&h, buf, sizeof buf), SHMRING_ERR_MEDIA);
    const uint8_t *pl;
    size_t ps;
    CHECK_ST(shmring_media_plane(&g, buf, sizeof buf, 1, &pl, &ps), SHMRING_ERR_INVALID_ARGUMENT);
    CHECK_ST(shmring_media_plane(&g, buf, 200, 0, &pl, &ps), SHMRING_ERR_MEDIA);
}

/* The reader's one check: the header must fit the record's kind and the builders' limits. */
static void test_media_parse_for(void) {
    shmring_media_header h, g;
    CHECK_ST(shmring_media_audio(SHMRING_FORMAT_PCM_S16, 48000, 2, 480, 5, 6, &h), SHMRING_OK);
    uint8_t buf[128 + 480 * 4];
    CHECK_ST(shmring_media_write(&h, buf, sizeof buf), SHMRING_OK);
    CHECK_ST(shmring_media_parse_for(SHMRING_KIND_AUDIO, buf, sizeof buf, &g), SHMRING_OK);
    CHECK(memcmp(&g, &h, sizeof g) == 0);
    CHECK_ST(shmring_media_parse_for(SHMRING_KIND_VIDEO, buf, sizeof buf, &g), SHMRING_ERR_MEDIA);
    CHECK_MSG("video record carries audio format");
    CHECK_ST(shmring_media_parse_for(SHMRING_KIND_RAW, buf, sizeof buf, &g), SHMRING_ERR_MEDIA);
    CHECK_MSG("no media header");
    CHECK_ST(shmring_media_parse_for(SHMRING_KIND_AUDIO, buf, 100, &g), SHMRING_ERR_MEDIA);
    CHECK_ST(shmring_media_parse_for(SHMRING_KIND_AUDIO, NULL, sizeof buf, &g), SHMRING_ERR_NULL);
    /* 0 channels: a well-formed header (shmring_media_parse takes it) no builder makes */
    uint32_t zero = 0;
    memcpy(buf + offsetof(shmring_media_header, channels), &zero, sizeof zero);
    CHECK_ST(shmring_media_parse(buf, sizeof buf, &g), SHMRING_OK);
    CHECK_ST(shmring_media_parse_for(SHMRING_KIND_AUDIO, buf, sizeof buf, &g), SHMRING_ERR_MEDIA);
    CHECK_MSG("0 channels");
}

/* The formats' names are the core's: named, parsed back (any case, aliases), and an
 * unknown name refused with the valid ones in the message. */
static void test_media_format_names(void) {
    static const struct { uint32_t format; const char *name; } want[] = {
        {SHMRING_FORMAT_I420, "i420"},       {SHMRING_FORMAT_NV12, "nv12"},
        {SHMRING_FORMAT_RGBA, "rgba"},       {SHMRING_FORMAT_PCM_S16, "pcm_s16"},
        {SHMRING_FORMAT_PCM_F32, "pcm_f32"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const char *n = shmring_media_format_name(want[i].format);
        CHECK(n != NULL && strcmp(n, want[i].name) == 0);
        uint32_t f = 0;
        CHECK_ST(shmring_media_format_parse(want[i].name, &f), SHMRING_OK);
        CHECK(f == want[i].format);
    }
    CHECK(shmring_media_format_name(0) == NULL);
    CHECK(shmring_media_format_name(99) == NULL);
    uint32_t f = 0;
    CHECK_ST(shmring_media_format_parse("NV12", &f), SHMRING_OK);
    CHECK(f == SHMRING_FORMAT_NV12);
    CHECK_ST(shmring_media_format_parse("f32", &f), SHMRING_OK);
    CHECK(f == SHMRING_FORMAT_PCM_F32);
    CHECK_ST(shmring_media_format_parse("yuv9", &f), SHMRING_ERR_INVALID_ARGUMENT);
    CHECK_MSG("i420, nv12, rgba");
    CHECK_ST(shmring_media_format_parse(NULL, &f), SHMRING_ERR_NULL);
    CHECK_ST(shmring_media_format_parse("i420", NULL), SHMRING_ERR_NULL);
}

/* Frame rate, automatic numbering and the end of a stream, across the ring. */
static void test_rate_numbering_and_end_of_stream(void) {
    shmring_consumer *c = NULL;
    shmring_producer *p = NULL;
    shmring_segment *s = ring_with_ends(1u << 20, &c, &p);
    for (int i = 0; i < 3; i++) {
        shmring_media_header h;
        CHECK_ST(shmring_media_video(SHMRING_FORMAT_I420, 64, 32, 1000 + i, SHMRING_SEQUENCE_AUTO,
                                     &h), SHMRING_OK);
        CHECK(h.fps_num == 0 && h.fps_den == 1); /* variable until set */
        h.fps_num = 30000;
        h.fps_den = 1001;
        size_t len = 0;
        CHECK_ST(shmring_media_payload_len(&h, &len), SHMRING_OK);
        shmring_reservation r;
        CHECK_ST(shmring_producer_reserve(p, len, &r), SHMRING_OK);
        CHECK_ST(shmring_media_write(&h, r.data, r.len), SHMRING_OK);
        shmring_meta m = {.stream = 4, .kind = SHMRING_KIND_VIDEO};
        CHECK_ST(shmring_producer_commit(p, &m), SHMRING_OK);
    }
    CHECK_ST(shmring_producer_end_stream(p, 4, SHMRING_KIND_RAW), SHMRING_ERR_INVALID_ARGUMENT);
    CHECK_ST(shmring_producer_end_stream(p, 4, SHMRING_KIND_VIDEO), SHMRING_OK);
    for (uint64_t i = 0; i < 4; i++) {
        shmring_frame f;
        CHECK_ST(shmring_consumer_next(c, 0, &f), SHMRING_OK);
        shmring_media_header g;
        CHECK_ST(shmring_media_read(f.meta.kind, f.data, f.len, &g), SHMRING_OK);
        CHECK(g.sequence == i); /* numbered by the producer: 0, 1, 2, then the end */
        if (i < 3) {
            CHECK(g.flags == 0 && g.fps_num == 30000 && g.fps_den == 1001 && g.planes == 3);
        } else {
            CHECK(g.flags == SHMRING_MEDIA_END_OF_STREAM && g.planes == 0 && g.format == 0);
            CHECK_ST(shmring_media_parse_for(f.meta.kind, f.data, f.len, &g), SHMRING_ERR_MEDIA);
            CHECK_MSG("end-of-stream");
        }
        CHECK_ST(shmring_consumer_release(c, &f), SHMRING_OK);
    }
    /* A rate the core refuses, and an end of stream built by hand, are not written. */
    shmring_media_header h;
    CHECK_ST(shmring_media_video(SHMRING_FORMAT_I420, 64, 32, 0, 0, &h), SHMRING_OK);
    uint8_t buf[128 + 64 * 32 * 2];
    h.fps_num = 30;
    h.fps_den = 0;
    CHECK_ST(shmring_media_write(&h, buf, sizeof buf), SHMRING_ERR_MEDIA);
    CHECK_MSG("frame rate");
    h.fps_den = 1;
    h.flags = SHMRING_MEDIA_END_OF_STREAM;
    CHECK_ST(shmring_media_write(&h, buf, sizeof buf), SHMRING_ERR_MEDIA);
    CHECK_ST(shmring_producer_close(p), SHMRING_OK);
    CHECK_ST(shmring_consumer_close(c), SHMRING_OK);
    CHECK_ST(shmring_segment_close(s), SHMRING_OK);
}

/* Up to `cap` descriptors sent with one SCM_RIGHTS message on `sock`: how many. */
static size_t recv_fds(int sock, int *fds, size_t cap) {
    char byte;
    struct iovec io = {.iov_base = &byte, .iov_len = 1};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(3 * sizeof(int))];
    } u;
    struct msghdr msg = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = u.buf,
                         .msg_controllen = sizeof u.buf};
    if (recvmsg(sock, &msg, MSG_CMSG_CLOEXEC) < 0) return 0;
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    if (!c || c->cmsg_type != SCM_RIGHTS) return 0;
    size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    if (n > cap) n = cap;
    memcpy(fds, CMSG_DATA(c), n * sizeof(int));
    return n;
}

static void test_fd_passing(void) {
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    shmring_config cfg;
    shmring_config_init(&cfg);
    cfg.capacity = 1u << 20;
    cfg.eventfd = 1;
    shmring_segment *s = NULL, *r = NULL;
    CHECK_ST(shmring_create("memfd:pass", &cfg, &s), SHMRING_OK);
    int efd = -1;
    CHECK_ST(shmring_segment_eventfd(s, &efd), SHMRING_OK);
    CHECK(efd >= 0);
    shmring_consumer *c = NULL;
    CHECK_ST(shmring_consumer_attach(s, NULL, &c), SHMRING_OK);
    CHECK_ST(shmring_segment_send(sv[0], s), SHMRING_OK);
    int got[3];
    size_t n_got = recv_fds(sv[1], got, 3);
    CHECK(n_got == 3); /* segment, lock file, eventfd */
    CHECK_ST(check_open_fds(got, n_got, &r), SHMRING_OK);
    shmring_producer *p = NULL;
    CHECK_ST(shmring_producer_attach(r, &p), SHMRING_OK);
    shmring_meta m = {.stream = 4};
    uint32_t ready = 9;
    CHECK_ST(shmring_consumer_arm(c, &ready), SHMRING_OK);
    CHECK(ready == 0);
    CHECK_ST(shmring_producer_send(p, (const uint8_t *)"zz", 2, &m), SHMRING_OK);
    uint64_t n = 0;
    CHECK(read(efd, &n, 8) == 8 && n >= 1); /* the producer signalled the eventfd */
    CHECK_ST(shmring_consumer_disarm(c), SHMRING_OK);
    shmring_frame f;
    CHECK_ST(shmring_consumer_next(c, 0, &f), SHMRING_OK);
    CHECK(f.meta.stream == 4 && f.len == 2);
    CHECK_ST(shmring_consumer_release(c, &f), SHMRING_OK);
    close(sv[0]);
    close(sv[1]);
    shmring_producer_close(p);
    shmring_segment_close(r);
    shmring_consumer_close(c);
    shmring_segment_close(s);
}

struct busy_arg {
    shmring_consumer *c;
    shmring_status st, release_st;
    size_t len;
};

static void *blocked_next(void *arg) {
    struct busy_arg *a = arg;
    shmring_frame f;
    a->st = shmring_consumer_next(a->c, 10000000000ll, &f); /* until the main thread sends */
    if (a->st == SHMRING_OK) {
        a->len = f.len;
        a->release_st = shmring_consumer_release(a->c, &f);
    }
    return NULL;
}

/* Waits until another thread is inside a call on `c` (a call here is refused). */
static int wait_until_busy(shmring_consumer *c) {
    uint64_t out;
    for (int i = 0; i < 5000; i++) {
        if (shmring_consumer_outstanding(c, &out) == SHMRING_ERR_BUSY) return 1;
        usleep(1000);
    }
    return 0;
}

static void test_concurrent_use_is_refused(void) {
    shmring_segment *s = make_ring(1u << 20);
    struct busy_arg a = {0};
    CHECK_ST(shmring_consumer_attach(s, NULL, &a.c), SHMRING_OK);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, blocked_next, &a) == 0);
    /* wait until the other thread is inside shmring_consumer_next */
    CHECK(wait_until_busy(a.c));
    CHECK_ST(shmring_consumer_close(a.c), SHMRING_ERR_BUSY);
    CHECK_MSG("in use by another thread");
    shmring_producer *p = NULL;
    CHECK_ST(shmring_producer_attach(s, &p), SHMRING_OK);
    shmring_meta m = {0};
    CHECK_ST(shmring_producer_send(p, (const uint8_t *)"wake", 4, &m), SHMRING_OK);
    pthread_join(t, NULL);
    CHECK(a.st == SHMRING_OK && a.len == 4 && a.release_st == SHMRING_OK);
    CHECK_ST(shmring_producer_close(p), SHMRING_OK);
    CHECK_ST(shmring_consumer_close(a.c), SHMRING_OK);
    shmring_segment_close(s);
}

/* A frame may be released from any thread, also while another thread waits in
 * shmring_consumer_next: the release is queued and that wait applies it. */
static void test_release_while_another_thread_waits(void) {
    shmring_segment *s = make_ring(1u << 20);
    struct busy_arg a = {0};
    CHECK_ST(shmring_consumer_attach(s, NULL, &a.c), SHMRING_OK);
    shmring_producer *p = NULL;
    CHECK_ST(shmring_producer_attach(s, &p), SHMRING_OK);
    shmring_meta m = {0};
    CHECK_ST(shmring_producer_send(p, (const uint8_t *)"held", 4, &m), SHMRING_OK);
    shmring_frame held;
    CHECK_ST(shmring_consumer_next(a.c, 0, &held), SHMRING_OK);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, blocked_next, &a) == 0);
    CHECK(wait_until_busy(a.c));
    uint64_t out;
    /* The other thread is inside next: the release does not wait for it. */
    CHECK_ST(shmring_consumer_release(a.c, &held), SHMRING_OK);
    CHECK_ST(shmring_producer_send(p, (const uint8_t *)"wake", 4, &m), SHMRING_OK);
    pthread_join(t, NULL);
    CHECK(a.st == SHMRING_OK && a.len == 4 && a.release_st == SHMRING_OK);
    CHECK_ST(shmring_consumer_outstanding(a.c, &out), SHMRING_OK);
    CHECK(out == 0);
    CHECK_ST(shmring_producer_close(p), SHMRING_OK);
    CHECK_ST(shmring_consumer_close(a.c), SHMRING_OK);
    shmring_segment_close(s);
}

static void test_named_ring_and_info(void) {
    char name[64];
    snprintf(name, sizeof name, "shmring-ffi-test-%d", (int)getpid());
    shmring_config cfg;
    shmring_config_init(&cfg);
    cfg.capacity = 1u << 20;
    char create[96];
    snprintf(create, sizeof create, "create:%s", name);
    shmring_segment *s = NULL, *o = NULL;
    shmring_consumer *c = NULL;
    CHECK_ST(shmring_create(create, &cfg, &s), SHMRING_OK);
    CHECK_ST(shmring_consumer_attach(s, NULL, &c), SHMRING_OK);
    /* its consumer is alive: creating it again is refused, saying so */
    CHECK_ST(shmring_create(create, &cfg, &o), SHMRING_ERR_EXISTS);
    CHECK_MSG("its consumer is alive");
    CHECK_ST(shmring_open(name, 0, &o), SHMRING_OK);
    shmring_geometry g;
    CHECK_ST(shmring_segment_geometry(o, &g), SHMRING_OK);
    CHECK(g.capacity == 1u << 20 && g.max_record == (1u << 20) / 4 && g.max_producers == 64);
    uint64_t size = 0;
    CHECK_ST(shmring_config_segment_size(&cfg, &size), SHMRING_OK);
    CHECK(size == g.total_size);
    const uint8_t *base;
    size_t len;
    CHECK_ST(shmring_segment_mapping(o, &base, &len), SHMRING_OK);
    CHECK(len == g.total_size);
    CHECK(strstr(shmring_segment_name(o), name) != NULL);
    CHECK(shmring_segment_name(NULL) == NULL);
    /* The workspace's version, which the Makefile passes as SHMRING_EXPECTED_VERSION. */
    CHECK(strcmp(shmring_version(), SHMRING_EXPECTED_VERSION) == 0);
    shmring_segment_close(o);
    shmring_consumer_close(c);
    shmring_segment_close(s);
    char path[128];
    snprintf(path, sizeof path, "/dev/shm/%s", name);
    CHECK(access(path, F_OK) != 0); /* removed with its creator */
}

/* shmring_create takes a creating address, and the sizes in one place (what
 * "create:" does to a ring there already: test_handoff's test_open_by_address). */
static void test_create(void) {
    shmring_config cfg;
    shmring_config_init(&cfg);
    cfg.capacity = 1u << 20;
    shmring_segment *s = NULL;
    CHECK_ST(shmring_create("cam0", &cfg, &s), SHMRING_ERR_INVALID_ARGUMENT);
    CHECK_MSG("reaches an existing ring");
    CHECK_ST(shmring_create("memfd:x,capacity=2M", &cfg, &s), SHMRING_ERR_INVALID_ARGUMENT);
    CHECK_MSG("in one place");
    CHECK(s == NULL);
    shmring_geometry g;
    CHECK_ST(shmring_create("memfd:x,capacity=2M", NULL, &s), SHMRING_OK);
    CHECK_ST(shmring_segment_geometry(s, &g), SHMRING_OK);
    CHECK(g.capacity == 2u << 20);
    shmring_segment_close(s);
    /* the sizes from cfg, with the text's stale=refuse */
    CHECK_ST(shmring_create("memfd:x,stale=refuse", &cfg, &s), SHMRING_ERR_CONFIG);
    CHECK_MSG("unknown option \"stale\""); /* a memfd is never stale */
}

/* A memfd ring's producers need every descriptor of shmring_segment_descriptors:
 * the segment alone is refused by name (the lock file is how liveness works). */
static void test_descriptors(void) {
    shmring_segment *s = make_ring(1u << 20);
    shmring_consumer *c = NULL;
    CHECK_ST(shmring_consumer_attach(s, NULL, &c), SHMRING_OK);
    int fds[3];
    size_t n = 0;
    CHECK_ST(shmring_segment_descriptors(s, fds, 1, &n), SHMRING_ERR_INVALID_ARGUMENT);
    CHECK(n == 2);
    CHECK_ST(shmring_segment_descriptors(s, fds, 3, &n), SHMRING_OK);
    CHECK(n == 2 && fds[0] >= 0 && fds[1] >= 0 && fds[0] != fds[1]);
    shmring_segment *other = NULL;
    int seg_only = dup(fds[0]);
    CHECK_ST(check_open_fds(&seg_only, 1, &other), SHMRING_ERR_DESCRIPTORS);
    CHECK_MSG("lock file");
    int both[2] = {dup(fds[0]), dup(fds[1])};
    CHECK_ST(check_open_fds(both, 2, &other), SHMRING_OK);
    shmring_producer *p = NULL;
    CHECK_ST(shmring_producer_attach(other, &p), SHMRING_OK);
    shmring_meta m = {.stream = 1, .kind = SHMRING_KIND_RAW};
    CHECK_ST(shmring_producer_send(p, (const uint8_t *)"hi", 2, &m), SHMRING_OK);
    shmring_frame f;
    CHECK_ST(shmring_consumer_next(c, 0, &f), SHMRING_OK);
    CHECK(f.len == 2 && memcmp(f.data, "hi", 2) == 0);
    CHECK_ST(shmring_consumer_release(c, &f), SHMRING_OK);
    /* the segment twice: the second is not a lock file */
    int twice[2] = {dup(fds[0]), dup(fds[0])};
    shmring_segment *bad = NULL;
    CHECK_ST(check_open_fds(twice, 2, &bad), SHMRING_ERR_DESCRIPTORS);
    int three[3] = {dup(fds[0]), dup(fds[1]), dup(fds[1])};
    CHECK_ST(check_open_fds(three, 3, &bad), SHMRING_ERR_DESCRIPTORS);
    CHECK_MSG("more than the ring has");
    CHECK_ST(shmring_open(NULL, 0, &bad), SHMRING_ERR_NULL);
    shmring_producer_close(p);
    shmring_segment_close(other);
    shmring_consumer_close(c);
    shmring_segment_close(s);
}

/* shmring_stats_fields lists every field of the struct, in order, with the
 * snapshot's values; a short array gets the count and the first entries. */
static void test_stats_fields(void) {
    shmring_consumer *c = NULL;
    shmring_producer *p = NULL;
    shmring_segment *s = ring_with_ends(1u << 20, &c, &p);
    shmring_meta m = {0};
    CHECK_ST(shmring_producer_send(p, (const uint8_t *)"abc", 3, &m), SHMRING_OK);
    CHECK_ST(shmring_producer_send(p, (const uint8_t *)"de", 2, &m), SHMRING_OK);
    shmring_stats st;
    CHECK_ST(shmring_segment_stats(s, &st), SHMRING_OK);
    size_t n = 0;
    CHECK_ST(shmring_stats_fields(&st, NULL, 0, &n), SHMRING_OK);
    CHECK(n >= 20);
    shmring_stats_field f[64];
    size_t n2 = 0;
    CHECK(n <= 64);
    CHECK_ST(shmring_stats_fields(&st, f, 64, &n2), SHMRING_OK);
    CHECK(n2 == n);
    int seen = 0;
    for (size_t i = 0; i < n && i < 64; i++) {
        CHECK(f[i].name != NULL && f[i].help != NULL && f[i].unit != NULL && f[i].name[0]);
        if (strcmp(f[i].name, "records_committed") == 0) {
            CHECK(f[i].value == 2 && f[i].kind == SHMRING_FIELD_COUNTER && f[i].unit[0] == 0);
            seen++;
        } else if (strcmp(f[i].name, "bytes_committed") == 0) {
            CHECK(f[i].value == 5 && strcmp(f[i].unit, "bytes") == 0);
            seen++;
        } else if (strcmp(f[i].name, "capacity") == 0) {
            CHECK(f[i].value == (1u << 20) && f[i].kind == SHMRING_FIELD_GAUGE);
            seen++;
        } else if (strcmp(f[i].name, "consumer_attached") == 0) {
            CHECK(f[i].value == 1 && f[i].kind == SHMRING_FIELD_FLAG);
            seen++;
        }
    }
    CHECK(seen == 4);
    CHECK(strcmp(f[0].name, "capacity") == 0); /* the struct's first field */
    shmring_stats_field one[1];
    CHECK_ST(shmring_stats_fields(&st, one, 1, &n2), SHMRING_OK);
    CHECK(n2 == n && strcmp(one[0].name, "capacity") == 0);
    CHECK_ST(shmring_stats_fields(&st, NULL, 1, &n2), SHMRING_ERR_NULL);
    CHECK_ST(shmring_stats_fields(NULL, f, 64, &n2), SHMRING_ERR_NULL);
    CHECK_ST(shmring_stats_fields(&st, f, 64, NULL), SHMRING_ERR_NULL);
    close_all(p, c, s);
}

int main(void) {
    pattern_init();
    RUN(test_round_trip_video);
    RUN(test_send_abort_out_of_order_release);
    RUN(test_consumer_recovers_by_itself);
    RUN(test_null_and_bad_handles);
    RUN(test_reservation_state_errors);
    RUN(test_double_and_foreign_release);
    RUN(test_wrong_layout_version);
    RUN(test_bad_descriptors);
    RUN(test_descriptors);
    RUN(test_media_errors);
    RUN(test_media_parse_for);
    RUN(test_media_format_names);
    RUN(test_rate_numbering_and_end_of_stream);
    RUN(test_fd_passing);
    RUN(test_concurrent_use_is_refused);
    RUN(test_release_while_another_thread_waits);
    RUN(test_named_ring_and_info);
    RUN(test_create);
    RUN(test_stats_fields);
    return check_summary();
}
