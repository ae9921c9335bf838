/*
 * The producer path inside a seccomp sandbox: runs examples/c/producer with
 * --sandbox (allow-list of examples/c/sandbox.h, entered after attach; anything
 * else kills it with SIGSYS) against a consumer here, which verifies every frame.
 * Covers a blocking producer, a producer hitting the full-ring, timeout and
 * liveness-check paths, an eventfd ring, a producer that receives its descriptors
 * over the consumer's socket (shmring_listen / --connect) before entering the
 * sandbox, and a control: a forbidden call is fatal.
 *
 * usage: test_sandbox PATH/TO/producer        Last line: "N passed, M failed".
 */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "frame_pattern.h"
#include "shmring.h"

static const char *producer_path;
static int passed, failed;

#define W 640
#define H 360

static pid_t spawn(shmring_segment *s, char **extra) {
    int fds[3];
    size_t nfds = 0;
    if (shmring_segment_descriptors(s, fds, 3, &nfds) != SHMRING_OK) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        /* the child gets the ring's descriptors as fds 3, 4 (and 5), nothing else */
        int tmp[3];
        for (size_t i = 0; i < nfds; i++)
            if ((tmp[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 10)) < 0) _exit(120);
        for (size_t i = 0; i < nfds; i++)
            if (dup2(tmp[i], 3 + (int)i) < 0) _exit(120);
        static const char *lists[] = {"3", "3,4", "3,4,5"};
        char *argv[32] = {(char *)producer_path, "--fds", (char *)lists[nfds - 1], "--width", "640", "--height", "360"};
        int n = 7;
        for (int i = 0; extra[i] && n < 31; i++) argv[n++] = extra[i];
        argv[n] = NULL;
        execv(producer_path, argv);
        _exit(121);
    }
    return pid;
}

/* Waits for the child, killing it if it does not exit within ~10 s. */
static int reap(pid_t pid) {
    int status = 0;
    for (int i = 0; i < 1000; i++) {
        if (waitpid(pid, &status, WNOHANG) == pid) return status;
        usleep(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return status;
}

static int consume(shmring_consumer *c, int frames, int stream) {
    int good = 0;
    for (int i = 0; i < frames; i++) {
        shmring_frame f;
        shmring_status st = shmring_consumer_next(c, 5000000000ll, &f);
        if (st != SHMRING_OK) {
            fprintf(stderr, "  frame %d: %s: %s\n", i, shmring_status_name(st), shmring_last_error());
            break;
        }
        shmring_media_header h;
        int ok = f.meta.stream == (uint32_t)stream && f.meta.kind == SHMRING_KIND_VIDEO &&
                 shmring_media_parse(f.data, f.len, &h) == SHMRING_OK && h.width == W &&
                 h.height == H && h.format == SHMRING_FORMAT_I420 && h.sequence == (uint64_t)i &&
                 pattern_payload_checksum(f.data, f.len) == f.meta.flags;
        if (!ok) fprintf(stderr, "  frame %d failed verification\n", i);
        good += ok;
        shmring_consumer_release(c, &f);
    }
    return good;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void run_case(const char *name, int eventfd_ring, int delay_ms, int frames, char **extra) {
    shmring_config cfg;
    shmring_config_init(&cfg);
    cfg.capacity = 16u << 20;
    cfg.eventfd = (uint32_t)eventfd_ring;
    shmring_segment *s = NULL;
    shmring_consumer *c = NULL;
    int ok = shmring_create("memfd:sandbox-test", &cfg, &s) == SHMRING_OK &&
             shmring_consumer_attach(s, NULL, &c) == SHMRING_OK;
    pid_t pid = ok ? spawn(s, extra) : -1;
    if (delay_ms) sleep_ms(delay_ms); /* let the ring fill: full-ring paths */
    int good = ok ? consume(c, frames, 1) : 0;
    int status = pid > 0 ? reap(pid) : -1;
    shmring_stats st;
    shmring_segment_stats(s, &st);
    int pass = ok && good == frames && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!pass)
        fprintf(stderr, "  %s: %d/%d frames verified, child %s %d\n", name, good, frames,
                WIFSIGNALED(status) ? "killed by signal" : "exit", WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    printf("%s %s (%d frames verified; ring: %llu drops_full, %llu producer waits)\n",
           pass ? "ok  " : "FAIL", name, good, (unsigned long long)st.drops_full,
           (unsigned long long)st.producer_waits);
    pass ? passed++ : failed++;
    shmring_consumer_close(c);
    shmring_segment_close(s);
}

/* The producer gets the ring (and its eventfd) from the consumer's socket, with no
   inherited descriptor, then enters the sandbox. */
static void run_connect_case(void) {
    shmring_config cfg;
    shmring_config_init(&cfg);
    cfg.capacity = 16u << 20;
    cfg.eventfd = 1;
    char dir[64], sock[96];
    snprintf(dir, sizeof dir, "/tmp/shmring-sandbox-%d", (int)getpid());
    snprintf(sock, sizeof sock, "%s/ring.sock", dir);
    shmring_segment *s = NULL;
    shmring_consumer *c = NULL;
    shmring_listener *l = NULL;
    int ok = mkdir(dir, 0700) == 0 &&
             shmring_create("memfd:sandbox-connect", &cfg, &s) == SHMRING_OK &&
             shmring_consumer_attach(s, NULL, &c) == SHMRING_OK &&
             shmring_listen(s, sock, NULL, &l) == SHMRING_OK;
    if (!ok) fprintf(stderr, "  setup: %s\n", shmring_last_error());
    pid_t pid = -1;
    if (ok && (pid = fork()) == 0) {
        char *argv[] = {(char *)producer_path, "--connect", sock, "--width", "640", "--height",
                        "360", "--frames", "300", "--sandbox", "--quiet", NULL};
        execv(producer_path, argv);
        _exit(121);
    }
    int good = ok ? consume(c, 300, 1) : 0;
    int status = pid > 0 ? reap(pid) : -1;
    shmring_handoff_stats ls = {0};
    if (l) shmring_listener_stats(l, &ls);
    int pass = ok && good == 300 && ls.producers == 1 && WIFEXITED(status) &&
               WEXITSTATUS(status) == 0;
    if (!pass)
        fprintf(stderr, "  connect: %d/300 frames verified, child %s %d\n", good,
                WIFSIGNALED(status) ? "killed by signal" : "exit",
                WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    printf("%s sandboxed_producer_connected_over_socket (%d frames verified)\n",
           pass ? "ok  " : "FAIL", good);
    pass ? passed++ : failed++;
    shmring_listener_close(l);
    shmring_consumer_close(c);
    shmring_segment_close(s);
    rmdir(dir);
}

static void run_violation(void) {
    shmring_config cfg;
    shmring_config_init(&cfg);
    cfg.capacity = 1u << 20;
    shmring_segment *s = NULL;
    shmring_consumer *c = NULL;
    shmring_create("memfd:sandbox-violation", &cfg, &s);
    shmring_consumer_attach(s, NULL, &c);
    char *extra[] = {"--frames", "1", "--sandbox", "--violate", "--quiet", NULL};
    pid_t pid = spawn(s, extra);
    int status = reap(pid);
    int pass = WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS;
    printf("%s forbidden_syscall_is_fatal (child %s %d)\n", pass ? "ok  " : "FAIL",
           WIFSIGNALED(status) ? "killed by signal" : "exit",
           WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    pass ? passed++ : failed++;
    shmring_consumer_close(c);
    shmring_segment_close(s);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_sandbox PATH/TO/producer\n");
        return 2;
    }
    producer_path = argv[1];
    pattern_init();
    char *block[] = {"--frames", "300", "--sandbox", "--quiet", NULL};
    run_case("sandboxed_producer_blocking", 0, 0, 300, block);
    char *fail[] = {"--frames", "200", "--sandbox", "--policy", "fail", "--timeout-ms", "20", "--quiet", NULL};
    run_case("sandboxed_producer_full_ring_and_timeouts", 0, 300, 200, fail);
    run_case("sandboxed_producer_eventfd_ring", 1, 0, 300, block);
    run_connect_case();
    run_violation();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
