// shmring.hpp: a small C++17 RAII wrapper over shmring.h.
//
// Errors throw shmring::error (status + message). SHMRING_TIMEOUT is not an error:
// consumer::next returns an empty std::optional, producer::reserve throws
// shmring::error with status() == SHMRING_TIMEOUT only if you asked to wait.
//
// Ownership mirrors the C API: segment, producer and consumer own their handles;
// a frame releases itself when destroyed (it must not outlive its consumer); a
// reservation aborts itself unless committed (it must not outlive its producer).
// All types are move-only.
#ifndef SHMRING_HPP
#define SHMRING_HPP

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "shmring.h"

namespace shmring {

class error : public std::runtime_error {
  public:
    error(shmring_status st, const std::string &msg) : std::runtime_error(msg), status_(st) {}
    shmring_status status() const noexcept { return status_; }

  private:
    shmring_status status_;
};

inline void check(shmring_status st) {
    if (st != SHMRING_OK && st != SHMRING_TIMEOUT)
        throw error(st, std::string(shmring_status_name(st)) + ": " + shmring_last_error());
}

inline shmring_config default_config(uint64_t capacity = 64u << 20) {
    shmring_config c;
    check(shmring_config_init(&c));
    c.capacity = capacity;
    return c;
}

inline shmring_meta meta(uint32_t stream, uint32_t kind, uint32_t flags = 0) {
    shmring_meta m{};
    m.stream = stream;
    m.kind = kind;
    m.timestamp_ns = shmring_now_ns();
    m.flags = flags;
    return m;
}

class segment {
  public:
    /// A new ring, see shmring_create: `address` is "create:NAME[,stale=refuse]"
    /// or "memfd:[LABEL]", `cfg` its sizes.
    static segment create(const char *address, const shmring_config &cfg) {
        shmring_segment *s = nullptr;
        check(shmring_create(address, &cfg, &s));
        return segment(s);
    }
    /// The ring `address` names, see shmring_open (it takes over the descriptors an
    /// "fd:" address names).
    static segment open(const char *address, uint32_t timeout_ms = 0) {
        shmring_segment *s = nullptr;
        check(shmring_open(address, timeout_ms, &s));
        return segment(s);
    }
    segment(segment &&o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
    segment &operator=(segment &&o) noexcept {
        if (this != &o) {
            shmring_segment_close(h_);
            h_ = std::exchange(o.h_, nullptr);
        }
        return *this;
    }
    segment(const segment &) = delete;
    segment &operator=(const segment &) = delete;
    ~segment() { shmring_segment_close(h_); }

    int fd() const {
        int v = -1;
        check(shmring_segment_fd(h_, &v));
        return v;
    }
    shmring_stats stats() const {
        shmring_stats s;
        check(shmring_segment_stats(h_, &s));
        return s;
    }
    shmring_geometry geometry() const {
        shmring_geometry g;
        check(shmring_segment_geometry(h_, &g));
        return g;
    }
    const shmring_segment *get() const noexcept { return h_; }

  private:
    explicit segment(shmring_segment *h) : h_(h) {}
    shmring_segment *h_;
};

class producer;

/// Space in the ring; aborted on destruction unless committed.
class reservation {
  public:
    reservation(reservation &&o) noexcept : p_(std::exchange(o.p_, nullptr)), r_(o.r_) {}
    reservation(const reservation &) = delete;
    reservation &operator=(const reservation &) = delete;
    reservation &operator=(reservation &&) = delete;
    ~reservation() {
        if (p_) shmring_producer_abort(p_);
    }
    uint8_t *data() const noexcept { return r_.data; }
    size_t size() const noexcept { return r_.len; }
    void commit(const shmring_meta &m) {
        shmring_producer *p = std::exchange(p_, nullptr);
        check(shmring_producer_commit(p, &m));
    }
    void abort() {
        if (shmring_producer *p = std::exchange(p_, nullptr)) check(shmring_producer_abort(p));
    }

  private:
    friend class producer;
    reservation(shmring_producer *p, shmring_reservation r) : p_(p), r_(r) {}
    shmring_producer *p_;
    shmring_reservation r_;
};

class producer {
  public:
    explicit producer(const segment &s) { check(shmring_producer_attach(s.get(), &h_)); }
    producer(producer &&o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
    producer(const producer &) = delete;
    producer &operator=(const producer &) = delete;
    producer &operator=(producer &&) = delete;
    ~producer() { shmring_producer_close(h_); }

    /// Follows the policy (default: wait up to 1 s). Throws on timeout or error.
    reservation reserve(size_t len) {
        shmring_reservation r;
        shmring_status st = shmring_producer_reserve(h_, len, &r);
        if (st == SHMRING_TIMEOUT)
            throw error(st, std::string("SHMRING_TIMEOUT: ") + shmring_last_error());
        check(st);
        return reservation(h_, r);
    }
    /// Empty if the ring stays full for `timeout_ns` (0: do not wait).
    std::optional<reservation> try_reserve(size_t len, uint64_t timeout_ns = 0) {
        shmring_reservation r;
        shmring_status st = shmring_producer_reserve_timeout(h_, len, timeout_ns, &r);
        if (st == SHMRING_ERR_FULL || st == SHMRING_TIMEOUT) return std::nullopt;
        check(st);
        return reservation(h_, r);
    }
    void send(const void *data, size_t len, const shmring_meta &m) {
        shmring_status st = shmring_producer_send(h_, static_cast<const uint8_t *>(data), len, &m);
        if (st == SHMRING_TIMEOUT)
            throw error(st, std::string("SHMRING_TIMEOUT: ") + shmring_last_error());
        check(st);
    }
    void set_policy(uint32_t policy, uint64_t timeout_ns) {
        check(shmring_producer_set_policy(h_, policy, timeout_ns));
    }

  private:
    shmring_producer *h_ = nullptr;
};

class consumer;

/// A frame in the ring, released on destruction. Must not outlive its consumer.
class frame {
  public:
    frame(frame &&o) noexcept : c_(std::exchange(o.c_, nullptr)), f_(o.f_) {}
    frame(const frame &) = delete;
    frame &operator=(const frame &) = delete;
    frame &operator=(frame &&) = delete;
    ~frame() {
        if (c_) shmring_consumer_release(c_, &f_);
    }
    const uint8_t *data() const noexcept { return f_.data; }
    size_t size() const noexcept { return f_.len; }
    const shmring_meta &meta() const noexcept { return f_.meta; }
    /// The media header, checked against the frame's kind (throws shmring::error
    /// SHMRING_ERR_MEDIA if malformed or not what a record of that kind carries).
    shmring_media_header media() const {
        shmring_media_header h;
        check(shmring_media_parse_for(f_.meta.kind, f_.data, f_.len, &h));
        return h;
    }
    void release() {
        if (shmring_consumer *c = std::exchange(c_, nullptr)) check(shmring_consumer_release(c, &f_));
    }

  private:
    friend class consumer;
    frame(shmring_consumer *c, shmring_frame f) : c_(c), f_(f) {}
    shmring_consumer *c_;
    shmring_frame f_;
};

class consumer {
  public:
    explicit consumer(const segment &s, const shmring_consumer_options *opts = nullptr) {
        check(shmring_consumer_attach(s.get(), opts, &h_));
    }
    consumer(consumer &&o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
    consumer(const consumer &) = delete;
    consumer &operator=(const consumer &) = delete;
    consumer &operator=(consumer &&) = delete;
    ~consumer() { shmring_consumer_close(h_); }

    /// The next frame, waiting up to `timeout_ns` (negative: forever); empty on timeout.
    std::optional<frame> next(int64_t timeout_ns = SHMRING_WAIT_FOREVER) {
        shmring_frame f;
        shmring_status st = shmring_consumer_next(h_, timeout_ns, &f);
        if (st == SHMRING_TIMEOUT) return std::nullopt;
        check(st);
        return frame(h_, f);
    }
    uint64_t outstanding() {
        uint64_t n = 0;
        check(shmring_consumer_outstanding(h_, &n));
        return n;
    }

  private:
    shmring_consumer *h_ = nullptr;
};

}  // namespace shmring

#endif
