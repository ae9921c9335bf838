// C++ example: one ring, a producer filling I420 frames in place through the RAII
// wrapper, and a consumer verifying them; frames are released out of order.
#include <cstdio>
#include <vector>

#include "frame_pattern.h"
#include "shmring.hpp"

int main() {
    try {
        pattern_init();
        auto seg = shmring::segment::create("memfd:cpp-example", shmring::default_config(16u << 20));
        shmring::consumer cons(seg);
        shmring::producer prod(seg);

        const int frames = 8;
        for (int i = 0; i < frames; i++) {
            shmring_media_header h;
            shmring::check(shmring_media_video(SHMRING_FORMAT_I420, 640, 360, shmring_now_ns(),
                                               static_cast<uint64_t>(i), &h));
            size_t len = 0;
            shmring::check(shmring_media_payload_len(&h, &len));
            auto r = prod.reserve(len);
            shmring::check(shmring_media_write(&h, r.data(), r.size()));
            pattern_fill(&h, r.data());
            r.commit(shmring::meta(3, SHMRING_KIND_VIDEO, pattern_payload_checksum(r.data(), r.size())));
        }

        std::vector<shmring::frame> held;
        int ok = 0;
        while (auto f = cons.next(0)) {
            auto h = f->media();
            bool good = pattern_payload_checksum(f->data(), f->size()) == f->meta().flags &&
                        h.width == 640 && h.sequence == static_cast<uint64_t>(ok);
            if (!good) {
                std::fprintf(stderr, "cpp_example: frame %d failed verification\n", ok);
                return 1;
            }
            ok++;
            held.push_back(std::move(*f));
        }
        // Release newest first: any order is fine.
        while (!held.empty()) held.pop_back();
        auto s = seg.stats();
        std::printf("cpp_example: %d frames verified, %llu consumed, %llu outstanding\n", ok,
                    static_cast<unsigned long long>(s.records_consumed),
                    static_cast<unsigned long long>(cons.outstanding()));
        return ok == frames && cons.outstanding() == 0 ? 0 : 1;
    } catch (const shmring::error &e) {
        std::fprintf(stderr, "cpp_example: %s\n", e.what());
        return 2;
    }
}
