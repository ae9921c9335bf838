/*
 * frame_pattern.h: the test pattern the examples write into I420 frames, and the
 * checksum producers store in shmring_meta.flags so that any consumer (C, C++,
 * Rust, Python) can verify a frame arrived intact.
 *
 * checksum: FNV-1a-style fold over the payload bytes after the 128-byte media
 * header, 8 little-endian bytes at a time, then byte by byte for the tail:
 *   h = 0xcbf29ce484222325; for each word w: h = (h ^ w) * 0x100000001b3;
 *   for each tail byte b: h = (h ^ b) * 0x100000001b3; result = (u32)(h ^ (h >> 32)).
 */
#ifndef SHMRING_FRAME_PATTERN_H
#define SHMRING_FRAME_PATTERN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "shmring.h"

/* Longest row the pattern supports (RGBA 8K would need more; I420 rows are tight). */
#define PATTERN_MAX_ROW 16384

/* A ramp 0,1,..,255,0,1,.. long enough to copy any row from any phase. Filled once,
 * before attaching, so that the hot path only copies. */
static uint8_t pattern_ramp[PATTERN_MAX_ROW + 256];

static inline void pattern_init(void) {
    for (size_t i = 0; i < sizeof pattern_ramp; i++) pattern_ramp[i] = (uint8_t)i;
}

/* Fills every plane of a video payload described by `h`: row y of plane p starts
 * the ramp at phase (sequence + y + 64 * p) & 255. Returns 0, or -1 if a row is
 * longer than PATTERN_MAX_ROW. */
static inline int pattern_fill(const shmring_media_header *h, uint8_t *payload) {
    for (uint32_t p = 0; p < h->planes && p < 4; p++) {
        uint32_t stride = h->stride[p];
        if (stride == 0 || stride > PATTERN_MAX_ROW) return -1;
        uint32_t rows = h->size[p] / stride;
        uint8_t *plane = payload + h->offset[p];
        for (uint32_t y = 0; y < rows; y++) {
            size_t phase = (size_t)((h->sequence + y + 64u * p) & 255u);
            memcpy(plane + (size_t)y * stride, pattern_ramp + phase, stride);
        }
    }
    return 0;
}

static inline uint32_t pattern_checksum(const uint8_t *data, size_t len) {
    uint64_t h = 0xcbf29ce484222325ull;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, data + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
    }
    for (; i < len; i++) h = (h ^ data[i]) * 0x100000001b3ull;
    return (uint32_t)(h ^ (h >> 32));
}

/* Checksum of a media payload: the bytes after the header. */
static inline uint32_t pattern_payload_checksum(const uint8_t *payload, size_t len) {
    if (len <= SHMRING_MEDIA_HEADER_SIZE) return pattern_checksum(payload, 0);
    return pattern_checksum(payload + SHMRING_MEDIA_HEADER_SIZE, len - SHMRING_MEDIA_HEADER_SIZE);
}

#endif
