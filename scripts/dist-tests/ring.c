/* A program a user of the Debian package writes: one record through a ring, by the
 * C ABI found with pkg-config (scripts/dist-tests/check-deb.sh builds it twice:
 * `pkg-config --libs shmring` and `pkg-config --static --libs shmring`). Prints the
 * library's version and layout version. */
#include <shmring.h>
#include <stdio.h>
#include <string.h>

#define CHECK(call)                                                                  \
    do {                                                                             \
        if ((call) != SHMRING_OK) {                                                  \
            fprintf(stderr, "%s: %s\n", #call, shmring_last_error());                \
            return 1;                                                                \
        }                                                                            \
    } while (0)

int main(void) {
    shmring_config cfg;
    shmring_segment *seg;
    shmring_consumer *c;
    shmring_producer *p;
    shmring_frame f;
    static const char msg[] = "installed";
    shmring_meta meta = {.stream = 7, .kind = SHMRING_KIND_RAW, .timestamp_ns = shmring_now_ns()};

    CHECK(shmring_config_init(&cfg));
    cfg.capacity = 1 << 20;
    CHECK(shmring_create("memfd:dist-test", &cfg, &seg));
    CHECK(shmring_consumer_attach(seg, NULL, &c));
    CHECK(shmring_producer_attach(seg, &p));
    CHECK(shmring_producer_send(p, (const uint8_t *)msg, sizeof msg, &meta));
    CHECK(shmring_consumer_next(c, 1000000000, &f));
    if (f.len != sizeof msg || memcmp(f.data, msg, sizeof msg) != 0 || f.meta.stream != 7) {
        fprintf(stderr, "the record came back changed\n");
        return 1;
    }
    CHECK(shmring_consumer_release(c, &f));
    CHECK(shmring_producer_close(p));
    CHECK(shmring_consumer_close(c));
    CHECK(shmring_segment_close(seg));
    printf("libshmring %s layout version %u: one record through a ring\n", shmring_version(),
           shmring_layout_version());
    return 0;
}
