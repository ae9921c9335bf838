//! The `floor-2core` row: the same writing and reading as `floor`, but the writer
//! and the reader are threads of one process pinned to two different cores, and
//! each frame is handed over by pointer with a futex wake: the honest limit of any
//! zero-copy transport between processes, which also pays for every byte crossing
//! from one core's caches to the other's.
//!
//! What it does per record, and nothing more: the writer takes a buffer from its
//! stream's pool (the lowest free one, so a buffer just given back is reused while
//! its lines are still warm, as a pool allocator does), writes it, queues its index
//! and wakes the reader if (and only if) the reader sleeps; the reader reads and
//! checks every byte, gives the buffer back and wakes a writer only if one waits
//! for a buffer. Buffers and futex words live in shared memory (a memfd mapped
//! shared, futexes not process-private), as between two processes; a sleep has no
//! timer. The meeting's version pins every sending thread to one core and the
//! reader to the other.

use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use crossbeam_queue::ArrayQueue;

use crate::args::WorkerArgs;
use crate::kit::{cpu_s, produce, Checker, Pacer};
use crate::meeting;
use crate::report::WorkerReport;
use shmring_host::{alloc_count, futex_wait, futex_wake, SharedMemory};

type Res<T> = Result<T, String>;

/// Buffers per stream of the meeting (each stream's pool).
const MEETING_POOL: usize = 4;

/// A futex word with its waiter flag, on a cache line of its own.
#[repr(C, align(64))]
struct Wake {
    seq: AtomicU32,
    waiting: AtomicU32,
}

/// The data word has one sleeper at most (the reader)...
const ONE: bool = true;
/// ...the space word several (the meeting's writers).
const MANY: bool = false;

/// The first page of the shared mapping: the reader's and the writers' futexes.
#[repr(C)]
struct Words {
    /// Records queued (writers → reader).
    data: Wake,
    /// Buffers given back (reader → writers).
    space: Wake,
}

const PAGE: usize = 4096;

/// The futex page, then every stream's buffers.
struct Mapping(SharedMemory);

impl Mapping {
    fn new(len: usize, huge: bool) -> Res<Mapping> {
        let m = SharedMemory::create(c"shmring-bench-floor2", len)
            .map_err(|e| format!("shared memory for the two-core floor: {e}"))?;
        if huge {
            m.advise_huge();
        }
        Ok(Mapping(m))
    }

    fn words(&self) -> &Words {
        // SAFETY: the first page is ours, page-aligned, zero-filled (valid atomics)
        // and only ever accessed through atomics.
        unsafe { &*(self.0.ptr() as *const Words) }
    }
}

/// One stream's buffers: `count` buffers of `size` bytes, `stride` apart from
/// `base`, and a bit per free buffer.
struct Pool {
    base: usize,
    size: usize,
    stride: usize,
    free: Box<[AtomicU64]>,
}

impl Pool {
    fn new(base: usize, size: usize, count: usize) -> Pool {
        let words = count.div_ceil(64);
        let free: Box<[AtomicU64]> = (0..words)
            .map(|w| {
                let n = (count - w * 64).min(64);
                AtomicU64::new(if n == 64 { u64::MAX } else { (1u64 << n) - 1 })
            })
            .collect();
        Pool {
            base,
            size,
            stride: size.next_multiple_of(64),
            free,
        }
    }

    fn bytes(&self) -> usize {
        self.free.len() * 64 * self.stride
    }

    /// The lowest free buffer, taken (one writer per pool); None if all are out.
    fn take(&self) -> Option<usize> {
        for (w, word) in self.free.iter().enumerate() {
            // Relaxed: the reader's Release when it gave the buffer back pairs
            // with the Acquire of the fetch_and below.
            let v = word.load(Ordering::Relaxed);
            if v != 0 {
                let bit = v.trailing_zeros();
                // Acquire: the reader is done with the buffer before we write it.
                word.fetch_and(!(1u64 << bit), Ordering::Acquire);
                return Some(w * 64 + bit as usize);
            }
        }
        None
    }

    fn give_back(&self, i: usize) {
        // Release: our reading of the buffer happens before its next writer's.
        self.free[i / 64].fetch_or(1u64 << (i % 64), Ordering::Release);
    }
}

/// A record handed over: which stream, which of its buffers, its sequence number
/// and when it was queued.
#[derive(Clone, Copy)]
struct Item {
    stream: u32,
    buf: u32,
    seq: u64,
    ts: u64,
    end: bool,
}

/// The hand-off: buffers, the queue, the wake-ups.
struct Handoff {
    map: Mapping,
    pools: Vec<Pool>,
    queue: ArrayQueue<Item>,
}

impl Handoff {
    /// `sizes[s]` bytes per record of stream `s`, `count[s]` buffers each.
    fn new(sizes: &[usize], counts: &[usize], huge: bool) -> Res<Handoff> {
        let mut base = PAGE;
        let mut pools = Vec::new();
        for (&size, &count) in sizes.iter().zip(counts) {
            let p = Pool::new(base, size.max(1), count.max(1));
            base += p.bytes().next_multiple_of(PAGE);
            pools.push(p);
        }
        let slots = counts.iter().sum::<usize>() + sizes.len();
        Ok(Handoff {
            map: Mapping::new(base, huge)?,
            pools,
            queue: ArrayQueue::new(slots.max(1)),
        })
    }

    #[allow(clippy::mut_from_ref)]
    fn buffer(&self, stream: usize, i: usize) -> &mut [u8] {
        let p = &self.pools[stream];
        // SAFETY: buffer i of pool `stream` lies inside the mapping (the pools were
        // laid out in it back to back), and the pool hands it to one thread at a
        // time: the writer between take and push, the reader between pop and
        // give_back, ordered by the queue and the pool's Acquire/Release.
        unsafe {
            std::slice::from_raw_parts_mut(self.map.0.ptr().add(p.base + i * p.stride), p.size)
        }
    }

    /// Writer: a buffer of `stream`, waiting for one if all are out.
    fn take(&self, stream: usize) -> usize {
        let pool = &self.pools[stream];
        let space = &self.map.words().space;
        loop {
            if let Some(i) = pool.take() {
                return i;
            }
            sleep(space, MANY, || {
                pool.free.iter().any(|w| w.load(Ordering::Relaxed) != 0)
            });
        }
    }

    /// Writer: hands record `seq` in buffer `buf` of `stream` over.
    fn send(&self, stream: usize, buf: usize, seq: u64, end: bool) {
        let item = Item {
            stream: stream as u32,
            buf: buf as u32,
            seq,
            ts: shmring::now_ns(),
            end,
        };
        if self.queue.push(item).is_err() {
            unreachable!("the queue holds every buffer and every end");
        }
        signal(&self.map.words().data, ONE);
    }

    /// Reader: the next record, sleeping until there is one.
    fn recv(&self) -> Item {
        loop {
            if let Some(it) = self.queue.pop() {
                return it;
            }
            sleep(&self.map.words().data, ONE, || !self.queue.is_empty());
        }
    }

    /// Reader: done with `it`'s buffer.
    fn done(&self, it: &Item) {
        if !it.end {
            self.pools[it.stream as usize].give_back(it.buf as usize);
            signal(&self.map.words().space, MANY);
        }
    }
}

/// Waker: after the change, wakes the sleepers on `w` if there are any. The data
/// word has one sleeper at most (the reader), whose flag the first waker takes:
/// one system call per sleep, none while the reader is awake. The space word may
/// have several (the meeting's writers), counted, so one waking up cannot clear
/// another's mark.
fn signal(w: &Wake, one: bool) {
    // SeqCst: the change (queue, pool) before the flag load; pairs with `sleep`.
    fence(Ordering::SeqCst);
    if w.waiting.load(Ordering::Relaxed) == 0 {
        return;
    }
    // Relaxed: the fence above orders the change; the swap only decides which
    // waker of the one sleeper makes the call.
    if one && w.waiting.swap(0, Ordering::Relaxed) == 0 {
        return;
    }
    w.seq.fetch_add(1, Ordering::Release);
    futex_wake(&w.seq);
}

/// Sleeper: announces itself, re-checks `ready`, sleeps (no timer) until woken.
fn sleep(w: &Wake, one: bool, ready: impl Fn() -> bool) {
    if one {
        w.waiting.store(1, Ordering::Relaxed);
    } else {
        w.waiting.fetch_add(1, Ordering::Relaxed);
    }
    // SeqCst: the mark before the re-check; pairs with `signal`.
    fence(Ordering::SeqCst);
    let seen = w.seq.load(Ordering::Acquire);
    if !ready() {
        futex_wait(&w.seq, seen, None);
    }
    // Relaxed: only the count matters; a waker that still sees it wakes in vain.
    if one {
        w.waiting.store(0, Ordering::Relaxed);
    } else {
        w.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The cores this process may run on.
fn cores() -> Vec<usize> {
    // SAFETY: an all-zero cpu_set_t is an empty set, filled by the call.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: our own affinity into a valid set of the size given.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0
    {
        return Vec::new();
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: reads a bit of a valid set.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

/// Pins the calling thread to `core`.
fn pin(core: usize) -> Res<()> {
    // SAFETY: an all-zero cpu_set_t is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: sets a bit below CPU_SETSIZE in a valid set.
    unsafe { libc::CPU_SET(core, &mut set) };
    // SAFETY: the calling thread's affinity from a valid set.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Err(format!(
            "cannot pin a thread to core {core}: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// The writers' core and the reader's.
fn two_cores() -> Res<(usize, usize)> {
    match cores()[..] {
        [a, b, ..] => Ok((a, b)),
        _ => Err("the two-core floor needs two cores this process may run on".into()),
    }
}

/// The reader: checks every record until `ends` streams have ended; the
/// allocations of its own work per record are added to `allocs`.
fn read(h: &Handoff, ck: &mut Checker, ends: usize, allocs: &mut u64) {
    let mut ended = 0;
    while ended < ends {
        let it = h.recv();
        let before = alloc_count();
        if it.end {
            ck.end(it.stream as usize);
            ended += 1;
        } else {
            let now = shmring::now_ns();
            let buf = h.buffer(it.stream as usize, it.buf as usize);
            ck.frame_on(it.stream as usize, it.seq, u64::MAX, it.ts, now, buf);
        }
        h.done(&it);
        *allocs += alloc_count() - before;
    }
}

/// One stream: video or 4 KiB records, `a.size` bytes each.
pub fn run(a: &WorkerArgs) -> Res<WorkerReport> {
    let (wcore, rcore) = two_cores()?;
    let pool = ((a.ring_mib << 20) as usize / a.size.max(1)).clamp(2, 1 << 16);
    let h = Handoff::new(&[a.size], &[pool], a.huge_pages)?;
    let start = std::sync::Barrier::new(2);
    let (sent, cpu_mid, read) = std::thread::scope(|sc| {
        // A thread that cannot be pinned still does its part (so the other one
        // returns), and the run then fails.
        let reader = sc.spawn(|| -> Res<(Checker, u64)> {
            let pinned = pin(rcore);
            let mut ck = Checker::new(a.size);
            start.wait();
            let mut allocs = 0;
            read(&h, &mut ck, 1, &mut allocs);
            pinned.map(|_| (ck, allocs))
        });
        let writer = sc.spawn(|| -> Res<WorkerReport> {
            let pinned = pin(wcore);
            start.wait();
            let rep = pinned.and_then(|_| {
                produce(a, |p, seq| {
                    let i = h.take(0);
                    p.make(h.buffer(0, i), seq);
                    h.send(0, i, seq, false);
                    Ok(())
                })
            });
            // The end goes over even after a failure, so the reader returns.
            h.send(0, 0, 0, true);
            rep
        });
        let sent = writer
            .join()
            .unwrap_or_else(|_| Err("the writer panicked".into()));
        let cpu_mid = cpu_s();
        let read = reader
            .join()
            .unwrap_or_else(|_| Err("the reader panicked".into()));
        (sent, cpu_mid, read)
    });
    let (ck, reader_allocs) = read?;
    Ok(report(sent?, cpu_mid, ck, reader_allocs))
}

/// The meeting: every stream's thread writes on one core, one reader on the other.
pub fn meeting(a: &WorkerArgs, plan: &meeting::Streams) -> Res<WorkerReport> {
    let (wcore, rcore) = two_cores()?;
    let sizes = plan.sizes();
    let streams = sizes.len();
    let h = Handoff::new(&sizes, &vec![MEETING_POOL; streams], a.huge_pages)?;
    // Every stream ends, also after a failure, so the reader returns.
    struct Ender<'h>(&'h Handoff, usize);
    impl Drop for Ender<'_> {
        fn drop(&mut self) {
            self.0.send(self.1, 0, 0, true);
        }
    }
    let unpinned = std::sync::Mutex::new(None);
    // Made before the writers start counting allocations.
    let ck = Checker::streams(sizes.clone());
    let (sent, cpu_mid, read) = std::thread::scope(|sc| {
        let reader = sc.spawn(|| -> Res<(Checker, u64)> {
            let pinned = pin(rcore);
            let mut ck = ck;
            let mut allocs = 0;
            read(&h, &mut ck, streams, &mut allocs);
            pinned.map(|_| (ck, allocs))
        });
        let sent = meeting::produce_streams(
            a,
            plan,
            (0..streams).collect(),
            |stream| {
                if let Err(e) = pin(wcore) {
                    *unpinned.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                }
                Ok(Ender(&h, stream))
            },
            |e, p: &Pacer, stream, seq| {
                let i = e.0.take(stream);
                p.make(e.0.buffer(stream, i), seq);
                e.0.send(stream, i, seq, false);
                Ok(())
            },
            |_, _| Ok(()),
        );
        let cpu_mid = cpu_s();
        let read = reader
            .join()
            .unwrap_or_else(|_| Err("the reader panicked".into()));
        (sent, cpu_mid, read)
    });
    if let Some(e) = unpinned.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    let (ck, reader_allocs) = read?;
    Ok(report(sent?, cpu_mid, ck, reader_allocs))
}

/// One report for both threads: what the reader saw; the writers' start, and the
/// CPU of the process from then until the reader was done (the writers' loop CPU,
/// measured process-wide, plus the reader's last record after it, from
/// `cpu_mid`); the writers' allocations are those of the loop but the reader's.
fn report(sent: WorkerReport, cpu_mid: f64, ck: Checker, reader_allocs: u64) -> WorkerReport {
    let tail = cpu_s() - cpu_mid;
    let seen = ck.finish();
    WorkerReport {
        start_ns: sent.start_ns,
        loop_cpu_s: sent.loop_cpu_s + tail,
        allocs: sent.allocs.map(|n| n.saturating_sub(reader_allocs)),
        allocs_reader: sent.allocs.map(|_| reader_allocs),
        ..seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_hands_out_the_lowest_free_buffer() {
        let p = Pool::new(0, 100, 70);
        assert_eq!(p.stride, 128);
        assert_eq!(p.take(), Some(0));
        assert_eq!(p.take(), Some(1));
        p.give_back(0);
        assert_eq!(p.take(), Some(0), "the buffer just given back is reused");
        for i in 2..70 {
            assert_eq!(p.take(), Some(i));
        }
        assert_eq!(p.take(), None);
        p.give_back(65);
        assert_eq!(p.take(), Some(65));
    }

    #[test]
    fn records_cross_in_order_and_intact() {
        let h = Handoff::new(&[4096], &[3], false).expect("hand-off");
        std::thread::scope(|sc| {
            sc.spawn(|| {
                for seq in 0..1000u64 {
                    let i = h.take(0);
                    crate::work::fill_frame(h.buffer(0, i), seq);
                    h.send(0, i, seq, false);
                }
                h.send(0, 0, 0, true);
            });
            let mut ck = Checker::new(4096);
            let mut allocs = 0;
            read(&h, &mut ck, 1, &mut allocs);
            let rep = ck.finish();
            assert_eq!(
                (rep.frames, rep.bad_checksums, rep.bad_sequence),
                (1000, 0, 0)
            );
        });
    }
}
