//! The floor: the same writing and reading as every row, in one process, with no
//! transport.

use shmring_host::alloc_count;

use crate::args::WorkerArgs;
use crate::kit::{allocs_now, produce, Checker, Res};
use crate::report::WorkerReport;

pub fn run(a: &WorkerArgs) -> Res<WorkerReport> {
    let pool_frames = ((a.ring_mib << 20) as usize / a.size.max(1)).clamp(2, 1 << 16);
    let mut pool = vec![0u8; pool_frames * a.size];
    let mut checker = Checker::new(a.size);
    let mut reader_allocs = 0u64;
    let counting = allocs_now().is_some();
    checker.begin();
    let rep = produce(a, |p, seq| {
        let i = (seq as usize % pool_frames) * a.size;
        let buf = &mut pool[i..i + a.size];
        p.make(buf, seq);
        let ts = shmring::now_ns();
        let before = alloc_count();
        checker.frame(seq, u64::MAX, ts, shmring::now_ns(), buf);
        reader_allocs += alloc_count() - before;
        Ok(())
    })?;
    let seen = checker.finish();
    Ok(WorkerReport {
        allocs: rep.allocs.map(|w| w.saturating_sub(reader_allocs)),
        allocs_reader: counting.then_some(reader_allocs),
        ..WorkerReport {
            start_ns: rep.start_ns,
            loop_cpu_s: rep.loop_cpu_s,
            ..seen
        }
    })
}
