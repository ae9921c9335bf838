/*
 * C tests of the secure hand-off: a consumer serves its memfd on a Unix socket
 * (shmring_listen); a producer process connects (shmring_open of "unix:PATH") and
 * writes; an observer (shmring_open_read_only) reads counters through a read-only mapping the kernel
 * will not make writable; a peer of a uid not on the allow-list is refused with
 * the rule named (needs root to run a child under another uid; skipped otherwise);
 * one ring reached by every form of its address (shmring_open).
 * Last line: "N passed, M failed".
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "shmring.h"

static char dir[64], sock[96], sock_address[128]; /* sock_address: "unix:" sock */

static shmring_segment *make_ring(int eventfd) {
    shmring_config cfg;
    CHECK_ST(shmring_config_init(&cfg), SHMRING_OK);
    cfg.capacity = 1u << 20;
    cfg.eventfd = (uint32_t)eventfd;
    shmring_segment *s = NULL;
    CHECK_ST(shmring_create("memfd:test-handoff", &cfg, &s), SHMRING_OK);
    return s;
}

/* Waits for the child, killing it if it does not exit within ~20 s. */
static int reap(pid_t pid) {
    int status = 0;
    for (int i = 0; i < 2000; i++) {
        if (waitpid(pid, &status, WNOHANG) == pid) return status;
        usleep(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return status;
}

/* Child: connect as a producer and send `n` records 0..n-1 (8-byte payloads). */
static void child_produce(int n) {
    shmring_segment *s = NULL;
    shmring_producer *p = NULL;
    if (shmring_open(sock_address, 0, &s) != SHMRING_OK) {
        fprintf(stderr, "  child: %s\n", shmring_last_error());
        _exit(3);
    }
    if (shmring_producer_attach(s, &p) != SHMRING_OK) _exit(4);
    shmring_segment_close(s);
    for (uint64_t i = 0; i < (uint64_t)n; i++) {
        shmring_meta m = {.stream = 5, .kind = SHMRING_KIND_RAW, .timestamp_ns = 0, .flags = 0};
        if (shmring_producer_send(p, (const uint8_t *)&i, sizeof i, &m) != SHMRING_OK) _exit(5);
    }
    shmring_producer_close(p);
    _exit(0);
}

static void test_producer_connects_and_writes(void) {
    shmring_segment *s = make_ring(1);
    shmring_consumer *c = NULL;
    shmring_listener *l = NULL;
    CHECK_ST(shmring_consumer_attach(s, NULL, &c), SHMRING_OK);
    CHECK_ST(shmring_listen(s, sock, NULL, &l), SHMRING_OK);
    pid_t pid = fork();
    if (pid == 0) child_produce(1000);
    int good = 0;
    for (uint64_t i = 0; i < 1000; i++) {
        shmring_frame f;
        if (shmring_consumer_next(c, 10000000000ll, &f) != SHMRING_OK) break;
        uint64_t v = 0;
        memcpy(&v, f.data, sizeof v);
        good += f.len == sizeof v && v == i && f.meta.stream == 5;
        shmring_consumer_release(c, &f);
    }
    CHECK(good == 1000);
    int st = reap(pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    shmring_handoff_stats ls;
    CHECK_ST(shmring_listener_stats(l, &ls), SHMRING_OK);
    CHECK(ls.producers == 1 && ls.refused == 0);
    CHECK_ST(shmring_listener_close(l), SHMRING_OK);
    CHECK(access(sock, F_OK) != 0); /* the socket is removed */
    CHECK_ST(shmring_listener_close(l), SHMRING_ERR_BAD_HANDLE);
    shmring_consumer_close(c);
    shmring_segment_close(s);
}

static void test_observer_is_read_only(void) {
    shmring_segment *s = make_ring(0);
    shmring_consumer *c = NULL;
    shmring_producer *p = NULL;
    shmring_listener *l = NULL;
    CHECK_ST(shmring_consumer_attach(s, NULL, &c), SHMRING_OK);
    CHECK_ST(shmring_producer_attach(s, &p), SHMRING_OK);
    shmring_meta m = {.stream = 1, .kind = SHMRING_KIND_RAW, .timestamp_ns = 0, .flags = 0};
    CHECK_ST(shmring_producer_send(p, (const uint8_t *)"abc", 3, &m), SHMRING_OK);
    CHECK_ST(shmring_listen(s, sock, NULL, &l), SHMRING_OK);

    shmring_observer *o = NULL;
    CHECK_ST(shmring_open_read_only(sock_address, 0, &o), SHMRING_OK);
    shmring_stats st;
    CHECK_ST(shmring_observer_stats(o, &st), SHMRING_OK);
    CHECK(st.records_committed == 1 && st.consumer_attached);
    shmring_geometry g;
    CHECK_ST(shmring_observer_geometry(o, &g), SHMRING_OK);
    CHECK(g.capacity == 1u << 20);
    int fd = -1;
    CHECK_ST(shmring_observer_fd(o, &fd), SHMRING_OK);
    CHECK(fd >= 0);
    /* This process also holds the read-write memfd (it is the consumer), so the
       observer's mapping comes from the descriptor registered first; the
       descriptor received is what a separate observer process holds: check it. */
    const uint8_t *base = NULL;
    size_t len = 0;
    CHECK_ST(shmring_observer_mapping(o, &base, &len), SHMRING_OK);
    CHECK(base != NULL && len == g.total_size);
    CHECK_ST(shmring_observer_close(o), SHMRING_OK);
    CHECK_ST(shmring_observer_stats(o, &st), SHMRING_ERR_BAD_HANDLE);

    /* In a fresh process (exec: no descriptor or registry of this one): the
       received descriptor is O_RDONLY, a writable shared mapping of it fails with
       EACCES, and the read-only mapping cannot be made writable. */
    pid_t pid = fork();
    if (pid == 0) {
        execl("/proc/self/exe", "test_handoff", "observe-child", sock_address, (char *)NULL);
        _exit(120);
    }
    int cs = reap(pid);
    CHECK(WIFEXITED(cs) && WEXITSTATUS(cs) == 0);
    if (!(WIFEXITED(cs) && WEXITSTATUS(cs) == 0))
        fprintf(stderr, "  observer child: exit %d\n", WEXITSTATUS(cs));
    shmring_handoff_stats ls;
    CHECK_ST(shmring_listener_stats(l, &ls), SHMRING_OK);
    CHECK(ls.observers == 2);
    shmring_listener_close(l);
    shmring_producer_close(p);
    shmring_consumer_close(c);
    shmring_segment_close(s);
}

static void test_refused_peer(void) {
    shmring_segment *s = make_ring(0);
    shmring_consumer *c = NULL;
    shmring_listener *l = NULL;
    CHECK_ST(shmring_consumer_attach(s, NULL, &c), SHMRING_OK);
    uint32_t allowed[] = {4242};
    shmring_listen_options opts;
    CHECK_ST(shmring_listen_options_init(&opts), SHMRING_OK);
    CHECK(opts.max_pending > 0 && opts.hello_timeout_ms > 0);
    opts.allow_uids = allowed;
    opts.n_allow_uids = 1;
    CHECK_ST(shmring_listen(s, sock, &opts, &l), SHMRING_OK);
    /* Misuse: a count without an array. */
    shmring_listener *bad = NULL;
    opts.allow_uids = NULL;
    CHECK_ST(shmring_listen(s, sock, &opts, &bad), SHMRING_ERR_NULL);
    /* Nobody at this path. */
    shmring_segment *none = NULL;
    CHECK_ST(shmring_open("unix:/nonexistent-dir/ring.sock", 100, &none), SHMRING_ERR_NOT_FOUND);
    if (geteuid() != 0) {
        printf("  (not root: the refused-uid case needs a child under another uid; skipped)\n");
    } else {
        pid_t pid = fork();
        if (pid == 0) {
            if (setgid(4243) != 0 || setuid(4243) != 0) _exit(10);
            shmring_segment *cs = NULL;
            shmring_status st = shmring_open(sock_address, 0, &cs);
            const char *e = shmring_last_error();
            int named = strstr(e, "peer-credentials") != NULL && strstr(e, "uid 4243") != NULL;
            _exit(st == SHMRING_ERR_REFUSED && named ? 0 : 11);
        }
        int cs = reap(pid);
        CHECK(WIFEXITED(cs) && WEXITSTATUS(cs) == 0);
        shmring_handoff_stats ls;
        CHECK_ST(shmring_listener_stats(l, &ls), SHMRING_OK);
        CHECK(ls.refused_credentials == 1 && ls.refused == 1 && ls.producers == 0);
    }
    shmring_listener_close(l);
    shmring_consumer_close(c);
    shmring_segment_close(s);
}

/* The observer child, in a process of its own. Exit status: 0 all checks hold. */
static int observe_child(const char *path) {
    shmring_observer *co = NULL;
    if (shmring_open_read_only(path, 0, &co) != SHMRING_OK) return 3;
    int cfd = -1;
    shmring_observer_fd(co, &cfd);
    shmring_geometry cg;
    shmring_observer_geometry(co, &cg);
    if ((fcntl(cfd, F_GETFL) & O_ACCMODE) != O_RDONLY) return 4;
    void *w = mmap(NULL, cg.total_size, PROT_READ | PROT_WRITE, MAP_SHARED, cfd, 0);
    if (w != MAP_FAILED || errno != EACCES) return 5;
    const uint8_t *b = NULL;
    size_t n = 0;
    shmring_observer_mapping(co, &b, &n);
    if (mprotect((void *)b, n, PROT_READ | PROT_WRITE) == 0 || errno != EACCES) return 6;
    shmring_stats st;
    if (shmring_observer_stats(co, &st) != SHMRING_OK || st.records_committed != 1) return 7;
    shmring_observer_close(co);
    return 0;
}

/* One ring reached by every form of its address (shmring_open): created by name,
   by name, by descriptors, through a consumer's socket; read-only and as a tap;
   bad text named; a stale ring replaced, a live one refused. */
static void test_open_by_address(void) {
    char name[64], addr[160];
    snprintf(name, sizeof name, "shmring-c-address-%d", (int)getpid());
    snprintf(addr, sizeof addr, "create:%s,capacity=1M", name);
    shmring_segment *s = NULL;
    CHECK_ST(shmring_open(addr, 0, &s), SHMRING_OK);
    shmring_consumer *c = NULL;
    CHECK_ST(shmring_consumer_attach(s, NULL, &c), SHMRING_OK);
    shmring_geometry g;
    CHECK_ST(shmring_segment_geometry(s, &g), SHMRING_OK);
    CHECK(g.capacity == 1u << 20);

    /* By name, and by descriptors (copies this test hands over). */
    shmring_segment *byname = NULL, *byfd = NULL;
    CHECK_ST(shmring_open(name, 0, &byname), SHMRING_OK);
    int fds[3], n = 0;
    size_t nfds = 0;
    CHECK_ST(shmring_segment_descriptors(s, fds, 3, &nfds), SHMRING_OK);
    int pos = snprintf(addr, sizeof addr, "fd:");
    for (size_t i = 0; i < nfds; i++)
        pos += snprintf(addr + pos, sizeof addr - (size_t)pos, "%s%d", i ? "," : "", dup(fds[i]));
    CHECK_ST(shmring_open(addr, 0, &byfd), SHMRING_OK);
    shmring_segment *reached[] = {byname, byfd};
    for (int i = 0; i < 2; i++) {
        shmring_producer *p = NULL;
        CHECK_ST(shmring_producer_attach(reached[i], &p), SHMRING_OK);
        shmring_meta m = {.stream = (uint32_t)i, .kind = SHMRING_KIND_RAW, .timestamp_ns = 0, .flags = 0};
        CHECK_ST(shmring_producer_send(p, (const uint8_t *)"abc", 3, &m), SHMRING_OK);
        shmring_producer_close(p);
        shmring_segment_close(reached[i]);
        n++;
    }
    for (int i = 0; i < n; i++) {
        shmring_frame f;
        CHECK_ST(shmring_consumer_next(c, 1000000000ll, &f), SHMRING_OK);
        CHECK(f.len == 3 && f.meta.stream == (uint32_t)i);
        shmring_consumer_release(c, &f);
    }

    /* Read-only: an observer and a tap, by name. */
    shmring_observer *o = NULL;
    CHECK_ST(shmring_open_read_only(name, 0, &o), SHMRING_OK);
    shmring_stats st;
    CHECK_ST(shmring_observer_stats(o, &st), SHMRING_OK);
    CHECK(st.records_committed == 2);
    shmring_observer_close(o);
    shmring_tap *t = NULL;
    CHECK_ST(shmring_tap_open(name, NULL, &t), SHMRING_OK);
    CHECK_ST(shmring_tap_close(t), SHMRING_OK);

    /* A live ring is refused; the same text with a memfd served on a socket. */
    snprintf(addr, sizeof addr, "create:%s", name);
    shmring_segment *again = NULL;
    CHECK_ST(shmring_open(addr, 0, &again), SHMRING_ERR_EXISTS);
    CHECK_MSG("its consumer is alive");
    CHECK(again == NULL);
    shmring_segment *m = NULL;
    CHECK_ST(shmring_open("memfd:c-test,capacity=64K", 0, &m), SHMRING_OK);
    shmring_consumer *mc = NULL;
    CHECK_ST(shmring_consumer_attach(m, NULL, &mc), SHMRING_OK);
    shmring_listener *l = NULL;
    CHECK_ST(shmring_listen(m, sock, NULL, &l), SHMRING_OK);
    snprintf(addr, sizeof addr, "unix:%s", sock);
    shmring_segment *bysock = NULL;
    CHECK_ST(shmring_open(addr, 0, &bysock), SHMRING_OK);
    CHECK_ST(shmring_segment_geometry(bysock, &g), SHMRING_OK);
    CHECK(g.capacity == 64u << 10);
    shmring_segment_close(bysock);
    CHECK_ST(shmring_open_read_only(sock, 0, &o), SHMRING_OK); /* a path is a socket */
    shmring_observer_close(o);
    shmring_listener_close(l);
    shmring_consumer_close(mc);
    shmring_segment_close(m);

    /* Bad text: SHMRING_ERR_CONFIG naming what is wrong; no descriptor is taken. */
    CHECK_ST(shmring_open("fd:3,x", 0, &again), SHMRING_ERR_CONFIG);
    CHECK_MSG("\"x\" is not a descriptor number");
    CHECK_ST(shmring_open("tcp:1.2.3.4", 0, &again), SHMRING_ERR_CONFIG);
    CHECK_MSG("unknown form");
    CHECK_ST(shmring_open_read_only("memfd:", 0, &o), SHMRING_ERR_CONFIG);
    CHECK_ST(shmring_open(NULL, 0, &again), SHMRING_ERR_NULL);

    /* A ring left by a consumer that is gone: refused with stale=refuse, replaced
       by create:. */
    shmring_consumer_close(c);
    CHECK_ST(shmring_segment_persist(s), SHMRING_OK);
    shmring_segment_close(s);
    pid_t pid = fork();
    if (pid == 0) {
        shmring_segment *cs = NULL;
        shmring_consumer *cc = NULL;
        if (shmring_open(name, 0, &cs) != SHMRING_OK) _exit(3);
        if (shmring_consumer_attach(cs, NULL, &cc) != SHMRING_OK) _exit(4);
        _exit(0); /* gone without closing: its ring stays, stale */
    }
    int cs = reap(pid);
    CHECK(WIFEXITED(cs) && WEXITSTATUS(cs) == 0);
    /* shmring_create means the same: its config sizes the ring that replaces it */
    shmring_config cfg;
    CHECK_ST(shmring_config_init(&cfg), SHMRING_OK);
    cfg.capacity = 128u << 10;
    snprintf(addr, sizeof addr, "create:%s,stale=refuse", name);
    CHECK_ST(shmring_open(addr, 0, &again), SHMRING_ERR_EXISTS);
    CHECK_MSG("its consumer is gone");
    CHECK_ST(shmring_create(addr, &cfg, &again), SHMRING_ERR_EXISTS);
    CHECK_MSG("its consumer is gone");
    snprintf(addr, sizeof addr, "create:%s", name);
    CHECK_ST(shmring_create(addr, &cfg, &again), SHMRING_OK);
    shmring_stats fresh;
    CHECK_ST(shmring_segment_stats(again, &fresh), SHMRING_OK);
    CHECK(fresh.records_committed == 0);
    CHECK_ST(shmring_segment_geometry(again, &g), SHMRING_OK);
    CHECK(g.capacity == 128u << 10);
    CHECK_ST(shmring_segment_close(again), SHMRING_OK);
    char path[96];
    snprintf(path, sizeof path, "/dev/shm/%s", name);
    CHECK(access(path, F_OK) != 0);
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "observe-child")) return observe_child(argv[2]);
    snprintf(dir, sizeof dir, "/tmp/shmring-c-handoff-%d", (int)getpid());
    if (mkdir(dir, 0755) != 0) {
        perror("mkdir");
        return 2;
    }
    snprintf(sock, sizeof sock, "%s/ring.sock", dir);
    snprintf(sock_address, sizeof sock_address, "unix:%s", sock);
    RUN(test_producer_connects_and_writes);
    RUN(test_observer_is_read_only);
    RUN(test_refused_peer);
    RUN(test_open_by_address);
    unlink(sock);
    rmdir(dir);
    return check_summary();
}
