/*
 * Glue between the Go package and the C ABI, for the calls made per frame. Each
 * returns its result by value, so Go never hands C a pointer to Go memory to fill
 * (which would move the Go value to the heap), and takes handles and pointers into
 * the ring as uintptr_t: a pointer argument costs an allocation per call with the
 * cgo of Go 1.19 (its pointer check). So the frame path allocates nothing. Plane
 * geometry comes from shmring_media_plane only.
 */
#ifndef SHMRING_GO_GLUE_H
#define SHMRING_GO_GLUE_H

#include <string.h>
#include <shmring.h>

/* As many planes as a media header describes at most. */
#define GO_PLANES (sizeof(((shmring_media_header *)0)->offset) / sizeof(((shmring_media_header *)0)->offset[0]))

typedef struct {
    size_t off;
    size_t len;
} go_plane;

/* Where each plane the header describes lies in the payload (from shmring_media_plane). */
static inline shmring_status go_planes(const shmring_media_header *h, const uint8_t *payload,
                                       size_t len, go_plane *out) {
    for (uint32_t i = 0; i < h->planes && i < GO_PLANES; i++) {
        const uint8_t *data = NULL;
        size_t size = 0;
        shmring_status st = shmring_media_plane(h, payload, len, i, &data, &size);
        if (st != SHMRING_OK) return st;
        out[i].off = (size_t)(data - payload);
        out[i].len = size;
    }
    return SHMRING_OK;
}

typedef struct {
    shmring_status status;
    shmring_frame frame;
} go_next;

static inline go_next go_consumer_next(uintptr_t c, int64_t timeout_ns) {
    go_next r;
    memset(&r, 0, sizeof r);
    r.status = shmring_consumer_next((shmring_consumer *)c, timeout_ns, &r.frame);
    return r;
}

/* The frame as shmring_consumer_next handed it out, field for field. */
static inline shmring_status go_consumer_release(uintptr_t c, uintptr_t data, size_t len,
                                                 shmring_meta meta, uint64_t seq, uint64_t owner) {
    shmring_frame f;
    memset(&f, 0, sizeof f);
    f.data = (const uint8_t *)data;
    f.len = len;
    f.meta = meta;
    f.seq = seq;
    f.owner = owner;
    return shmring_consumer_release((shmring_consumer *)c, &f);
}

typedef struct {
    shmring_status status;
    uint32_t value;
} go_u32;

static inline go_u32 go_consumer_arm(uintptr_t c) {
    go_u32 r = {SHMRING_OK, 0};
    r.status = shmring_consumer_arm((shmring_consumer *)c, &r.value);
    return r;
}

static inline shmring_status go_consumer_disarm(uintptr_t c) {
    return shmring_consumer_disarm((shmring_consumer *)c);
}

typedef struct {
    shmring_status status;
    shmring_media_header h;
    go_plane plane[GO_PLANES];
} go_media;

/* fps_num / fps_den: the nominal frame rate (0/1: variable), checked when the
 * header is written. */
static inline go_media go_media_video(uint32_t format, uint32_t width, uint32_t height,
                                      uint32_t fps_num, uint32_t fps_den, uint64_t pts_ns,
                                      uint64_t sequence) {
    go_media r;
    memset(&r, 0, sizeof r);
    r.status = shmring_media_video(format, width, height, pts_ns, sequence, &r.h);
    r.h.fps_num = fps_num;
    r.h.fps_den = fps_den;
    return r;
}

static inline go_media go_media_audio(uint32_t format, uint32_t sample_rate, uint32_t channels,
                                      uint32_t samples, uint64_t pts_ns, uint64_t sequence) {
    go_media r;
    memset(&r, 0, sizeof r);
    r.status = shmring_media_audio(format, sample_rate, channels, samples, pts_ns, sequence, &r.h);
    return r;
}

/* A frame's header and its planes, or an end of stream (no planes). */
static inline go_media go_media_read(uint32_t kind, uintptr_t payload, size_t len) {
    go_media r;
    memset(&r, 0, sizeof r);
    const uint8_t *p = (const uint8_t *)payload;
    r.status = shmring_media_read(kind, p, len, &r.h);
    if (r.status == SHMRING_OK) r.status = go_planes(&r.h, p, len, r.plane);
    return r;
}

typedef struct {
    shmring_status status;
    shmring_reservation res;
    go_plane plane[GO_PLANES];
} go_reserve;

/* timed: 0 follows the producer's policy, 1 waits at most timeout_ns. */
static inline go_reserve go_producer_reserve(uintptr_t p, size_t len, int timed,
                                             uint64_t timeout_ns) {
    go_reserve r;
    memset(&r, 0, sizeof r);
    shmring_producer *pr = (shmring_producer *)p;
    r.status = timed ? shmring_producer_reserve_timeout(pr, len, timeout_ns, &r.res)
                     : shmring_producer_reserve(pr, len, &r.res);
    return r;
}

/* Reserves the payload `h` describes, writes `h` at its start and finds its planes;
 * aborts the reservation if any of that fails. */
static inline go_reserve go_producer_reserve_media(uintptr_t p, shmring_media_header h,
                                                   int timed, uint64_t timeout_ns) {
    go_reserve r;
    memset(&r, 0, sizeof r);
    size_t len = 0;
    r.status = shmring_media_payload_len(&h, &len);
    if (r.status != SHMRING_OK) return r;
    r = go_producer_reserve(p, len, timed, timeout_ns);
    if (r.status != SHMRING_OK) return r;
    r.status = shmring_media_write(&h, r.res.data, r.res.len);
    if (r.status == SHMRING_OK) r.status = go_planes(&h, r.res.data, r.res.len, r.plane);
    if (r.status != SHMRING_OK) {
        shmring_producer_abort((shmring_producer *)p); /* keeps the failing call's message */
        memset(&r.res, 0, sizeof r.res);
    }
    return r;
}

static inline shmring_status go_producer_commit(uintptr_t p, shmring_meta m) {
    return shmring_producer_commit((shmring_producer *)p, &m);
}

typedef struct {
    shmring_status status;
    shmring_tap_frame frame;
} go_tap_next_result;

static inline go_tap_next_result go_tap_next(shmring_tap *t, uint8_t *buf, size_t cap,
                                             int64_t timeout_ns) {
    go_tap_next_result r;
    memset(&r, 0, sizeof r);
    r.status = shmring_tap_next(t, buf, cap, timeout_ns, &r.frame);
    return r;
}

#endif
