/*
 * C tests of a ring's further readers: tethered consumers (every record the ring's
 * consumer gets, space held until they release, detached when they stop
 * releasing), taps (read-only copies, a buffer too small, filters, losses
 * counted), and one reader of any kind (shmring_reader). Built against the
 * shared library and with ASan/UBSan by the Makefile.
 * Last line: "N passed, M failed".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "shmring.h"

#define MS 1000000LL
/* Bounds of the loops that wait for something the library does by itself: far
 * above what it needs, so only a failure reaches them. */
#define PATIENCE 2000

static shmring_segment *make_ring(uint64_t capacity) {
    return check_memfd_ring("test-readers", capacity);
}

/* Record i: `len` bytes, byte j = (i + j) & 0xff, stream i. */
static int send_record(shmring_producer *p, uint32_t i, size_t len) {
    uint8_t buf[4096];
    for (size_t j = 0; j < len; j++) buf[j] = (uint8_t)(i + j);
    shmring_meta m = {.stream = i, .kind = SHMRING_KIND_RAW, .timestamp_ns = 1000 + i};
    return shmring_producer_send(p, buf, len, &m);
}

static int is_record(const uint8_t *data, size_t len, uint32_t i, size_t want_len) {
    if (len != want_len) return 0;
    for (size_t j = 0; j < len; j++)
        if (data[j] != (uint8_t)(i + j)) return 0;
    return 1;
}

/* Takes the next frame (waiting up to 1 s), checks it is record i, releases it. */
static void take(shmring_consumer *c, uint32_t i, size_t len) {
    shmring_frame f;
    CHECK_ST(shmring_consumer_next(c, 1000 * MS, &f), SHMRING_OK);
    CHECK(f.meta.stream == i && is_record(f.data, f.len, i, len));
    CHECK_ST(shmring_consumer_release(c, &f), SHMRING_OK);
}

/* The ring's consumer adopts a tethered consumer at its next poll. */
static void adopt(shmring_consumer *owner) {
    shmring_frame f;
    CHECK_ST(shmring_consumer_next(owner, 0, &f), SHMRING_TIMEOUT);
}

static void test_tethered_gets_every_record(void) {
    shmring_segment *s = make_ring(64 << 10);
    shmring_consumer *owner = NULL, *tc = NULL;
    shmring_producer *p = NULL;
    CHECK_ST(shmring_consumer_attach(s, NULL, &owner), SHMRING_OK);
    CHECK_ST(shmring_consumer_attach_tethered(s, NULL, &tc), SHMRING_OK);
    uint32_t tethered = 9;
    CHECK_ST(shmring_consumer_is_tethered(tc, &tethered), SHMRING_OK);
    CHECK(tethered == 1);
    CHECK_ST(shmring_consumer_is_tethered(owner, &tethered), SHMRING_OK);
    CHECK(tethered == 0);
    adopt(owner);
    CHECK_ST(shmring_producer_attach(s, &p), SHMRING_OK);
    CHECK_ST(shmring_producer_set_policy(p, SHMRING_POLICY_FAIL, 0), SHMRING_OK);
    /* 30 rounds of 25 records (each 1,088 bytes in the ring): about 12 times round
     * the 64 KiB ring. The ring's consumer publishes what the tethered one released
     * when it next looks, so a round has room for two rounds' records. */
    uint32_t i = 0;
    for (int round = 0; round < 30; round++) {
        for (int k = 0; k < 25; k++, i++) CHECK_ST(send_record(p, i, 1000), SHMRING_OK);
        for (uint32_t j = i - 25; j < i; j++) take(owner, j, 1000);
        for (uint32_t j = i - 25; j < i; j++) take(tc, j, 1000);
    }
    shmring_frame none;
    CHECK_ST(shmring_consumer_next(tc, 0, &none), SHMRING_TIMEOUT);

    /* The tethered consumer holds space until it releases: the ring's consumer
     * alone draining it does not free any. */
    int sent = 0;
    shmring_status st;
    while ((st = send_record(p, i + sent, 1000)) == SHMRING_OK) {
        take(owner, i + sent, 1000);
        sent++;
        if (sent > PATIENCE) break;
    }
    CHECK(st == SHMRING_ERR_FULL && sent > 0);
    for (int k = 0; k < sent; k++) take(tc, i + k, 1000);
    /* Once the ring's consumer looks (as when a waiting producer wakes it), the
     * space is free. */
    CHECK_ST(shmring_consumer_next(owner, 1 * MS, &none), SHMRING_TIMEOUT);
    CHECK_ST(send_record(p, i + sent, 1000), SHMRING_OK);

    shmring_stats stats;
    CHECK_ST(shmring_segment_stats(s, &stats), SHMRING_OK);
    CHECK(stats.tethered_consumers == 1 && stats.tethers_detached == 0);
    shmring_tether_info info[4];
    size_t n = 0;
    CHECK_ST(shmring_segment_tethers(s, info, 4, &n), SHMRING_OK);
    CHECK(n == 1 && info[0].requested == 0 && info[0].pid == (uint32_t)getpid());
    CHECK(info[0].records_consumed == i + (uint64_t)sent && info[0].lag_records == 1);
    CHECK_ST(shmring_segment_tethers(s, NULL, 0, &n), SHMRING_OK);
    CHECK(n == 1);

    CHECK_ST(shmring_consumer_close(tc), SHMRING_OK);
    CHECK_ST(shmring_segment_tethers(s, NULL, 0, &n), SHMRING_OK);
    CHECK(n == 0);
    shmring_producer_close(p);
    shmring_consumer_close(owner);
    shmring_segment_close(s);
}

static void test_tethered_misuse(void) {
    shmring_segment *s = make_ring(64 << 10);
    shmring_consumer *owner = NULL, *tc = NULL;
    /* No ring consumer yet. */
    CHECK_ST(shmring_consumer_attach_tethered(s, NULL, &tc), SHMRING_ERR_NO_CONSUMER);
    CHECK(tc == NULL);
    CHECK_ST(shmring_consumer_attach_tethered(s, NULL, NULL), SHMRING_ERR_NULL);
    CHECK_ST(shmring_consumer_attach_tethered(NULL, NULL, &tc), SHMRING_ERR_NULL);
    CHECK_ST(shmring_consumer_attach(s, NULL, &owner), SHMRING_OK);
    CHECK_ST(shmring_consumer_attach_tethered(s, NULL, &tc), SHMRING_OK);
    uint32_t ready;
    CHECK_ST(shmring_consumer_arm(tc, &ready), SHMRING_ERR_STATE);
    CHECK_MSG("tethered");
    CHECK_ST(shmring_consumer_disarm(tc), SHMRING_ERR_STATE);
    CHECK_ST(shmring_consumer_reset(tc), SHMRING_ERR_CONFIG);
    CHECK_MSG("cannot reset");
    /* Take every line the ring has. */
    shmring_consumer *more[64];
    int taken = 0;
    shmring_status st = SHMRING_OK;
    while (taken < 64 && (st = shmring_consumer_attach_tethered(s, NULL, &more[taken])) == SHMRING_OK)
        taken++;
    CHECK(st == SHMRING_ERR_NO_TETHER_LINE && taken >= 1);
    CHECK(strcmp(shmring_status_name(SHMRING_ERR_NO_TETHER_LINE), "SHMRING_ERR_NO_TETHER_LINE") == 0);
    CHECK(strcmp(shmring_status_name(SHMRING_ERR_DETACHED), "SHMRING_ERR_DETACHED") == 0);
    CHECK(strcmp(shmring_status_name(SHMRING_ERR_BUFFER_TOO_SMALL), "SHMRING_ERR_BUFFER_TOO_SMALL") == 0);
    for (int k = 0; k < taken; k++) CHECK_ST(shmring_consumer_close(more[k]), SHMRING_OK);
    /* A line given back is free again. */
    CHECK_ST(shmring_consumer_attach_tethered(s, NULL, &more[0]), SHMRING_OK);
    CHECK_ST(shmring_consumer_close(more[0]), SHMRING_OK);
    CHECK_ST(shmring_consumer_close(tc), SHMRING_OK);
    shmring_consumer_close(owner);
    shmring_segment_close(s);
}

static void test_stuck_tethered_is_detached(void) {
    shmring_segment *s = make_ring(64 << 10);
    shmring_consumer_options o;
    CHECK_ST(shmring_consumer_options_init(&o), SHMRING_OK);
    CHECK(o.tether_stall_limit_ns > 0);
    o.tether_stall_limit_ns = 20 * MS;
    o.liveness_interval_ns = 5 * MS;
    shmring_consumer *owner = NULL, *tc = NULL;
    shmring_producer *p = NULL;
    CHECK_ST(shmring_consumer_attach(s, &o, &owner), SHMRING_OK);
    CHECK_ST(shmring_consumer_attach_tethered(s, NULL, &tc), SHMRING_OK);
    adopt(owner);
    CHECK_ST(shmring_producer_attach(s, &p), SHMRING_OK);
    CHECK_ST(send_record(p, 0, 100), SHMRING_OK);
    shmring_frame held;
    CHECK_ST(shmring_consumer_next(tc, 1000 * MS, &held), SHMRING_OK); /* and never released */
    take(owner, 0, 100);
    /* The ring's consumer goes on polling; it detaches the stuck one. */
    shmring_stats stats = {0};
    for (int k = 0; k < PATIENCE && stats.tethers_detached == 0; k++) {
        shmring_frame f;
        CHECK_ST(shmring_consumer_next(owner, 5 * MS, &f), SHMRING_TIMEOUT);
        CHECK_ST(shmring_segment_stats(s, &stats), SHMRING_OK);
    }
    CHECK(stats.tethers_detached == 1);
    /* It learns it once its line has read detached for a few of its liveness
     * intervals (a peer's forgery of that state is repaired by the ring's
     * consumer before then): no frame until then, then the error. */
    shmring_frame f;
    shmring_status st = SHMRING_TIMEOUT;
    for (int k = 0; k < PATIENCE && st == SHMRING_TIMEOUT; k++) st = shmring_consumer_next(tc, 5 * MS, &f);
    CHECK_ST(st, SHMRING_ERR_DETACHED);
    CHECK_MSG("detached");
    /* Its space is free again: a whole ring's worth goes through. */
    CHECK_ST(shmring_producer_set_policy(p, SHMRING_POLICY_FAIL, 0), SHMRING_OK);
    for (uint32_t i = 1; i <= 200; i++) {
        CHECK_ST(send_record(p, i, 1000), SHMRING_OK);
        take(owner, i, 1000);
    }
    CHECK_ST(shmring_consumer_close(tc), SHMRING_OK);
    CHECK_ST(shmring_segment_stats(s, &stats), SHMRING_OK);
    CHECK(stats.tethered_consumers == 0);
    /* Attaching again works. */
    CHECK_ST(shmring_consumer_attach_tethered(s, NULL, &tc), SHMRING_OK);
    adopt(owner);
    CHECK_ST(send_record(p, 201, 10), SHMRING_OK);
    take(tc, 201, 10);
    take(owner, 201, 10);
    CHECK_ST(shmring_consumer_close(tc), SHMRING_OK);
    shmring_producer_close(p);
    shmring_consumer_close(owner);
    shmring_segment_close(s);
}

static shmring_tap *tap_of(shmring_segment *s, const shmring_tap_options *o) {
    int ro = -1;
    CHECK_ST(shmring_segment_read_only_fd(s, &ro), SHMRING_OK);
    char address[32];
    snprintf(address, sizeof address, "fd:%d", dup(ro));
    shmring_tap *t = NULL;
    CHECK_ST(shmring_tap_open(address, o, &t), SHMRING_OK);
    CHECK(t != NULL);
    return t;
}

static void test_tap_copies_records(void) {
    shmring_segment *s = make_ring(64 << 10);
    shmring_consumer *owner = NULL;
    shmring_producer *p = NULL;
    CHECK_ST(shmring_consumer_attach(s, NULL, &owner), SHMRING_OK);
    CHECK_ST(shmring_producer_attach(s, &p), SHMRING_OK);
    CHECK_ST(send_record(p, 0, 50), SHMRING_OK); /* before the tap: not seen */
    shmring_tap *t = tap_of(s, NULL);
    uint8_t buf[4096];
    shmring_tap_frame tf;
    CHECK_ST(shmring_tap_next(t, buf, sizeof buf, 0, &tf), SHMRING_TIMEOUT);
    for (uint32_t i = 1; i <= 3; i++) CHECK_ST(send_record(p, i, 100 * i), SHMRING_OK);
    for (uint32_t i = 1; i <= 3; i++) {
        CHECK_ST(shmring_tap_next(t, buf, sizeof buf, 1000 * MS, &tf), SHMRING_OK);
        CHECK(tf.meta.stream == i && tf.meta.timestamp_ns == 1000 + i);
        CHECK(is_record(buf, tf.len, i, 100 * i));
    }
    /* The tap took nothing from the ring's consumer. */
    for (uint32_t i = 0; i <= 3; i++) take(owner, i, i == 0 ? 50 : 100 * i);

    /* A buffer too small: the length needed, and the record kept for the next call. */
    CHECK_ST(send_record(p, 4, 300), SHMRING_OK);
    CHECK_ST(shmring_tap_next(t, buf, 10, 1000 * MS, &tf), SHMRING_ERR_BUFFER_TOO_SMALL);
    CHECK(tf.len == 300 && tf.meta.stream == 4);
    CHECK_MSG("300 bytes");
    CHECK_ST(shmring_tap_next(t, NULL, 0, 0, &tf), SHMRING_ERR_BUFFER_TOO_SMALL);
    CHECK(tf.len == 300);
    CHECK_ST(shmring_tap_next(t, buf, 300, 0, &tf), SHMRING_OK);
    CHECK(tf.meta.stream == 4 && is_record(buf, tf.len, 4, 300));
    CHECK_ST(shmring_tap_next(t, buf, sizeof buf, 0, &tf), SHMRING_TIMEOUT);
    take(owner, 4, 300);

    shmring_tap_counters ts;
    CHECK_ST(shmring_tap_stats(t, &ts), SHMRING_OK);
    CHECK(ts.delivered == 4 && ts.lost == 0 && ts.torn == 0 && ts.lag == 0);
    shmring_stats stats;
    CHECK_ST(shmring_segment_stats(s, &stats), SHMRING_OK);
    CHECK(stats.records_consumed == 5); /* the ring's consumer's, only */
    CHECK_ST(shmring_tap_close(t), SHMRING_OK);
    CHECK_ST(shmring_tap_close(t), SHMRING_ERR_BAD_HANDLE);
    CHECK_ST(shmring_tap_close(NULL), SHMRING_OK);
    shmring_producer_close(p);
    shmring_consumer_close(owner);
    shmring_segment_close(s);
}

static void test_tap_filters_and_losses(void) {
    shmring_segment *s = make_ring(64 << 10);
    shmring_consumer *owner = NULL;
    shmring_producer *p = NULL;
    CHECK_ST(shmring_consumer_attach(s, NULL, &owner), SHMRING_OK);
    CHECK_ST(shmring_producer_attach(s, &p), SHMRING_OK);
    shmring_tap_options o;
    CHECK_ST(shmring_tap_options_init(&o), SHMRING_OK);
    CHECK(o.every == 1 && o.kind == SHMRING_TAP_ANY && o.stream == SHMRING_TAP_ANY);
    CHECK(o.poll_interval_ns > 0 && o.skip_pending_after_ns > 0);
    o.stream = 7;
    o.every = 2;
    shmring_tap *t = tap_of(s, &o);
    shmring_tap *all = tap_of(s, NULL);
    /* Streams 6 and 7 alternate: the tap takes every second record of stream 7. */
    uint8_t buf[4096];
    for (uint32_t i = 0; i < 8; i++) {
        shmring_meta m = {.stream = 6 + (i % 2), .kind = SHMRING_KIND_RAW, .flags = i};
        CHECK_ST(shmring_producer_send(p, buf, 10, &m), SHMRING_OK);
    }
    shmring_tap_frame tf;
    uint32_t got[4], n = 0;
    while (n < 4 && shmring_tap_next(t, buf, sizeof buf, 0, &tf) == SHMRING_OK) got[n++] = tf.meta.flags;
    CHECK(n == 2 && got[0] == 1 && got[1] == 5);
    shmring_tap_counters ts;
    CHECK_ST(shmring_tap_stats(t, &ts), SHMRING_OK);
    CHECK(ts.delivered == 2 && ts.filtered == 6 && ts.lost == 0);
    for (uint32_t i = 0; i < 8; i++) {
        shmring_frame f;
        CHECK_ST(shmring_consumer_next(owner, 1000 * MS, &f), SHMRING_OK);
        CHECK_ST(shmring_consumer_release(owner, &f), SHMRING_OK);
    }

    /* `all` has not read yet; 200 records of 1000 bytes go round the 64 KiB ring
     * three times: it lost what was overwritten and says so. */
    for (uint32_t i = 0; i < 200; i++) {
        CHECK_ST(send_record(p, i, 1000), SHMRING_OK);
        take(owner, i, 1000);
    }
    CHECK_ST(shmring_tap_stats(all, &ts), SHMRING_OK);
    CHECK(ts.lag == 208);
    int delivered = 0;
    uint32_t last = 0;
    while (shmring_tap_next(all, buf, sizeof buf, 0, &tf) == SHMRING_OK) {
        CHECK(is_record(buf, tf.len, tf.meta.stream, 1000));
        last = tf.meta.stream;
        delivered++;
    }
    CHECK_ST(shmring_tap_stats(all, &ts), SHMRING_OK);
    CHECK(ts.skips >= 1 && ts.lost > 0 && ts.torn == 0);
    CHECK(ts.delivered == (uint64_t)delivered && ts.delivered + ts.lost == 208);
    CHECK(delivered == 0 || last == 199);
    /* After a jump it carries on with new records. */
    CHECK_ST(send_record(p, 500, 20), SHMRING_OK);
    CHECK_ST(shmring_tap_next(all, buf, sizeof buf, 1000 * MS, &tf), SHMRING_OK);
    CHECK(is_record(buf, tf.len, 500, 20));
    take(owner, 500, 20);
    shmring_tap_close(all);
    shmring_tap_close(t);
    shmring_producer_close(p);
    shmring_consumer_close(owner);
    shmring_segment_close(s);
}

/* A consumer's filter takes the tap's fields: only stream 7's records are handed
 * out; the others are released unread (six rings' worth never fill the ring). */
static void test_consumer_filter(void) {
    shmring_segment *s = make_ring(64 << 10);
    shmring_consumer_options o;
    CHECK_ST(shmring_consumer_options_init(&o), SHMRING_OK);
    CHECK(o.filter == 0);
    o.filter = SHMRING_FILTER_STREAM;
    o.stream = 7;
    shmring_consumer *c = NULL;
    shmring_producer *p = NULL;
    CHECK_ST(shmring_consumer_attach(s, &o, &c), SHMRING_OK);
    CHECK_ST(shmring_producer_attach(s, &p), SHMRING_OK);
    CHECK_ST(shmring_producer_set_policy(p, SHMRING_POLICY_FAIL, 0), SHMRING_OK);
    static uint8_t body[2000];
    uint32_t kept = 0;
    for (uint32_t i = 0; i < 200; i++) {
        shmring_meta m = {.stream = 6 + (i % 3), .kind = SHMRING_KIND_RAW, .flags = i};
        CHECK_ST(shmring_producer_send(p, body, sizeof body, &m), SHMRING_OK);
        shmring_frame f;
        if (shmring_consumer_next(c, 0, &f) == SHMRING_OK) {
            CHECK(f.meta.stream == 7 && f.meta.flags == i);
            kept++;
            CHECK_ST(shmring_consumer_release(c, &f), SHMRING_OK);
        }
    }
    CHECK(kept == 67);
    shmring_stats st;
    CHECK_ST(shmring_segment_stats(s, &st), SHMRING_OK);
    CHECK(st.records_consumed == 67 && st.records_filtered == 133 && st.drops_full == 0);
    shmring_producer_close(p);
    shmring_consumer_close(c);
    /* A bit that is no filter. */
    o.filter = 4;
    CHECK_ST(shmring_consumer_attach(s, &o, &c), SHMRING_ERR_INVALID_ARGUMENT);
    CHECK_MSG("filter 0x4");
    /* Zeroed options (no init) filter nothing: every stream and kind arrives. */
    shmring_consumer_options z;
    memset(&z, 0, sizeof z);
    CHECK_ST(shmring_consumer_attach(s, &z, &c), SHMRING_OK);
    CHECK_ST(shmring_producer_attach(s, &p), SHMRING_OK);
    for (uint32_t i = 0; i < 3; i++) {
        shmring_meta m = {.stream = i, .kind = i == 0 ? SHMRING_KIND_RAW : SHMRING_KIND_VIDEO};
        CHECK_ST(shmring_producer_send(p, body, 16, &m), SHMRING_OK);
        shmring_frame f;
        CHECK_ST(shmring_consumer_next(c, 0, &f), SHMRING_OK);
        CHECK(f.meta.stream == i);
        CHECK_ST(shmring_consumer_release(c, &f), SHMRING_OK);
    }
    shmring_producer_close(p);
    shmring_consumer_close(c);
    shmring_segment_close(s);
}

static void test_tap_named_and_misuse(void) {
    char name[64];
    snprintf(name, sizeof name, "shmring-test-readers-%d", (int)getpid());
    shmring_config cfg;
    CHECK_ST(shmring_config_init(&cfg), SHMRING_OK);
    cfg.capacity = 64 << 10;
    char create[96];
    snprintf(create, sizeof create, "create:%s", name);
    shmring_segment *s = NULL;
    CHECK_ST(shmring_create(create, &cfg, &s), SHMRING_OK);
    shmring_consumer *owner = NULL;
    shmring_producer *p = NULL;
    CHECK_ST(shmring_consumer_attach(s, NULL, &owner), SHMRING_OK);
    CHECK_ST(shmring_producer_attach(s, &p), SHMRING_OK);
    shmring_tap *t = NULL;
    CHECK_ST(shmring_tap_open(name, NULL, &t), SHMRING_OK);
    CHECK_ST(send_record(p, 3, 64), SHMRING_OK);
    uint8_t buf[128];
    shmring_tap_frame tf;
    CHECK_ST(shmring_tap_next(t, buf, sizeof buf, 1000 * MS, &tf), SHMRING_OK);
    CHECK(is_record(buf, tf.len, 3, 64));
    take(owner, 3, 64);
    CHECK_ST(shmring_tap_next(t, NULL, 10, 0, &tf), SHMRING_ERR_NULL);
    CHECK_ST(shmring_tap_next(t, buf, sizeof buf, 0, NULL), SHMRING_ERR_NULL);
    CHECK_ST(shmring_tap_next(NULL, buf, sizeof buf, 0, &tf), SHMRING_ERR_NULL);
    CHECK_ST(shmring_tap_next((shmring_tap *)owner, buf, sizeof buf, 0, &tf), SHMRING_ERR_BAD_HANDLE);
    CHECK_ST(shmring_tap_close(t), SHMRING_OK);

    shmring_tap *u = NULL;
    CHECK_ST(shmring_tap_open("shmring-test-readers-absent", NULL, &u), SHMRING_ERR_NOT_FOUND);
    CHECK(u == NULL);
    shmring_tap_options o;
    CHECK_ST(shmring_tap_options_init(&o), SHMRING_OK);
    o.kind = -5;
    CHECK_ST(shmring_tap_open(name, &o, &u), SHMRING_ERR_INVALID_ARGUMENT);
    CHECK_MSG("kind -5");
    o.kind = 1LL << 40;
    CHECK_ST(shmring_tap_open(name, &o, &u), SHMRING_ERR_INVALID_ARGUMENT);
    CHECK_ST(shmring_tap_open("fd:-1", NULL, &u), SHMRING_ERR_CONFIG);
    /* A named ring's descriptor is not a sealed memfd: open it by name instead. */
    int ro = -1;
    CHECK_ST(shmring_segment_read_only_fd(s, &ro), SHMRING_OK);
    char by_fd[32];
    snprintf(by_fd, sizeof by_fd, "fd:%d", dup(ro));
    CHECK_ST(shmring_tap_open(by_fd, NULL, &u), SHMRING_ERR_UNSEALED);
    CHECK(u == NULL);
    shmring_producer_close(p);
    shmring_consumer_close(owner);
    CHECK_ST(shmring_segment_close(s), SHMRING_OK);
    char path[96];
    snprintf(path, sizeof path, "/dev/shm/%s", name);
    CHECK(access(path, F_OK) != 0);
}

/* shmring_reader: one reader of any kind, on a named ring `NAME` (unique). */
static void reader_ring_name(char *name, size_t n, const char *what) {
    snprintf(name, n, "shmring-test-reader-%s-%d", what, (int)getpid());
}

static shmring_reader *reader_of(const char *address, uint32_t kind, const shmring_tap_options *t) {
    shmring_reader *r = NULL;
    CHECK_ST(shmring_reader_open(address, kind, NULL, t, &r), SHMRING_OK);
    CHECK(r != NULL);
    uint32_t k = 99;
    CHECK_ST(shmring_reader_kind(r, &k), SHMRING_OK);
    CHECK(k == kind);
    return r;
}

/* The one reading loop, whatever the reader's kind: every record it gives is the
 * record its stream names; returns how many it gave. A consumer's frames are in
 * the ring, a tap's in `buf`. */
static uint32_t read_all(shmring_reader *r, int in_place) {
    uint8_t buf[4096];
    uint32_t got = 0;
    shmring_frame f;
    while (shmring_reader_next(r, in_place ? NULL : buf, in_place ? 0 : sizeof buf, 0, &f) == SHMRING_OK) {
        CHECK(is_record(f.data, f.len, f.meta.stream, 10 + f.meta.stream));
        CHECK(in_place ? f.data != buf : f.data == buf);
        CHECK_ST(shmring_reader_release(r, &f), SHMRING_OK);
        got++;
    }
    return got;
}

static void test_reader_every_kind_same_loop(void) {
    char name[64], create[96];
    reader_ring_name(name, sizeof name, "kinds");
    snprintf(create, sizeof create, "create:%s,capacity=64K", name);
    shmring_tap_options every2;
    CHECK_ST(shmring_tap_options_init(&every2), SHMRING_OK);
    every2.every = 2;
    shmring_reader *r[3];
    r[0] = reader_of(create, SHMRING_READER_CONSUMER, NULL);
    r[1] = reader_of(name, SHMRING_READER_TETHERED, NULL);
    r[2] = reader_of(name, SHMRING_READER_TAP, &every2);
    shmring_frame f;
    CHECK_ST(shmring_reader_next(r[0], NULL, 0, 0, &f), SHMRING_TIMEOUT); /* adopts r[1] */
    shmring_segment *s = NULL;
    shmring_producer *p = NULL;
    CHECK_ST(shmring_open(name, 0, &s), SHMRING_OK);
    CHECK_ST(shmring_producer_attach(s, &p), SHMRING_OK);
    enum { N = 20 };
    for (uint32_t i = 0; i < N; i++) CHECK_ST(send_record(p, i, 10 + i), SHMRING_OK);
    uint32_t got[3];
    for (int k = 0; k < 3; k++) got[k] = read_all(r[k], k != 2);
    CHECK(got[0] == N && got[1] == N && got[2] == N / 2);
    for (int k = 0; k < 3; k++) {
        shmring_reader_counters c = {9, 9, 9};
        CHECK_ST(shmring_reader_counts(r[k], &c), SHMRING_OK);
        CHECK(c.resets == 0 && got[k] + c.lost + c.filtered == N);
        CHECK(k == 2 ? c.filtered == N / 2 : c.filtered == 0 && c.lost == 0);
        shmring_stats st;
        CHECK_ST(shmring_reader_stats(r[k], &st), SHMRING_OK);
        CHECK(st.records_committed == N && st.records_consumed == N);
        shmring_geometry g;
        CHECK_ST(shmring_reader_geometry(r[k], &g), SHMRING_OK);
        CHECK(g.capacity == 64 << 10);
    }
    shmring_producer_close(p);
    shmring_segment_close(s);
    for (int k = 2; k >= 0; k--) CHECK_ST(shmring_reader_close(r[k]), SHMRING_OK);
    char path[96];
    snprintf(path, sizeof path, "/dev/shm/%s", name);
    CHECK(access(path, F_OK) != 0); /* created by the consumer reader, removed with it */
}

static void test_reader_tap_buffer_too_small(void) {
    char name[64], create[96];
    reader_ring_name(name, sizeof name, "small");
    snprintf(create, sizeof create, "create:%s,capacity=64K", name);
    shmring_reader *owner = reader_of(create, SHMRING_READER_CONSUMER, NULL);
    shmring_reader *tap = reader_of(name, SHMRING_READER_TAP, NULL);
    shmring_segment *s = NULL;
    shmring_producer *p = NULL;
    CHECK_ST(shmring_open(name, 0, &s), SHMRING_OK);
    CHECK_ST(shmring_producer_attach(s, &p), SHMRING_OK);
    CHECK_ST(send_record(p, 4, 300), SHMRING_OK);
    uint8_t buf[512];
    shmring_frame f;
    CHECK_ST(shmring_reader_next(tap, buf, 10, 1000 * MS, &f), SHMRING_ERR_BUFFER_TOO_SMALL);
    CHECK(f.len == 300 && f.meta.stream == 4 && f.data == NULL);
    CHECK_MSG("300 bytes");
    CHECK_ST(shmring_reader_next(tap, NULL, 0, 0, &f), SHMRING_ERR_BUFFER_TOO_SMALL);
    CHECK(f.len == 300);
    CHECK_ST(shmring_reader_next(tap, NULL, 10, 0, &f), SHMRING_ERR_NULL);
    CHECK_ST(shmring_reader_next(tap, buf, 300, 0, &f), SHMRING_OK);
    CHECK(f.data == buf && f.meta.stream == 4 && is_record(buf, f.len, 4, 300));
    CHECK_ST(shmring_reader_release(tap, &f), SHMRING_OK);
    CHECK_ST(shmring_reader_next(tap, buf, sizeof buf, 0, &f), SHMRING_TIMEOUT);
    /* The consumer's record is in the ring, whatever the buffer. */
    CHECK_ST(shmring_reader_next(owner, NULL, 0, 1000 * MS, &f), SHMRING_OK);
    CHECK(is_record(f.data, f.len, 4, 300));
    CHECK_ST(shmring_reader_release(owner, &f), SHMRING_OK);
    shmring_producer_close(p);
    shmring_segment_close(s);
    shmring_reader_close(tap);
    shmring_reader_close(owner);
}

/* shmring_reader_open(address, kind) is refused with `want`, its message naming
 * `msg`, and makes no reader (closed if it did, so a failure leaves no ring). */
static void check_refused(const char *address, uint32_t kind, shmring_status want, const char *msg) {
    shmring_reader *r = NULL;
    CHECK_ST(shmring_reader_open(address, kind, NULL, NULL, &r), want);
    CHECK_MSG(msg);
    CHECK(r == NULL);
    shmring_reader_close(r);
}

static void test_reader_misuse(void) {
    char name[64], create[96];
    reader_ring_name(name, sizeof name, "misuse");
    snprintf(create, sizeof create, "create:%s,capacity=64K", name);
    char path[96];
    snprintf(path, sizeof path, "/dev/shm/%s", name);
    /* Only the ring's consumer creates the ring it reads. */
    check_refused(create, SHMRING_READER_TETHERED, SHMRING_ERR_CONFIG, "reads a ring that exists");
    check_refused(create, SHMRING_READER_TAP, SHMRING_ERR_CONFIG, "a tap reads a ring that exists");
    check_refused("memfd:x", SHMRING_READER_TAP, SHMRING_ERR_CONFIG, "a tap reads a ring that exists");
    /* A kind that is none. */
    check_refused(create, 3, SHMRING_ERR_INVALID_ARGUMENT, "reader kind 3");
    check_refused(create, 0xffffffffu, SHMRING_ERR_INVALID_ARGUMENT, "SHMRING_READER_TAP (2)");
    CHECK(access(path, F_OK) != 0);
    shmring_reader *r = NULL;
    CHECK_ST(shmring_reader_open(NULL, SHMRING_READER_CONSUMER, NULL, NULL, &r), SHMRING_ERR_NULL);
    CHECK_ST(shmring_reader_open(create, SHMRING_READER_CONSUMER, NULL, NULL, NULL), SHMRING_ERR_NULL);

    /* Frames go back to the reader that gave them, once. */
    shmring_reader *a = reader_of(create, SHMRING_READER_CONSUMER, NULL);
    shmring_reader *b = reader_of(name, SHMRING_READER_TETHERED, NULL);
    shmring_frame f;
    CHECK_ST(shmring_reader_next(a, NULL, 0, 0, &f), SHMRING_TIMEOUT);
    shmring_segment *s = NULL;
    shmring_producer *p = NULL;
    CHECK_ST(shmring_open(name, 0, &s), SHMRING_OK);
    CHECK_ST(shmring_producer_attach(s, &p), SHMRING_OK);
    CHECK_ST(send_record(p, 1, 10), SHMRING_OK);
    CHECK_ST(shmring_reader_next(a, NULL, 0, 1000 * MS, &f), SHMRING_OK);
    CHECK_ST(shmring_reader_release(b, &f), SHMRING_ERR_NOT_HELD);
    CHECK_ST(shmring_reader_release(a, &f), SHMRING_OK);
    CHECK_ST(shmring_reader_release(a, &f), SHMRING_ERR_NOT_HELD);
    CHECK_ST(shmring_reader_release(a, NULL), SHMRING_ERR_NULL);
    CHECK_ST(shmring_reader_next(b, NULL, 0, 1000 * MS, &f), SHMRING_OK);
    CHECK_ST(shmring_reader_release(b, &f), SHMRING_OK);
    CHECK_ST(shmring_reader_next((shmring_reader *)p, NULL, 0, 0, &f), SHMRING_ERR_BAD_HANDLE);
    CHECK_ST(shmring_reader_next(a, NULL, 0, 0, NULL), SHMRING_ERR_NULL);
    shmring_producer_close(p);
    shmring_segment_close(s);
    CHECK_ST(shmring_reader_close(b), SHMRING_OK);
    CHECK_ST(shmring_reader_close(b), SHMRING_ERR_BAD_HANDLE);
    CHECK_ST(shmring_reader_close(NULL), SHMRING_OK);
    CHECK_ST(shmring_reader_close(a), SHMRING_OK);
    CHECK(access(path, F_OK) != 0);
}

int main(void) {
    RUN(test_tethered_gets_every_record);
    RUN(test_tethered_misuse);
    RUN(test_stuck_tethered_is_detached);
    RUN(test_tap_copies_records);
    RUN(test_tap_filters_and_losses);
    RUN(test_consumer_filter);
    RUN(test_tap_named_and_misuse);
    RUN(test_reader_every_kind_same_loop);
    RUN(test_reader_tap_buffer_too_small);
    RUN(test_reader_misuse);
    return check_summary();
}
