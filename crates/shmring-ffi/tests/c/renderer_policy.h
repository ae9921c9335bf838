/*
 * renderer_policy.h: a seccomp filter written from the rules of Chromium's
 * renderer policy (sandbox/policy/linux/bpf_renderer_policy_linux.cc) on top of
 * its baseline policy (sandbox/linux/seccomp-bpf-helpers/baseline_policy.cc,
 * syscall_sets.cc, syscall_parameters_restrictions.cc), x86_64, with libseccomp.
 * Where Chromium crashes the process (CrashSIGSYS), this filter kills it
 * (SECCOMP_RET_KILL_PROCESS); where Chromium returns an errno, so does this one.
 * docs/SANDBOX.md lists each rule and which call of a shmring producer needs it.
 *
 * Simplifications, each stricter than Chromium or equal for a producer:
 *  - fstatat(fd, "", AT_EMPTY_PATH), which Chromium's SIGSYS handler rewrites to
 *    fstat(fd), is allowed as is; any other fstatat is EPERM (Chromium: the
 *    file-system errno too). BPF cannot read the path, so "" is not checked.
 *  - Calls Chromium allows for some arguments and answers EPERM (or rewrites)
 *    for the others kill the process for the others here: get/setpriority,
 *    sched_getaffinity/getparam/getscheduler/setscheduler, prlimit64,
 *    rt_tgsigqueueinfo (only this process allowed). No producer makes them.
 *  - kill and tgkill are allowed towards this process only, tkill kills (as
 *    Chromium).
 */
#ifndef SHMRING_TEST_RENDERER_POLICY_H
#define SHMRING_TEST_RENDERER_POLICY_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <linux/stat.h>
#include <sched.h>
#include <seccomp.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#ifndef F_SEAL_SEAL
#define F_SEAL_SEAL 0x0001
#define F_SEAL_SHRINK 0x0002
#define F_SEAL_GROW 0x0004
#endif
#ifndef MAP_DENYWRITE
#define MAP_DENYWRITE 0x0800
#endif
#ifndef GRND_NONBLOCK
#define GRND_NONBLOCK 1
#endif
#ifndef MADV_FREE
#define MADV_FREE 8
#endif
/* DMA_BUF_IOCTL_SYNC: _IOW('b', 0, struct { __u64 flags; }) */
#define RP_DMA_BUF_IOCTL_SYNC _IOW('b', 0, uint64_t)

/* Adds one rule; any failure is remembered in *bad. */
#define RP_RULE(ctx, bad, action, name, ...)                                        \
    do {                                                                            \
        int rc_ = seccomp_rule_add((ctx), (action), SCMP_SYS(name), __VA_ARGS__);   \
        if (rc_ != 0) *(bad) = rc_;                                                 \
    } while (0)
#define RP_ERRNO(ctx, bad, e, name) RP_RULE(ctx, bad, SCMP_ACT_ERRNO(e), name, 0)
#define RP_COUNT(list) (sizeof(list) / sizeof((list)[0]))

/* Adds `action` for every call of `nrs`, whatever its arguments. */
static inline void rp_each(scmp_filter_ctx c, int *bad, uint32_t action, const int *nrs,
                           size_t n) {
    for (size_t i = 0; i < n; i++) {
        int rc = seccomp_rule_add(c, action, nrs[i], 0);
        if (rc != 0) *bad = rc;
    }
}

/* The calls the baseline and renderer policies allow with any argument. */
static inline void rp_allowed(scmp_filter_ctx c, int *bad) {
    static const int allowed[] = {
        /* IsAllowedAddressSpaceAccess */
        SCMP_SYS(brk), SCMP_SYS(mlock), SCMP_SYS(munlock), SCMP_SYS(munmap),
        /* IsAllowedBasicScheduler */
        SCMP_SYS(sched_yield), SCMP_SYS(pause), SCMP_SYS(nanosleep),
        /* IsAllowedEpoll, IsEventFd */
        SCMP_SYS(epoll_create), SCMP_SYS(epoll_wait), SCMP_SYS(epoll_pwait),
        SCMP_SYS(epoll_create1), SCMP_SYS(epoll_ctl), SCMP_SYS(eventfd),
        SCMP_SYS(eventfd2),
        /* IsAllowedFileSystemAccessViaFd */
        SCMP_SYS(fstat), SCMP_SYS(ftruncate),
        /* IsAllowedGeneralIo */
        SCMP_SYS(lseek), SCMP_SYS(poll), SCMP_SYS(ppoll), SCMP_SYS(pselect6),
        SCMP_SYS(read), SCMP_SYS(readv), SCMP_SYS(pread64), SCMP_SYS(recvfrom),
        SCMP_SYS(recvmsg), SCMP_SYS(select), SCMP_SYS(sendmsg), SCMP_SYS(sendto),
        SCMP_SYS(write), SCMP_SYS(writev),
        /* IsAllowedGetOrModifySocket */
        SCMP_SYS(pipe), SCMP_SYS(pipe2),
        /* IsAllowedGettime */
        SCMP_SYS(gettimeofday), SCMP_SYS(time),
        /* IsAllowedProcessStartOrDeath */
        SCMP_SYS(exit), SCMP_SYS(exit_group), SCMP_SYS(wait4), SCMP_SYS(waitid),
        /* IsAllowedSignalHandling */
        SCMP_SYS(rt_sigaction), SCMP_SYS(rt_sigprocmask), SCMP_SYS(rt_sigreturn),
        SCMP_SYS(rt_sigtimedwait), SCMP_SYS(sigaltstack),
        /* IsGetSimpleId */
        SCMP_SYS(capget), SCMP_SYS(getegid), SCMP_SYS(geteuid), SCMP_SYS(getgid),
        SCMP_SYS(getgroups), SCMP_SYS(getpid), SCMP_SYS(getppid), SCMP_SYS(getresgid),
        SCMP_SYS(getsid), SCMP_SYS(gettid), SCMP_SYS(getuid), SCMP_SYS(getresuid),
        /* IsKernelInternalApi */
        SCMP_SYS(restart_syscall),
        /* IsAllowedOperationOnFd */
        SCMP_SYS(close), SCMP_SYS(dup), SCMP_SYS(dup2), SCMP_SYS(dup3), SCMP_SYS(shutdown),
        /* Baseline, one by one */
        SCMP_SYS(uname), SCMP_SYS(rseq), SCMP_SYS(pkey_free), SCMP_SYS(mincore),
        SCMP_SYS(memfd_create),
        /* The content base policy: set_robust_list (baseline: EPERM) */
        SCMP_SYS(set_robust_list),
        /* The renderer's additions */
        SCMP_SYS(fdatasync), SCMP_SYS(fsync), SCMP_SYS(getrlimit), SCMP_SYS(setrlimit),
        SCMP_SYS(mremap), SCMP_SYS(pwrite64), SCMP_SYS(sched_get_priority_max),
        SCMP_SYS(sched_get_priority_min), SCMP_SYS(sysinfo), SCMP_SYS(times),
    };
    rp_each(c, bad, SCMP_ACT_ALLOW, allowed, RP_COUNT(allowed));
}

/* The calls denied with an errno, whatever their arguments. */
static inline void rp_denied(scmp_filter_ctx c, int *bad) {
    /* IsSendfile: EPERM, so a caller falls back to read/write */
    RP_ERRNO(c, bad, EPERM, sendfile);
    /* clone3: its flags are behind a pointer: ENOSYS, libc falls back to clone */
    RP_ERRNO(c, bad, ENOSYS, clone3);
    RP_ERRNO(c, bad, ENOSYS, pidfd_open);
    /* fork and vfork: EPERM */
    RP_ERRNO(c, bad, EPERM, fork); RP_ERRNO(c, bad, EPERM, vfork);
    /* IsFileSystem, IsCurrentDirectory: the file-system errno, EPERM */
    static const int fs[] = {
        SCMP_SYS(access), SCMP_SYS(chmod), SCMP_SYS(chown), SCMP_SYS(creat),
        SCMP_SYS(futimesat), SCMP_SYS(lchown), SCMP_SYS(link), SCMP_SYS(lstat),
        SCMP_SYS(mkdir), SCMP_SYS(mknod), SCMP_SYS(open), SCMP_SYS(readlink),
        SCMP_SYS(rename), SCMP_SYS(rmdir), SCMP_SYS(stat), SCMP_SYS(symlink),
        SCMP_SYS(unlink), SCMP_SYS(uselib), SCMP_SYS(ustat), SCMP_SYS(utimes),
        SCMP_SYS(execve), SCMP_SYS(faccessat), SCMP_SYS(faccessat2), SCMP_SYS(fchmodat),
        SCMP_SYS(fchownat), SCMP_SYS(linkat), SCMP_SYS(lookup_dcookie), SCMP_SYS(mkdirat),
        SCMP_SYS(mknodat), SCMP_SYS(openat), SCMP_SYS(readlinkat), SCMP_SYS(renameat),
        SCMP_SYS(renameat2), SCMP_SYS(statfs), SCMP_SYS(symlinkat), SCMP_SYS(truncate),
        SCMP_SYS(unlinkat), SCMP_SYS(utime), SCMP_SYS(utimensat),
        SCMP_SYS(getcwd), SCMP_SYS(chdir), SCMP_SYS(fchdir),
        /* IsSeccomp, IsAnySystemV, IsUmask, IsDeniedFileSystemAccessViaFd,
           IsDeniedGetOrModifySocket, IsProcessPrivilegeChange */
        SCMP_SYS(seccomp), SCMP_SYS(msgctl), SCMP_SYS(msgget), SCMP_SYS(msgrcv),
        SCMP_SYS(msgsnd), SCMP_SYS(semctl), SCMP_SYS(semget), SCMP_SYS(semop),
        SCMP_SYS(semtimedop), SCMP_SYS(shmat), SCMP_SYS(shmctl), SCMP_SYS(shmdt),
        SCMP_SYS(shmget), SCMP_SYS(umask), SCMP_SYS(fallocate), SCMP_SYS(fchmod),
        SCMP_SYS(fchown), SCMP_SYS(getdents), SCMP_SYS(getdents64), SCMP_SYS(accept),
        SCMP_SYS(accept4), SCMP_SYS(bind), SCMP_SYS(connect), SCMP_SYS(socket),
        SCMP_SYS(listen), SCMP_SYS(capset), SCMP_SYS(ioperm), SCMP_SYS(iopl),
        SCMP_SYS(setfsgid), SCMP_SYS(setfsuid), SCMP_SYS(setgid), SCMP_SYS(setgroups),
        SCMP_SYS(setregid), SCMP_SYS(setresgid), SCMP_SYS(setresuid), SCMP_SYS(setreuid),
        SCMP_SYS(setuid),
    };
    rp_each(c, bad, SCMP_ACT_ERRNO(EPERM), fs, RP_COUNT(fs));
}

/* The calls allowed for some arguments only (syscall_parameters_restrictions.cc). */
static inline void rp_restricted(scmp_filter_ctx c, int *bad, pid_t self) {
    /* RestrictFcntlCommands */
    static const int cmds[] = {F_GETFL, F_GETFD, F_GET_SEALS, F_SETFD, F_SETLK,
                               F_SETLKW, F_GETLK, F_DUPFD, F_DUPFD_CLOEXEC};
    for (size_t i = 0; i < RP_COUNT(cmds); i++)
        RP_RULE(c, bad, SCMP_ACT_ALLOW, fcntl, 1, SCMP_A1(SCMP_CMP_EQ, (scmp_datum_t)cmds[i]));
    const uint64_t setfl = O_ACCMODE | O_APPEND | O_NONBLOCK | O_SYNC | 0100000 /* O_LARGEFILE */ |
                           O_CLOEXEC | O_NOATIME;
    RP_RULE(c, bad, SCMP_ACT_ALLOW, fcntl, 2, SCMP_A1(SCMP_CMP_EQ, F_SETFL),
            SCMP_A2(SCMP_CMP_MASKED_EQ, ~setfl, 0));
    const uint64_t seals = F_SEAL_SEAL | F_SEAL_GROW | F_SEAL_SHRINK;
    RP_RULE(c, bad, SCMP_ACT_ALLOW, fcntl, 2, SCMP_A1(SCMP_CMP_EQ, F_ADD_SEALS),
            SCMP_A2(SCMP_CMP_MASKED_EQ, ~seals, 0));
    /* RestrictFutex: op & ~(FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME) among these
       (no priority inheritance, no requeue-PI); anything else kills (Chromium on
       glibc answers EINVAL instead, for a glibc sem_post bug). */
    static const int ops[] = {FUTEX_WAIT, FUTEX_WAKE, FUTEX_REQUEUE, FUTEX_CMP_REQUEUE,
                              FUTEX_WAKE_OP, FUTEX_WAIT_BITSET, FUTEX_WAKE_BITSET};
    const uint64_t op_mask = ~(uint64_t)(FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME);
    for (size_t i = 0; i < RP_COUNT(ops); i++)
        RP_RULE(c, bad, SCMP_ACT_ALLOW, futex, 1,
                SCMP_A1(SCMP_CMP_MASKED_EQ, op_mask, (scmp_datum_t)ops[i]));
    /* RestrictClockID: clock_gettime, clock_nanosleep; clock_getres (renderer) */
    static const int clocks[] = {CLOCK_BOOTTIME, CLOCK_MONOTONIC, CLOCK_MONOTONIC_COARSE,
                                 CLOCK_MONOTONIC_RAW, CLOCK_PROCESS_CPUTIME_ID,
                                 CLOCK_REALTIME, CLOCK_REALTIME_COARSE,
                                 CLOCK_THREAD_CPUTIME_ID};
    for (size_t i = 0; i < RP_COUNT(clocks); i++) {
        scmp_datum_t id = (scmp_datum_t)clocks[i];
        RP_RULE(c, bad, SCMP_ACT_ALLOW, clock_gettime, 1, SCMP_A0(SCMP_CMP_EQ, id));
        RP_RULE(c, bad, SCMP_ACT_ALLOW, clock_nanosleep, 1, SCMP_A0(SCMP_CMP_EQ, id));
        RP_RULE(c, bad, SCMP_ACT_ALLOW, clock_getres, 1, SCMP_A0(SCMP_CMP_EQ, id));
    }
    /* RestrictCloneToThreadsAndEPERMFork: glibc's pthread flags allowed; a fork
       (neither CLONE_VM nor CLONE_THREAD) or a vfork (CLONE_VFORK|CLONE_VM): EPERM */
    const uint64_t pthread = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD |
                             CLONE_SYSVSEM | CLONE_SETTLS | CLONE_PARENT_SETTID |
                             CLONE_CHILD_CLEARTID;
    RP_RULE(c, bad, SCMP_ACT_ALLOW, clone, 1, SCMP_A0(SCMP_CMP_EQ, pthread));
    RP_RULE(c, bad, SCMP_ACT_ERRNO(EPERM), clone, 1,
            SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_VM | CLONE_THREAD, 0));
    RP_RULE(c, bad, SCMP_ACT_ERRNO(EPERM), clone, 1,
            SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_VFORK | CLONE_VM, CLONE_VFORK | CLONE_VM));
    /* RestrictMmapFlags: no MAP_POPULATE, MAP_HUGETLB or newer flags */
    const uint64_t map = MAP_SHARED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK | MAP_NORESERVE |
                         MAP_FIXED | MAP_DENYWRITE | MAP_LOCKED;
    RP_RULE(c, bad, SCMP_ACT_ALLOW, mmap, 1, SCMP_A3(SCMP_CMP_MASKED_EQ, ~map, 0));
    /* RestrictMprotectFlags */
    const uint64_t prot = PROT_READ | PROT_WRITE | PROT_EXEC;
    RP_RULE(c, bad, SCMP_ACT_ALLOW, mprotect, 1, SCMP_A2(SCMP_CMP_MASKED_EQ, ~prot, 0));
    RP_RULE(c, bad, SCMP_ACT_ALLOW, pkey_mprotect, 1, SCMP_A2(SCMP_CMP_MASKED_EQ, ~prot, 0));
    /* RestrictPkeyAllocFlags */
    RP_RULE(c, bad, SCMP_ACT_ALLOW, pkey_alloc, 1, SCMP_A0(SCMP_CMP_EQ, 0));
    /* madvise: DONTNEED, RANDOM, REMOVE, NORMAL, FREE; any other advice EPERM */
    static const int advice[] = {MADV_DONTNEED, MADV_RANDOM, MADV_REMOVE, MADV_NORMAL, MADV_FREE};
    for (size_t i = 0; i < RP_COUNT(advice); i++)
        RP_RULE(c, bad, SCMP_ACT_ALLOW, madvise, 1,
                SCMP_A2(SCMP_CMP_EQ, (scmp_datum_t)advice[i]));
    for (int a = 0; a <= MADV_REMOVE; a++) {
        int listed = 0;
        for (size_t i = 0; i < RP_COUNT(advice); i++) listed |= a == advice[i];
        if (!listed)
            RP_RULE(c, bad, SCMP_ACT_ERRNO(EPERM), madvise, 1,
                    SCMP_A2(SCMP_CMP_EQ, (scmp_datum_t)a));
    }
    RP_RULE(c, bad, SCMP_ACT_ERRNO(EPERM), madvise, 1, SCMP_A2(SCMP_CMP_GT, MADV_REMOVE));
    /* RestrictPrctl */
    static const int prctls[] = {PR_GET_NAME, PR_SET_NAME, PR_GET_DUMPABLE, PR_SET_DUMPABLE};
    for (size_t i = 0; i < RP_COUNT(prctls); i++)
        RP_RULE(c, bad, SCMP_ACT_ALLOW, prctl, 1, SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)prctls[i]));
    RP_RULE(c, bad, SCMP_ACT_ERRNO(EPERM), prctl, 1, SCMP_A0(SCMP_CMP_EQ, PR_SET_PTRACER));
    /* socketpair: AF_UNIX only */
    RP_RULE(c, bad, SCMP_ACT_ALLOW, socketpair, 1, SCMP_A0(SCMP_CMP_EQ, AF_UNIX));
    /* RestrictGetRandom */
    RP_RULE(c, bad, SCMP_ACT_ALLOW, getrandom, 1,
            SCMP_A2(SCMP_CMP_MASKED_EQ, ~(scmp_datum_t)GRND_NONBLOCK, 0));
    /* RestrictKillTarget: kill and tgkill of this process; tkill kills */
    RP_RULE(c, bad, SCMP_ACT_ALLOW, kill, 1, SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)self));
    RP_RULE(c, bad, SCMP_ACT_ALLOW, tgkill, 1, SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)self));
    RP_RULE(c, bad, SCMP_ACT_ALLOW, rt_tgsigqueueinfo, 1,
            SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)self));
    /* fstatat: see the simplifications above; statx: ENOSYS for the basic mask
       (libc falls back to fstat), else EPERM */
    RP_RULE(c, bad, SCMP_ACT_ALLOW, newfstatat, 1, SCMP_A3(SCMP_CMP_EQ, AT_EMPTY_PATH));
    RP_RULE(c, bad, SCMP_ACT_ERRNO(EPERM), newfstatat, 1, SCMP_A3(SCMP_CMP_NE, AT_EMPTY_PATH));
    RP_RULE(c, bad, SCMP_ACT_ERRNO(ENOSYS), statx, 1, SCMP_A3(SCMP_CMP_EQ, STATX_BASIC_STATS));
    RP_RULE(c, bad, SCMP_ACT_ERRNO(EPERM), statx, 1, SCMP_A3(SCMP_CMP_NE, STATX_BASIC_STATS));
    /* get/setsockopt: SOL_SOCKET, SO_PEEK_OFF only (Mojo) */
    RP_RULE(c, bad, SCMP_ACT_ALLOW, getsockopt, 2, SCMP_A1(SCMP_CMP_EQ, SOL_SOCKET),
            SCMP_A2(SCMP_CMP_EQ, SO_PEEK_OFF));
    RP_RULE(c, bad, SCMP_ACT_ALLOW, setsockopt, 2, SCMP_A1(SCMP_CMP_EQ, SOL_SOCKET),
            SCMP_A2(SCMP_CMP_EQ, SO_PEEK_OFF));
    /* The renderer's ioctl: TCGETS, FIONREAD, DMA_BUF_IOCTL_SYNC */
    RP_RULE(c, bad, SCMP_ACT_ALLOW, ioctl, 1, SCMP_A1(SCMP_CMP_EQ, TCGETS));
    RP_RULE(c, bad, SCMP_ACT_ALLOW, ioctl, 1, SCMP_A1(SCMP_CMP_EQ, FIONREAD));
    RP_RULE(c, bad, SCMP_ACT_ALLOW, ioctl, 1, SCMP_A1(SCMP_CMP_EQ, RP_DMA_BUF_IOCTL_SYNC));
    /* The renderer's getpriority, setpriority, sched_ calls and prlimit64: on this
       process only (see the simplifications above) */
    RP_RULE(c, bad, SCMP_ACT_ALLOW, getpriority, 2, SCMP_A0(SCMP_CMP_EQ, PRIO_PROCESS),
            SCMP_A1(SCMP_CMP_EQ, 0));
    RP_RULE(c, bad, SCMP_ACT_ALLOW, setpriority, 2, SCMP_A0(SCMP_CMP_EQ, PRIO_PROCESS),
            SCMP_A1(SCMP_CMP_EQ, 0));
    static const int sched[] = {SCMP_SYS(sched_getaffinity), SCMP_SYS(sched_getparam),
                                SCMP_SYS(sched_getscheduler), SCMP_SYS(sched_setscheduler),
                                SCMP_SYS(prlimit64)};
    for (size_t i = 0; i < RP_COUNT(sched); i++) {
        int rc = seccomp_rule_add(c, SCMP_ACT_ALLOW, sched[i], 1, SCMP_A0(SCMP_CMP_EQ, 0));
        if (rc != 0) *bad = rc;
        rc = seccomp_rule_add(c, SCMP_ACT_ALLOW, sched[i], 1,
                              SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)self));
        if (rc != 0) *bad = rc;
    }
}

/* Enters the policy: sets no_new_privs and loads the filter. Anything it does not
 * allow or answer with an errno kills the process (SIGSYS). Returns 0, or a
 * negative libseccomp error. */
static inline int renderer_policy_enter(void) {
    scmp_filter_ctx c = seccomp_init(SCMP_ACT_KILL_PROCESS);
    if (!c) return -ENOMEM;
    int bad = 0;
    /* A call of another architecture (i386 through int 0x80) is killed too:
       libseccomp's default for a foreign architecture. */
    rp_allowed(c, &bad);
    rp_denied(c, &bad);
    rp_restricted(c, &bad, getpid());
    int rc = bad ? bad : seccomp_load(c);
    seccomp_release(c);
    return rc;
}

#endif
