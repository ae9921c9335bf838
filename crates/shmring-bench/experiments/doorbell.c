/*
 * The doorbell experiment: what a blocking consumer's wake-up costs, by kind of
 * doorbell, at a rate of small records (docs/RESULTS.md, "Small records").
 *
 * A producer process writes a 4 KiB record into shared memory every INTERVAL ns
 * (sleeping until each is due), publishes it and rings the doorbell if the
 * consumer said it sleeps; the consumer process reads every record (a sum over
 * its bytes) and, when it has caught up, says it sleeps and waits on the doorbell:
 * a futex on the shared sequence word (futex-timed: with a 50 ms timeout, as a
 * consumer that audits the ring while it sleeps waits), an eventfd, or a pipe.
 * Prints the CPU time (user + system) of each process per record.
 *
 *   cc -O2 -o doorbell crates/shmring-bench/experiments/doorbell.c
 *   ./doorbell futex 3 27300     # KIND SECONDS INTERVAL_NS (27300: 150 MB/s of 4 KiB)
 */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define REC 4096
#define SLOTS 256

struct page {
	_Atomic uint32_t seq;     /* records published */
	_Atomic uint32_t waiting; /* the consumer sleeps (or is about to) */
	_Atomic uint32_t done;
	unsigned char buf[SLOTS][REC];
};

enum kind { FUTEX, FUTEX_TIMED, EVENTFD, PIPE };
static enum kind kind;
static int efd, pipe_r, pipe_w;

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void ring_bell(struct page *p)
{
	if (!atomic_exchange(&p->waiting, 0))
		return;
	if (kind == FUTEX || kind == FUTEX_TIMED) {
		syscall(SYS_futex, &p->seq, FUTEX_WAKE, 1, NULL, NULL, 0);
	} else if (kind == EVENTFD) {
		uint64_t one = 1;
		if (write(efd, &one, sizeof one) < 0)
			perror("eventfd write");
	} else {
		char c = 1;
		if (write(pipe_w, &c, 1) < 0)
			perror("pipe write");
	}
}

static void wait_bell(struct page *p, uint32_t seen)
{
	atomic_store(&p->waiting, 1);
	/* Published meanwhile: no sleep (a bell rung anyway only wakes us early). */
	if (atomic_load(&p->seq) != seen || atomic_load(&p->done)) {
		atomic_store(&p->waiting, 0);
		return;
	}
	if (kind == FUTEX) {
		syscall(SYS_futex, &p->seq, FUTEX_WAIT, seen, NULL, NULL, 0);
	} else if (kind == FUTEX_TIMED) {
		struct timespec t = {0, 50000000};
		syscall(SYS_futex, &p->seq, FUTEX_WAIT, seen, &t, NULL, 0);
	} else if (kind == EVENTFD) {
		uint64_t v;
		if (read(efd, &v, sizeof v) < 0)
			perror("eventfd read");
	} else {
		char c;
		if (read(pipe_r, &c, 1) < 0)
			perror("pipe read");
	}
}

static double cpu_s(const struct rusage *r)
{
	return (double)r->ru_utime.tv_sec + r->ru_utime.tv_usec * 1e-6 +
	       (double)r->ru_stime.tv_sec + r->ru_stime.tv_usec * 1e-6;
}

int main(int argc, char **argv)
{
	static const char *const names[] = {"futex", "futex-timed", "eventfd", "pipe"};
	int k = -1;
	for (int i = 0; argc == 4 && i < 4; i++)
		if (!strcmp(argv[1], names[i]))
			k = i;
	if (k < 0) {
		fprintf(stderr, "usage: %s futex|futex-timed|eventfd|pipe SECONDS INTERVAL_NS\n",
			argv[0]);
		return 2;
	}
	kind = (enum kind)k;
	double seconds = atof(argv[2]), interval = atof(argv[3]);
	if (seconds <= 0 || interval <= 0) {
		fprintf(stderr, "SECONDS and INTERVAL_NS must be positive\n");
		return 2;
	}
	struct page *p = mmap(NULL, sizeof *p, PROT_READ | PROT_WRITE,
			      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	int fds[2];
	efd = eventfd(0, 0);
	if (p == MAP_FAILED || efd < 0 || pipe(fds) != 0) {
		perror("set-up");
		return 1;
	}
	pipe_r = fds[0];
	pipe_w = fds[1];

	pid_t consumer = fork();
	if (consumer == 0) {
		uint32_t seen = 0;
		uint64_t sum = 0;
		for (;;) {
			uint32_t s = atomic_load(&p->seq);
			if (s == seen) {
				if (atomic_load(&p->done))
					break;
				wait_bell(p, seen);
				continue;
			}
			for (; seen != s; seen++)
				for (int i = 0; i < REC; i += 8)
					sum += *(uint64_t *)(p->buf[seen % SLOTS] + i);
		}
		_exit(sum == 1); /* keeps the sum */
	}
	pid_t producer = fork();
	if (producer == 0) {
		uint64_t t0 = now_ns(), end = t0 + (uint64_t)(seconds * 1e9);
		for (uint32_t k = 0;; k++) {
			uint64_t due = t0 + (uint64_t)(k * interval);
			if (due >= end)
				break;
			struct timespec ts = {(time_t)(due / 1000000000u), (long)(due % 1000000000u)};
			clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
			memset(p->buf[k % SLOTS], (int)(k & 255), REC);
			atomic_store(&p->seq, k + 1);
			ring_bell(p);
		}
		atomic_store(&p->done, 1);
		atomic_store(&p->waiting, 1);
		ring_bell(p);
		_exit(0);
	}
	struct rusage rp, rc;
	wait4(producer, NULL, 0, &rp);
	wait4(consumer, NULL, 0, &rc);
	double records = seconds * 1e9 / interval;
	printf("%-8s consumer %.2f us a record, producer %.2f us a record\n", argv[1],
	       cpu_s(&rc) / records * 1e6, cpu_s(&rp) / records * 1e6);
	return 0;
}
