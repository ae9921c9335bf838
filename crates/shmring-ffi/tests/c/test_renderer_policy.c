/*
 * The C producer inside a browser renderer's seccomp policy (renderer_policy.h,
 * written from Chromium's renderer and baseline policies; anything they do not
 * allow kills the process). Each role is this program again, in its own process:
 *
 *  - renderer_policy_producer_1000_frames: the producer attaches from inherited
 *    descriptors, enters the policy, and commits 1,000 frames of mixed sizes (8 B
 *    to 192 KiB) into a 1 MiB ring. Meanwhile the ring fills before any consumer
 *    exists (its waits for space end in SHMRING_ERR_NO_CONSUMER), a consumer
 *    attaches and pauses (the ring is full while it lives: SHMRING_TIMEOUT), is
 *    killed with SIGKILL holding frames (NO_CONSUMER again), and a new consumer
 *    process takes the ring over. Every frame arrives intact; each exactly once,
 *    except the frames the killed consumer held, which come again.
 *  - renderer_policy_attach_inside: a producer that enters the policy first and
 *    attaches afterwards (a renderer whose descriptors arrive once it is
 *    sandboxed), 200 frames.
 *  - renderer_policy_is_enforced: under the policy open(2) and fork(2) fail with
 *    EPERM, and fcntl(F_SETOWN) kills the process with SIGSYS.
 *
 * usage: test_renderer_policy            Last line: "N passed, M failed".
 */
#include "renderer_policy.h"

#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "shmring.h"

#define FRAMES 1000
#define HELD 4 /* frames a consumer holds at once */

static int passed, failed;

/* ---- frames: index, size and bytes all follow from the index ---------------- */

static size_t frame_len(uint32_t i) {
    uint32_t h = i * 2654435761u;
    uint32_t r = h % 100;
    if (r < 60) return 8 + (h >> 8) % 4096;         /* small: audio, metadata */
    if (r < 90) return 4096 + (h >> 8) % 61440;     /* up to 64 KiB */
    return 65536 + (h >> 8) % 131072;               /* up to 192 KiB */
}

static void frame_fill(uint32_t i, uint8_t *p, size_t len) {
    memcpy(p, &i, 4);
    uint32_t x = i * 7919u + 1;
    for (size_t j = 4; j < len; j++) {
        x = x * 1103515245u + 12345u;
        p[j] = (uint8_t)(x >> 24);
    }
}

/* The frame's index if it is intact, else -1. */
static long frame_check(const uint8_t *p, size_t len) {
    uint32_t i;
    if (len < 8) return -1;
    memcpy(&i, p, 4);
    if (i >= FRAMES || frame_len(i) != len) return -1;
    uint32_t x = i * 7919u + 1;
    for (size_t j = 4; j < len; j++) {
        x = x * 1103515245u + 12345u;
        if (p[j] != (uint8_t)(x >> 24)) return -1;
    }
    return i;
}

/* One line to stdout with write(2) alone (no stdio buffer, fine under the policy). */
static void say(const char *fmt, ...) {
    char buf[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (n > (int)sizeof buf - 2) n = (int)sizeof buf - 2;
    buf[n++] = '\n';
    if (write(1, buf, (size_t)n) < 0) _exit(3);
}

/* ---- the roles, in child processes ------------------------------------------ */

/* The ring's descriptors, as the orchestrator hands them over: fds 3 and 4. */
static const char inherited[] = "fd:3,4";

/* Produces `frames` frames; enters the policy before or after attaching. */
static int role_producer(int frames, int sandbox_first) {
    if (sandbox_first && renderer_policy_enter() != 0) return 4;
    shmring_segment *seg = NULL;
    shmring_producer *p = NULL;
    if (shmring_open(inherited, 0, &seg) != SHMRING_OK ||
        shmring_producer_attach(seg, &p) != SHMRING_OK) {
        fprintf(stderr, "producer: attach: %s\n", shmring_last_error());
        return 2;
    }
    if (!sandbox_first && renderer_policy_enter() != 0) return 4;
    int no_consumer = 0, full = 0;
    for (uint32_t i = 0; i < (uint32_t)frames; i++) {
        size_t len = frame_len(i);
        shmring_reservation r;
        shmring_status st = shmring_producer_reserve_timeout(p, len, 50000000ull, &r);
        if (st == SHMRING_TIMEOUT || st == SHMRING_ERR_NO_CONSUMER) {
            /* Say each change once: the orchestrator waits for these. */
            if (st == SHMRING_ERR_NO_CONSUMER && !no_consumer) say("NO_CONSUMER %u", i);
            if (st == SHMRING_TIMEOUT && !full) say("FULL %u", i);
            no_consumer = st == SHMRING_ERR_NO_CONSUMER;
            full = st == SHMRING_TIMEOUT;
            i--;
            continue;
        }
        if (st != SHMRING_OK) {
            fprintf(stderr, "producer: reserve %u: %s: %s\n", i, shmring_status_name(st),
                    shmring_last_error());
            return 2;
        }
        no_consumer = full = 0;
        frame_fill(i, r.data, r.len);
        shmring_meta meta = {.stream = 1, .kind = SHMRING_KIND_RAW, .timestamp_ns = shmring_now_ns()};
        st = shmring_producer_commit(p, &meta);
        if (st != SHMRING_OK) {
            fprintf(stderr, "producer: commit %u: %s: %s\n", i, shmring_status_name(st),
                    shmring_last_error());
            return 2;
        }
    }
    shmring_producer_close(p);
    shmring_segment_close(seg);
    say("DONE");
    return 0;
}

/* Consumes, saying "F index" for each intact frame (BAD for any other), holding
 * the last HELD frames. With `stop_after`, it pauses once after 100 frames and
 * stops taking frames after `stop_after` (holding its last ones) until killed;
 * otherwise it ends after the last frame. */
static int role_consumer(int stop_after) {
    shmring_segment *seg = NULL;
    shmring_consumer *c = NULL;
    if (shmring_open(inherited, 0, &seg) != SHMRING_OK ||
        shmring_consumer_attach(seg, NULL, &c) != SHMRING_OK) {
        fprintf(stderr, "consumer: attach: %s\n", shmring_last_error());
        return 2;
    }
    say("ATTACHED");
    shmring_frame held[HELD];
    int nheld = 0, got = 0;
    for (;;) {
        if (stop_after && got == stop_after) {
            say("PAUSED"); /* its releases are done: what it holds stays held */
            for (;;) pause(); /* until killed */
        }
        if (stop_after && got == 100) {
            struct timespec ts = {0, 300000000};
            nanosleep(&ts, NULL); /* the producer fills the ring meanwhile */
        }
        shmring_frame f;
        shmring_status st = shmring_consumer_next(c, 10000000000ll, &f);
        if (st != SHMRING_OK) {
            fprintf(stderr, "consumer: next: %s: %s\n", shmring_status_name(st),
                    shmring_last_error());
            return 2;
        }
        long i = frame_check(f.data, f.len);
        if (i < 0) say("BAD %llu", (unsigned long long)f.seq);
        else say("F %ld", i);
        got++;
        if (nheld == HELD) {
            shmring_consumer_release(c, &held[0]);
            memmove(held, held + 1, sizeof held[0] * (HELD - 1));
            nheld--;
        }
        held[nheld++] = f;
        if (!stop_after && i == FRAMES - 1) break;
    }
    for (int k = 0; k < nheld; k++) shmring_consumer_release(c, &held[k]);
    shmring_consumer_close(c);
    shmring_segment_close(seg);
    say("END");
    return 0;
}

/* Under the policy: open and fork fail with EPERM, then a forbidden fcntl. */
static int role_violate(void) {
    if (renderer_policy_enter() != 0) return 4;
    errno = 0;
    int fd = open("/etc/hostname", O_RDONLY);
    say("open %s", fd < 0 && errno == EPERM ? "EPERM" : "allowed");
    errno = 0;
    pid_t pid = fork();
    if (pid == 0) _exit(0);
    say("fork %s", pid < 0 && errno == EPERM ? "EPERM" : "allowed");
    fcntl(1, F_SETOWN, getpid()); /* not on the list: SIGSYS */
    say("fcntl F_SETOWN allowed");
    return 0;
}

/* ---- the orchestrator ------------------------------------------------------- */

typedef struct {
    pid_t pid;
    int out; /* read end of its stdout */
    char buf[4096];
    size_t have;
} child;

/* Runs this program as `role` with the ring's descriptors as fds 3 and 4. */
static int spawn(child *ch, const char *role, const int *fds, size_t nfds) {
    int pipefd[2];
    memset(ch, 0, sizeof *ch);
    ch->pid = -1;
    ch->out = -1;
    if (pipe(pipefd) != 0) return -1;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        int tmp[2];
        for (size_t i = 0; i < nfds; i++)
            if ((tmp[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 10)) < 0) _exit(120);
        for (size_t i = 0; i < nfds; i++)
            if (dup2(tmp[i], 3 + (int)i) < 0) _exit(120);
        if (dup2(pipefd[1], 1) < 0) _exit(120);
        char *argv[] = {"test_renderer_policy", (char *)role, NULL};
        execv("/proc/self/exe", argv);
        _exit(121);
    }
    close(pipefd[1]);
    ch->pid = pid;
    ch->out = pipefd[0];
    return 0;
}

/* The child's next line (without '\n') within `ms`, or NULL. */
static const char *next_line(child *ch, int ms, char *line, size_t cap) {
    for (;;) {
        char *nl = memchr(ch->buf, '\n', ch->have);
        if (nl) {
            size_t n = (size_t)(nl - ch->buf);
            size_t k = n < cap - 1 ? n : cap - 1;
            memcpy(line, ch->buf, k);
            line[k] = '\0';
            memmove(ch->buf, nl + 1, ch->have - n - 1);
            ch->have -= n + 1;
            return line;
        }
        struct pollfd pfd = {ch->out, POLLIN, 0};
        if (poll(&pfd, 1, ms) <= 0) return NULL;
        ssize_t r = read(ch->out, ch->buf + ch->have, sizeof ch->buf - ch->have);
        if (r <= 0) return NULL;
        ch->have += (size_t)r;
    }
}

/* Reads the child's lines until one starts with `prefix` (within `ms` each);
 * every "F n" line on the way is counted in `seen`. */
static int wait_for(child *ch, const char *prefix, int ms, int *seen, int *bad, char *line,
                    size_t cap) {
    while (next_line(ch, ms, line, cap)) {
        long n;
        if (seen && sscanf(line, "F %ld", &n) == 1 && n >= 0 && n < FRAMES) seen[n]++;
        if (bad && !strncmp(line, "BAD", 3)) (*bad)++;
        if (!strncmp(line, prefix, strlen(prefix))) return 1;
    }
    return 0;
}

/* Exit status of the child, killing it if it does not end within ~10 s. */
static int reap(child *ch) {
    int status = 0;
    if (ch->pid <= 0) return -1;
    for (int i = 0; i < 1000; i++) {
        if (waitpid(ch->pid, &status, WNOHANG) == ch->pid) goto done;
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    kill(ch->pid, SIGKILL);
    waitpid(ch->pid, &status, 0);
done:
    ch->pid = -1;
    if (ch->out >= 0) close(ch->out);
    ch->out = -1;
    return status;
}

static int exited_ok(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

static void report(int ok, const char *name, const char *fmt, ...) {
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    printf("%s %s (%s)\n", ok ? "ok  " : "FAIL", name, buf);
    fflush(stdout);
    ok ? passed++ : failed++;
}

static shmring_segment *ring(int fds[2], size_t *nfds) {
    shmring_config cfg;
    shmring_config_init(&cfg);
    cfg.capacity = 1u << 20;
    shmring_segment *s = NULL;
    if (shmring_create("memfd:renderer-policy", &cfg, &s) != SHMRING_OK ||
        shmring_segment_descriptors(s, fds, 2, nfds) != SHMRING_OK || *nfds != 2) {
        fprintf(stderr, "  ring: %s\n", shmring_last_error());
        return NULL;
    }
    return s;
}

static void producer_1000_frames(void) {
    int fds[2], a_seen[FRAMES] = {0}, b_seen[FRAMES] = {0}, bad = 0;
    size_t nfds = 0;
    char line[128], held_note[64] = "";
    child prod, a, b;
    int ok = 1, timeouts = 0;
    shmring_segment *s = ring(fds, &nfds);
    if (!s || spawn(&prod, "producer", fds, nfds) != 0) {
        report(0, "renderer_policy_producer_1000_frames", "setup");
        return;
    }
    /* No consumer yet: the ring fills, the waits end in NO_CONSUMER. */
    ok &= wait_for(&prod, "NO_CONSUMER", 10000, NULL, NULL, line, sizeof line);
    /* A consumer that pauses after 100 frames (the ring is full while it lives)
       and is killed after 400, holding its last HELD frames. */
    ok &= spawn(&a, "consumer-killed", fds, nfds) == 0;
    ok &= wait_for(&a, "ATTACHED", 10000, NULL, NULL, line, sizeof line);
    int last_a[HELD] = {-1, -1, -1, -1}, got_a = 0;
    while (ok && got_a < 400 && next_line(&a, 10000, line, sizeof line)) {
        long n;
        if (sscanf(line, "F %ld", &n) == 1 && n >= 0 && n < FRAMES) {
            a_seen[n]++;
            last_a[got_a % HELD] = (int)n;
            got_a++;
        } else if (!strncmp(line, "BAD", 3)) bad++;
    }
    ok &= got_a == 400 && wait_for(&a, "PAUSED", 10000, NULL, &bad, line, sizeof line);
    /* The producer met the full ring while the consumer lived. */
    timeouts = wait_for(&prod, "FULL", 10000, NULL, NULL, line, sizeof line);
    kill(a.pid, SIGKILL);
    int a_status = reap(&a);
    ok &= WIFSIGNALED(a_status) && WTERMSIG(a_status) == SIGKILL;
    /* Its waits end in NO_CONSUMER again; then a new consumer takes over. */
    ok &= wait_for(&prod, "NO_CONSUMER", 10000, NULL, NULL, line, sizeof line);
    ok &= spawn(&b, "consumer", fds, nfds) == 0;
    ok &= wait_for(&b, "END", 20000, b_seen, &bad, line, sizeof line);
    ok &= wait_for(&prod, "DONE", 10000, NULL, NULL, line, sizeof line);
    int p_status = reap(&prod), b_status = reap(&b);
    /* Every frame intact; twice only the ones the killed consumer held. */
    int missing = 0, twice = 0, twice_unheld = 0;
    for (int i = 0; i < FRAMES; i++) {
        int n = a_seen[i] + b_seen[i], was_held = 0;
        for (int k = 0; k < HELD; k++) was_held |= last_a[k] == i;
        missing += n == 0;
        twice += n == 2;
        twice_unheld += n > 2 || (n == 2 && !was_held);
    }
    snprintf(held_note, sizeof held_note, "%d again of %d held", twice, HELD);
    ok &= timeouts && missing == 0 && bad == 0 && twice_unheld == 0 && twice <= HELD &&
          exited_ok(p_status) && exited_ok(b_status);
    if (!exited_ok(p_status))
        fprintf(stderr, "  producer %s %d\n", WIFSIGNALED(p_status) ? "killed by signal" : "exit",
                WIFSIGNALED(p_status) ? WTERMSIG(p_status) : WEXITSTATUS(p_status));
    report(ok, "renderer_policy_producer_1000_frames",
           "%d frames, %d missing, %d damaged, %s, ring full: %s, consumer killed and restarted",
           FRAMES, missing, bad, held_note, timeouts ? "yes" : "no");
    shmring_segment_close(s);
}

static void attach_inside(void) {
    int fds[2], seen[FRAMES] = {0}, bad = 0;
    size_t nfds = 0;
    char line[128];
    child prod, c;
    shmring_segment *s = ring(fds, &nfds);
    int ok = s && spawn(&c, "consumer", fds, nfds) == 0 &&
             wait_for(&c, "ATTACHED", 10000, NULL, NULL, line, sizeof line) &&
             spawn(&prod, "producer-sandboxed-first", fds, nfds) == 0;
    ok = ok && wait_for(&prod, "DONE", 20000, NULL, NULL, line, sizeof line);
    /* The consumer ends at frame 999: this producer sends 200, so stop it. */
    if (c.pid > 0) {
        while (next_line(&c, 200, line, sizeof line)) {
            long n;
            if (sscanf(line, "F %ld", &n) == 1 && n >= 0 && n < FRAMES) seen[n]++;
            else if (!strncmp(line, "BAD", 3)) bad++;
        }
        kill(c.pid, SIGKILL);
        reap(&c);
    }
    int p_status = prod.pid > 0 ? reap(&prod) : -1;
    int got = 0;
    for (int i = 0; i < 200; i++) got += seen[i] == 1;
    ok = ok && got == 200 && bad == 0 && exited_ok(p_status);
    report(ok, "renderer_policy_attach_inside", "%d/200 frames, producer %s %d", got,
           WIFSIGNALED(p_status) ? "killed by signal" : "exit",
           WIFSIGNALED(p_status) ? WTERMSIG(p_status) : WEXITSTATUS(p_status));
    if (s) shmring_segment_close(s);
}

static void enforced(void) {
    char line[128];
    child v;
    int open_eperm = 0, fork_eperm = 0;
    if (spawn(&v, "violate", NULL, 0) != 0) {
        report(0, "renderer_policy_is_enforced", "spawn");
        return;
    }
    while (next_line(&v, 10000, line, sizeof line)) {
        open_eperm |= !strcmp(line, "open EPERM");
        fork_eperm |= !strcmp(line, "fork EPERM");
    }
    int status = reap(&v);
    int sigsys = WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS;
    report(open_eperm && fork_eperm && sigsys, "renderer_policy_is_enforced",
           "open %s, fork %s, fcntl(F_SETOWN) %s", open_eperm ? "EPERM" : "not refused",
           fork_eperm ? "EPERM" : "not refused", sigsys ? "SIGSYS" : "not killed");
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "producer")) return role_producer(FRAMES, 0);
    if (argc == 2 && !strcmp(argv[1], "producer-sandboxed-first")) return role_producer(200, 1);
    if (argc == 2 && !strcmp(argv[1], "consumer-killed")) return role_consumer(400);
    if (argc == 2 && !strcmp(argv[1], "consumer")) return role_consumer(0);
    if (argc == 2 && !strcmp(argv[1], "violate")) return role_violate();
    if (argc != 1) {
        fprintf(stderr, "usage: test_renderer_policy\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    producer_1000_frames();
    attach_inside();
    enforced();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
