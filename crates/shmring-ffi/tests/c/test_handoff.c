/*
 * C tests of the secure hand-off: a consumer serves its memfd on a Unix socket
 * (shmring_listen); a producer process connects (shmring_connect) and writes; an
 * observer (shmring_observe) reads counters through a read-only mapping the kernel
 * will not make writable; a peer of a uid not on the allow-list is refused with
 * the rule named (needs root to run a child under another uid; skipped otherwise).
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

static char dir[64], sock[96];

static shmring_segment *make_ring(int eventfd) {
    shmring_config cfg;
    CHECK_ST(shmring_config_init(&cfg), SHMRING_OK);
    cfg.capacity = 1u << 20;
    cfg.eventfd = (uint32_t)eventfd;
    shmring_segment *s = NULL;
    CHECK_ST(shmring_segment_create_memfd("test-handoff", &cfg, &s), SHMRING_OK);
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
    if (shmring_connect(sock, 0, &s) != SHMRING_OK) {
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
    CHECK_ST(shmring_observe(sock, 0, &o), SHMRING_OK);
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
        execl("/proc/self/exe", "test_handoff", "observe-child", sock, (char *)NULL);
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
    CHECK_ST(shmring_connect("/nonexistent-dir/ring.sock", 100, &none), SHMRING_ERR_NOT_FOUND);
    if (geteuid() != 0) {
        printf("  (not root: the refused-uid case needs a child under another uid; skipped)\n");
    } else {
        pid_t pid = fork();
        if (pid == 0) {
            if (setgid(4243) != 0 || setuid(4243) != 0) _exit(10);
            shmring_segment *cs = NULL;
            shmring_status st = shmring_connect(sock, 0, &cs);
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
    if (shmring_observe(path, 0, &co) != SHMRING_OK) return 3;
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

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "observe-child")) return observe_child(argv[2]);
    snprintf(dir, sizeof dir, "/tmp/shmring-c-handoff-%d", (int)getpid());
    if (mkdir(dir, 0755) != 0) {
        perror("mkdir");
        return 2;
    }
    snprintf(sock, sizeof sock, "%s/ring.sock", dir);
    RUN(test_producer_connects_and_writes);
    RUN(test_observer_is_read_only);
    RUN(test_refused_peer);
    unlink(sock);
    rmdir(dir);
    return check_summary();
}
