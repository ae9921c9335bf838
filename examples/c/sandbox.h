/*
 * sandbox.h: a seccomp-BPF allow-list for a shmring producer, installed after
 * attach. Anything not listed kills the process (SECCOMP_RET_KILL_PROCESS, SIGSYS).
 * The list is the one docs/SANDBOX.md derives; a browser sandbox would merge it
 * into its own policy.
 *
 *   futex                      space/data wake-ups (shared futex words)
 *   clock_gettime              timestamps and wait deadlines (normally vDSO, no syscall)
 *   write(eventfd_fd)          wake-ups on an eventfd ring (only that descriptor)
 *   write(diag_fd)             the application's own diagnostics (optional, e.g. 2)
 *   fcntl(F_GETLK)             "is a consumer alive?" after a wait for space times out
 *   fcntl(F_SETLK)             detach: drop the slot's record lock
 *   munmap, close              detach: unmap the ring, close its descriptors
 *   exit, exit_group, rt_sigreturn, restart_syscall
 */
#ifndef SHMRING_EXAMPLE_SANDBOX_H
#define SHMRING_EXAMPLE_SANDBOX_H

#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#if defined(__x86_64__)
#define SANDBOX_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define SANDBOX_ARCH AUDIT_ARCH_AARCH64
#else
#error "sandbox.h: add this architecture's AUDIT_ARCH value"
#endif

#define SB_LOAD(field) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, field))
#define SB_ALLOW BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)
#define SB_KILL BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS)
/* if nr == n: allow, else fall through */
#define SB_ALLOW_NR(n) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (n), 0, 1), SB_ALLOW

/* Installs the filter. `eventfd_fd` and `diag_fd` may be -1 (not allowed). Returns
 * 0, or -1 with errno set. */
static inline int sandbox_enter(int eventfd_fd, int diag_fd) {
    /* write(fd): allowed only for the two descriptors; -1 never matches a real fd
     * argument because the comparison is on the low 32 bits of a valid fd. */
    unsigned efd = eventfd_fd >= 0 ? (unsigned)eventfd_fd : 0xffffffffu;
    unsigned dfd = diag_fd >= 0 ? (unsigned)diag_fd : 0xffffffffu;
    struct sock_filter f[] = {
        SB_LOAD(arch),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SANDBOX_ARCH, 1, 0),
        SB_KILL,
        SB_LOAD(nr),
        SB_ALLOW_NR(__NR_futex),
        SB_ALLOW_NR(__NR_clock_gettime),
        SB_ALLOW_NR(__NR_munmap),
        SB_ALLOW_NR(__NR_close),
        SB_ALLOW_NR(__NR_exit),
        SB_ALLOW_NR(__NR_exit_group),
        SB_ALLOW_NR(__NR_rt_sigreturn),
        SB_ALLOW_NR(__NR_restart_syscall),
        /* write: check the descriptor */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_write, 0, 5),
        SB_LOAD(args[0]),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, efd, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, dfd, 1, 0),
        SB_KILL,
        SB_ALLOW,
        /* fcntl: only F_GETLK and F_SETLK */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_fcntl, 0, 5),
        SB_LOAD(args[1]),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, F_GETLK, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, F_SETLK, 1, 0),
        SB_KILL,
        SB_ALLOW,
        SB_KILL,
    };
    struct sock_fprog prog = {.len = (unsigned short)(sizeof f / sizeof f[0]), .filter = f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) return -1;
    return 0;
}

#endif
